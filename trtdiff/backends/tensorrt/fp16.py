"""FP16 for strongly typed TensorRT (TRT 11, TensorRT-RTX): convert the ONNX model's own types.

Those builders have no FP16 flag: a layer runs in FP16 only if the network says so. We use
onnxconverter-common's `float16.convert_float_to_float16(keep_io_types=True)`, which keeps
its block list (Resize, TopK, Range, ... stay FP32 between Casts) and every value name, so
intermediates still compare by their ONNX names. One fix on top: when a graph output comes
from a blocked op, 1.16.0 leaves that output FP16 despite keep_io_types; we cast it back.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from trtdiff.errors import OptionError, param

CONVERTER = "onnxconverter-common"
CONVERTER_HINT = "pip install onnxconverter-common==1.16.0"


@dataclass(frozen=True)
class Fp16Conversion:
    """The converted model and what the conversion did."""

    model: onnx.ModelProto
    converter: str
    kept_fp32_ops: tuple[str, ...]
    fixed_outputs: tuple[str, ...]
    truncated_warnings: int = 0

    def note(self) -> str:
        kept = ", ".join(self.kept_fp32_ops) or "none"
        fixed = f"; cast outputs {', '.join(self.fixed_outputs)} back to FP32" if self.fixed_outputs else ""
        if self.truncated_warnings:
            fixed += f"; {self.truncated_warnings} converter warnings of weights moved into [1e-7, 1e4] in magnitude"
        return (
            f"fp16: this TensorRT is strongly typed (no FP16 builder flag), so the ONNX model was converted with "
            f"{self.converter} float16.convert_float_to_float16(keep_io_types=True); "
            f"node types kept FP32: {kept}{fixed}"
        )


def convert_to_fp16(model: onnx.ModelProto) -> Fp16Conversion:
    """Convert float32 weights and values to float16, keeping graph inputs/outputs float32."""
    try:
        import onnxconverter_common
        from onnxconverter_common import float16
    except ImportError as error:
        raise OptionError(
            f"{param('precision')} on a strongly typed TensorRT needs {CONVERTER}: {CONVERTER_HINT}"
        ) from error
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        converted = float16.convert_float_to_float16(model, keep_io_types=True)
    truncated = sum(1 for w in caught if "truncated" in str(w.message))
    fixed = _restore_float_outputs(model, converted)
    present = {node.op_type for node in model.graph.node}
    kept = tuple(sorted(present & set(float16.DEFAULT_OP_BLOCK_LIST)))
    return Fp16Conversion(converted, f"{CONVERTER} {onnxconverter_common.__version__}", kept, fixed, truncated)


def _restore_float_outputs(original: onnx.ModelProto, converted: onnx.ModelProto) -> tuple[str, ...]:
    """Cast graph outputs that were FLOAT in `original` but came out FLOAT16 back to FLOAT, in place."""
    was_float = {o.name for o in original.graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    fixed: list[str] = []
    for output in converted.graph.output:
        if output.name not in was_float or output.type.tensor_type.elem_type != TensorProto.FLOAT16:
            continue
        half_name = f"{output.name}_fp16"
        for node in converted.graph.node:
            node.output[:] = [half_name if o == output.name else o for o in node.output]
            node.input[:] = [half_name if i == output.name else i for i in node.input]
        converted.graph.node.append(
            helper.make_node("Cast", [half_name], [output.name], name=f"{output.name}_to_fp32", to=TensorProto.FLOAT)
        )
        output.type.tensor_type.elem_type = TensorProto.FLOAT
        fixed.append(output.name)
    return tuple(fixed)
