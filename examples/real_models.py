"""Try trtdiff on real library models (random weights) where timm, torchvision and transformers exist.

    PYTHONPATH=$PWD python3 examples/real_models.py --out results.jsonl [--models convnext_atto,...]

Each model is exported at opset 17 (TorchScript exporter) and 18 (dynamo) and compared with
ONNX Runtime; one JSON line per run: passed, the paired share of float tensors, culprits,
first divergence, seconds. A clean export of a correct model must pass: any failure here
is a false alarm to fix. Nothing is downloaded (random weights).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

SHAPE = "1x3x224x224"


def _timm(name: str, **kwargs: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, **kwargs)

    return build


def _torchvision(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        return getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)

    return build


def _segformer() -> torch.nn.Module:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    config = SegformerConfig(num_labels=5, hidden_sizes=[16, 32, 64, 128], decoder_hidden_size=64)
    model = SegformerForSemanticSegmentation(config)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=x).logits

    return Logits()


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], str]] = {
    "resnet18": (_timm("resnet18"), SHAPE),
    "mobilenetv3_small_100": (_timm("mobilenetv3_small_100"), SHAPE),
    "efficientnet_b0": (_timm("efficientnet_b0"), SHAPE),
    "convnext_atto": (_timm("convnext_atto"), SHAPE),
    "vit_tiny_patch16_224": (_timm("vit_tiny_patch16_224"), SHAPE),
    "swin_tiny_patch4_window7_224": (_timm("swin_tiny_patch4_window7_224"), SHAPE),
    "deeplabv3_mobilenet_v3_large": (_torchvision("deeplabv3_mobilenet_v3_large"), "1x3x256x256"),
    "segformer": (_segformer, "1x3x128x128"),
}


def run_one(name: str, opset: int, exporter: str, device: str) -> dict[str, Any]:
    import trtdiff

    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    started = time.perf_counter()
    try:
        report = trtdiff.compare(
            model,
            input_shapes=[shape],
            opset=opset,
            exporter=exporter,
            torch_device=device,
            backends=["torch", "onnxruntime"],
        )
    except Exception as error:  # noqa: BLE001 - a survey: record and go on
        return {
            "model": name,
            "opset": opset,
            "exporter": exporter,
            "error": f"{type(error).__name__}: {error}",
            "trace": traceback.format_exc()[-1500:],
        }
    pairing = report.pairing
    first = report.first_divergence
    return {
        "model": name,
        "opset": report.opset,
        "exporter": report.exporter,
        "device": device,
        "passed": report.passed,
        "paired": f"{pairing.float_paired}/{pairing.float_tensors}",
        "share": round(pairing.float_paired / max(pairing.float_tensors, 1), 3),
        "culprits": [c.onnx_node for c in report.culprits],
        "first_divergence": f"{first.onnx_node} ({first.op_type})" if first else None,
        "diverged_layers": sum(layer.diverged for layer in report.layers),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", default="17:torchscript,18:dynamo")
    parser.add_argument("--device", default="cpu", help="where the PyTorch reference runs")
    parser.add_argument("--out", default="real_models.jsonl")
    args = parser.parse_args()
    with open(args.out, "w") as out:
        for name in args.models.split(","):
            for run in args.runs.split(","):
                opset, exporter = run.split(":")
                result = run_one(name, int(opset), exporter, args.device)
                print(json.dumps({k: v for k, v in result.items() if k != "trace"}), flush=True)
                out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
