"""Write the embedded DeepLabV3+ in every format `trtdiff compare` loads, to try each one.

python examples/make_model_files.py out/
trtdiff compare out/deeplab_torchscript.pt --opset 10 --input-shape 1x3x128x128
trtdiff compare out/deeplab.pt2 --opset 18 --input-shape 1x3x128x128
trtdiff compare out/deeplab_state_dict.pt --model-class trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet --input-shape 1x3x128x128
trtdiff compare out/deeplab_pickled.pt --trust --input-shape 1x3x128x128
trtdiff compare trtdiff.examples.mobilenetv2:deeplabv3plus_mobilenetv2 --opset 13 --input-shape 1x3x128x128
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model = deeplabv3plus_resnet()
    example = torch.zeros(1, 3, 128, 128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(model, example), str(folder / "deeplab_torchscript.pt"))
    torch.export.save(torch.export.export(model, (example,)), str(folder / "deeplab.pt2"))
    torch.save(model.state_dict(), folder / "deeplab_state_dict.pt")
    torch.save(model, folder / "deeplab_pickled.pt")
    for path in sorted(folder.iterdir()):
        print(path)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "model-files"))
