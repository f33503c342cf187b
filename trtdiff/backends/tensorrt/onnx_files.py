"""Write an ONNX model for TensorRT's parser, which reads files: over 2 GB, with its weights beside it.

A protobuf message cannot exceed 2 GB, so `onnx.save` fails on a large model unless its
weights go to an external-data file; TensorRT's parser reads such files (it resolves the
weights' location next to the model). The model given is never changed: a copy is written.
"""

from __future__ import annotations

from pathlib import Path

import onnx

# Above this many bytes of protobuf, weights are written to `NAME.data` beside the model
# (protobuf's hard limit is 2 GiB; the margin leaves room for the graph itself).
EXTERNAL_DATA_ABOVE = 1_800_000_000


def save_for_parser(model: onnx.ModelProto, path: Path, *, external_above: int = EXTERNAL_DATA_ABOVE) -> Path:
    """Save `model` at `path`, its weights in `path.name + ".data"` when the model is over `external_above` bytes."""
    if model.ByteSize() <= external_above:
        onnx.save(model, str(path))
        return path
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # save_model moves the weights out of the message it is given
    onnx.save_model(
        copy,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{path.name}.data",
        size_threshold=1024,
    )
    return path
