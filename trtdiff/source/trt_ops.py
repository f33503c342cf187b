"""TensorRT's own Q/DQ ops, read as the standard ONNX ops they stand for.

ModelOpt's PyTorch route (`mtq.quantize`, then `torch.onnx.export` with the TorchScript exporter)
writes what ONNX could not say at the opset it exports to, in TensorRT's `trt` domain: FP8 as
`trt::TRT_FP8QuantizeLinear(x, scale)` / `trt::TRT_FP8DequantizeLinear(q, scale)`. ONNX Runtime
and the ONNX reference evaluator know neither, so such a file could not be compared at all. Each
is exactly the standard op of opset 19 with a float8e4m3fn zero point of 0 (what selects FP8
there). The graph is moved to opset 19 first by ONNX's own version converter, which leaves the
`trt` nodes as they are.

Not read yet: its INT4 weights, `trt::DequantizeLinear` with `axis` and `block_size`, whose input
the export leaves as float weights (values of +-0.125, no integers) and whose `axis` names another
axis than ONNX's blockwise DequantizeLinear: what TensorRT computes there is not stated in a way
this module could check, so it is left as it is (the runtimes then say they do not know it).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

TRT_DOMAIN = "trt"
_STANDARD = {"TRT_FP8QuantizeLinear": "QuantizeLinear", "TRT_FP8DequantizeLinear": "DequantizeLinear"}
_OPSET = 19  # FP8 QuantizeLinear and DequantizeLinear


def has_trt_ops(model: onnx.ModelProto) -> bool:
    """Whether `model` holds a node of TensorRT's `trt` domain."""
    return any(node.domain == TRT_DOMAIN for node in model.graph.node)


def standard_ops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """`model` with every `trt` Q/DQ node written as its standard op (see the module docstring), and a note
    saying what was read how; `model` itself, and no note, where it holds none. An unknown `trt` op is left
    as it is (the runtime then says it does not know it)."""
    found = [node.op_type for node in model.graph.node if node.domain == TRT_DOMAIN and node.op_type in _STANDARD]
    if not found:
        return model, ()
    from onnx import version_converter

    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), _OPSET)
    converted = version_converter.convert_version(model, _OPSET) if current < _OPSET else _copy(model)
    retyped: set[str] = set()
    for node in converted.graph.node:
        if node.domain != TRT_DOMAIN or node.op_type not in _STANDARD:
            continue
        retyped.update(node.output)  # the exporter typed a trt op's output its own way (uint8 for FP8)
        node.domain, node.op_type = "", _STANDARD[node.op_type]
        node.input.append(_fp8_zero(converted, node.name or node.output[0]))
    kept_info = [v for v in converted.graph.value_info if v.name not in retyped]
    del converted.graph.value_info[:]
    converted.graph.value_info.extend(kept_info)
    if not has_trt_ops(converted):
        kept = [o for o in converted.opset_import if o.domain != TRT_DOMAIN]
        del converted.opset_import[:]
        converted.opset_import.extend(kept)
    kinds = ", ".join(f"trt::{op} as {_STANDARD[op]}" for op in dict.fromkeys(found))
    return converted, (
        f"onnx: read TensorRT's own FP8 Q/DQ ops as the standard ones at opset {_OPSET} ({kinds}, with a "
        "float8e4m3fn zero point)",
    )


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    return copied


def _fp8_zero(model: onnx.ModelProto, owner: str) -> str:
    """A scalar float8e4m3fn zero initializer for `owner` (its name): the zero point that makes a Q/DQ FP8."""
    name = f"{owner}/fp8_zero_point"
    model.graph.initializer.append(helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, [], [0.0]))
    return name
