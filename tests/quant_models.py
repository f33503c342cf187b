"""Small float CNNs and their QDQ files (onnxruntime.quantization.quantize_static), for the quantized tests.

Calibration and compare inputs come from one distribution (standard normal), a few batches,
the compare input (trtdiff's seeded random input, seed 0) among them, as a user calibrating on
the data they validate with would: min-max calibration clips whatever lies past the range it
saw, and that clipping (a real error, upstream of everything) is not what these models test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

SHAPE = (1, 3, 16, 16)


class SmallCnn(nn.Module):
    """Conv-ReLU x3 with a residual add: quantize_static folds each ReLU into the Q/DQ after its Conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 4, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.conv1(x))
        z = self.relu(self.conv2(y))
        return self.conv3(z + y)


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return SmallCnn().eval()


def quantized(model: nn.Module, folder: Path, activation: str = "int8", weight: str = "int8") -> Path:
    """Export `model` at opset 17 and write its QDQ file (`activation`/`weight`: "int8", "uint8", "int16", "uint16")."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8, "int16": QuantType.QInt16, "uint16": QuantType.QUInt16}
    float_path = folder / "float.onnx"
    torch.onnx.export(model, (torch.zeros(SHAPE),), str(float_path), opset_version=17, dynamo=False, input_names=["x"])

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            rngs = [np.random.default_rng(seed) for seed in range(8)]  # seed 0: trtdiff's own random input
            self.batches = iter([{"x": rng.standard_normal(SHAPE, dtype=np.float32)} for rng in rngs])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.batches, None)

    qdq_path = folder / f"qdq_{activation}_{weight}.onnx"
    quantize_static(
        str(float_path),
        str(qdq_path),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=types[activation],
        weight_type=types[weight],
    )
    return qdq_path


def scale_dequantize(path: Path, tensor: str, factor: float, out: Path) -> str:
    """Give the DequantizeLinear that produces `tensor` its own scale, `factor` times the one it
    shares with its QuantizeLinear (a Q and DQ that no longer agree); returns that node's name."""
    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == tensor)
    init = next(i for i in model.graph.initializer if i.name == node.input[1])
    value = (onnx.numpy_helper.to_array(init) * np.float32(factor)).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(value, init.name + "_edited"))
    node.input[1] = init.name + "_edited"
    onnx.save(model, str(out))
    return node.name
