"""TensorRT's own Q/DQ ops, read as the standard ONNX ops they stand for.

ModelOpt's PyTorch route (`mtq.quantize`, then `torch.onnx.export` with the TorchScript exporter)
writes what ONNX could not say at the opset it exports to, in TensorRT's `trt` domain: FP8 as
`trt::TRT_FP8QuantizeLinear(x, scale)` / `trt::TRT_FP8DequantizeLinear(q, scale)`. ONNX Runtime
and the ONNX reference evaluator know neither, so such a file could not be compared at all. Each
is exactly the standard op of opset 19 with a float8e4m3fn zero point of 0 (what selects FP8
there). The graph is moved to opset 19 first by ONNX's own version converter, which leaves the
`trt` nodes as they are.

Its INT4 weights are `trt::DequantizeLinear(x, scale)` with `axis` and `block_size`, whose input is
the float weight itself, padded and reshaped by constant ops to one row per block (R, B), and whose
scale is (R, 1): one scale per row, the weight quantized to INT4 when TensorRT builds the engine. The
scale's shape says the blocks (ONNX's blocked Q/DQ along the last axis, B wide; TensorRT's `axis`
attribute names the other axis), so each is read as the standard pair of opset 21: a QuantizeLinear
of that float weight (computed once from the file's constants) to int4 with a zero point of 0, round
to nearest and saturating as every QuantizeLinear, then its DequantizeLinear. Any other shape of
`trt::DequantizeLinear` is refused (`UnreadOp`): what TensorRT computes there is not stated.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

TRT_DOMAIN = "trt"
_STANDARD = {"TRT_FP8QuantizeLinear": "QuantizeLinear", "TRT_FP8DequantizeLinear": "DequantizeLinear"}
_OPSET = 19  # FP8 QuantizeLinear and DequantizeLinear
_INT4_OPSET = 21  # int4 and blocked QuantizeLinear / DequantizeLinear


class UnreadOp(ValueError):
    """A `trt::DequantizeLinear` in a form this module does not read: why, and what to do instead."""


def _unread(node: onnx.NodeProto) -> UnreadOp:
    return UnreadOp(
        f"node {node.name or node.output[0]} is TensorRT's own trt::DequantizeLinear (INT4 blockwise weights of "
        "ModelOpt's PyTorch route) in a form trtdiff does not read (a constant float weight of rank 2 and a scale "
        "of one value per row are read); quantize the "
        "FP32 ONNX file with ModelOpt's ONNX route instead (python -m modelopt.onnx.quantization --quantize_mode "
        "int4), whose standard DequantizeLinear with block_size trtdiff compares"
    )


def has_trt_ops(model: onnx.ModelProto) -> bool:
    """Whether `model` holds a node of TensorRT's `trt` domain."""
    return any(node.domain == TRT_DOMAIN for node in model.graph.node)


def standard_ops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """`model` with every `trt` Q/DQ node written as its standard op (see the module docstring), and a note
    saying what was read how; `model` itself, and no note, where it holds none. UnreadOp for a
    `trt::DequantizeLinear` of another form; any other unknown `trt` op is left as it is (the runtime then says
    it does not know it)."""
    found = [node.op_type for node in model.graph.node if node.domain == TRT_DOMAIN and node.op_type in _STANDARD]
    int4 = [n for n in model.graph.node if n.domain == TRT_DOMAIN and n.op_type == "DequantizeLinear"]
    if not found and not int4:
        return model, ()
    from onnx import version_converter

    wanted = _INT4_OPSET if int4 else _OPSET
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), wanted)
    converted = version_converter.convert_version(model, wanted) if current < wanted else _copy(model)
    notes = [_int4_standard(converted)] if int4 else []
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
    if found:
        notes.insert(
            0,
            f"onnx: read TensorRT's own FP8 Q/DQ ops as the standard ones at opset {wanted} ({kinds}, with a "
            "float8e4m3fn zero point)",
        )
    return converted, tuple(notes)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    return copied


def _fp8_zero(model: onnx.ModelProto, owner: str) -> str:
    """A scalar float8e4m3fn zero initializer for `owner` (its name): the zero point that makes a Q/DQ FP8."""
    name = f"{owner}/fp8_zero_point"
    model.graph.initializer.append(helper.make_tensor(name, TensorProto.FLOAT8E4M3FN, [], [0.0]))
    return name


def _int4_blocks(model: onnx.ModelProto, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
    """(the float weight, shaped (R, B), computed from the file's constants; the scale, (R, 1)) of a
    `trt::DequantizeLinear`, or None where it is not that form."""
    if len(node.input) < 2:
        return None
    scale = _constants(model, {node.input[1]}).get(node.input[1])
    weight = _folded(model, node.input[0])
    if scale is None or weight is None or weight.ndim != 2 or scale.shape != (weight.shape[0], 1):
        return None
    block = next((int(a.i) for a in node.attribute if a.name == "block_size"), 0)
    if weight.dtype.kind != "f" or block < weight.shape[1]:
        return None
    return weight, scale


def _int4_standard(model: onnx.ModelProto) -> str:
    """Every `trt::DequantizeLinear` of `model` (already at opset 21) replaced, in place, by the standard
    QuantizeLinear of its float weight to int4 blocks and the DequantizeLinear back (see the module docstring);
    the note saying so. UnreadOp for one of another form."""
    from onnx import numpy_helper

    nodes: list[onnx.NodeProto] = []
    read = 0
    for node in model.graph.node:
        if node.domain != TRT_DOMAIN or node.op_type != "DequantizeLinear":
            nodes.append(node)
            continue
        blocks = _int4_blocks(model, node)
        if blocks is None:
            raise _unread(node)
        weight, scale = blocks
        owner = node.name or node.output[0]
        names = {k: f"{owner}/trtdiff.{k}" for k in ("weight", "scale", "zero_point", "quantized")}
        model.graph.initializer.extend(
            [
                numpy_helper.from_array(weight.astype(np.float32), names["weight"]),
                numpy_helper.from_array(scale.astype(np.float32), names["scale"]),
                helper.make_tensor(names["zero_point"], TensorProto.INT4, list(scale.shape), [0] * scale.size),
            ]
        )
        width = weight.shape[1]
        inputs = [names["weight"], names["scale"], names["zero_point"]]
        quantize = (
            owner.replace("DequantizeLinear", "QuantizeLinear") if "DequantizeLinear" in owner else names["quantized"]
        )
        nodes.append(
            helper.make_node("QuantizeLinear", inputs, [names["quantized"]], quantize, axis=1, block_size=width)
        )
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [names["quantized"], names["scale"], names["zero_point"]],
                list(node.output),
                node.name,
                axis=1,
                block_size=width,
            )
        )
        read += 1
    del model.graph.node[:]
    model.graph.node.extend(_needed(nodes, {o.name for o in model.graph.output}))
    return (
        f"onnx: read {read} trt::DequantizeLinear (ModelOpt's INT4 weights) as QuantizeLinear and DequantizeLinear "
        f"of opset {_INT4_OPSET}: each weight's float values quantized to int4, one scale per row of its blocks"
    )


def _needed(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """`nodes` without those nothing reads any more (the constant ops that padded and reshaped a weight)."""
    while True:
        read = outputs | {t for n in nodes for t in n.input}
        kept = [n for n in nodes if any(o in read for o in n.output)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


def _constants(model: onnx.ModelProto, names: set[str]) -> dict[str, np.ndarray]:
    """The initializers and Constant nodes' values of `model` among `names`."""
    from onnx import numpy_helper

    found = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.name in names}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] in names and node.attribute:
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _folded(model: onnx.ModelProto, tensor: str) -> np.ndarray | None:
    """`tensor`'s value where only constants compute it (the ops that pad and reshape a weight), by the ONNX
    reference evaluator on those ops alone; None where a graph input or a `trt` op feeds it."""
    from onnx.reference import ReferenceEvaluator

    producers = {o: n for n in model.graph.node for o in n.output}
    initializers = {i.name for i in model.graph.initializer}
    if tensor in initializers:
        return _constants(model, {tensor}).get(tensor)
    needed: dict[str, onnx.NodeProto] = {}
    stack = [tensor]
    while stack:
        name = stack.pop()
        if name in initializers or not name or name in needed:
            continue
        node = producers.get(name)
        if node is None or node.domain not in ("", "ai.onnx"):
            return None
        for output in node.output:
            needed[output] = node
        stack.extend(node.input)
    ordered = [n for n in model.graph.node if any(o in needed for o in n.output)]
    used = {t for n in ordered for t in n.input}
    sub = helper.make_model(
        helper.make_graph(
            ordered,
            "weight",
            [],
            [helper.make_tensor_value_info(tensor, TensorProto.UNDEFINED, None)],
            [i for i in model.graph.initializer if i.name in used],
        ),
        opset_imports=[o for o in model.opset_import if o.domain in ("", "ai.onnx")],
    )
    try:
        (value,) = ReferenceEvaluator(sub).run(None, {})
    except Exception:  # noqa: BLE001 - a weight it cannot compute is not read
        return None
    return np.asarray(value)
