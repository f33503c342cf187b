"""Reduced precision as an ONNX graph states it: which precision a graph computes in, and FP16 conversion.

A graph's own types say its precision (`graph_precision`: a node writing float16 or bfloat16).
An FP32 graph is run in FP16 by converting it (`convert_to_fp16`): ONNX Runtime and the ONNX
reference evaluator when `--precision fp16` asks for it, and strongly typed TensorRT (TRT 11,
TensorRT-RTX), whose builders have no FP16 flag: a layer runs in FP16 only if the network says so.
We use onnxconverter-common's `float16.convert_float_to_float16(keep_io_types=True)`, which keeps
its block list (Resize, TopK, Range, ... stay FP32 between Casts) and every value name, so
intermediates still compare by their ONNX names. Weights are clamped to float16's own range
(`FP16_MAX`, `FP16_TINY`), not the converter's narrower default. One fix on top: when a graph
output comes from a blocked op, 1.16.0 leaves that output FP16 despite keep_io_types; we cast it back.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import onnx
from onnx import TensorProto, helper

from trtdiff.errors import OptionError, param

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

CONVERTER = "onnxconverter-common"
FP16_MAX = 65504.0
FP16_TINY = 2.0**-24
"""float16's largest finite value and smallest positive (subnormal) one. The converter's own defaults
clamp weights to [1e-7, 1e4]: a constant 65536 would become 10000, a change no FP16 engine makes."""
CONVERTER_HINT = "pip install 'trtdiff[fp16]' (onnxconverter-common)"


@dataclass(frozen=True)
class Fp16Conversion:
    """The converted model and what the conversion did."""

    model: onnx.ModelProto
    converter: str
    kept_fp32_ops: tuple[str, ...]
    fixed_outputs: tuple[str, ...]
    truncated_warnings: int = 0
    kept_nodes: tuple[str, ...] = ()

    def note(self, converted: str) -> str:
        """The report's line on this conversion; `converted` says what was converted and why."""
        kept = ", ".join(self.kept_fp32_ops) or "none"
        nodes = f"; nodes kept FP32 (keep_fp32): {', '.join(self.kept_nodes)}" if self.kept_nodes else ""
        fixed = f"; cast outputs {', '.join(self.fixed_outputs)} back to FP32" if self.fixed_outputs else ""
        if self.truncated_warnings:
            fixed += (
                f"; {self.truncated_warnings} converter warnings of weights moved into float16's range "
                f"[{FP16_TINY:.3g}, {FP16_MAX:g}] in magnitude"
            )
        return (
            f"fp16: {converted} with {self.converter} float16.convert_float_to_float16(keep_io_types=True); "
            f"node types kept FP32: {kept}{nodes}{fixed}"
        )


GraphPrecision = Literal["fp32", "fp16", "bf16"]
_REDUCED_TYPES: dict[str, GraphPrecision] = {"float16": "fp16", "bfloat16": "bf16"}


def graph_precision(graph: GraphInfo) -> GraphPrecision:
    """The precision `graph` computes in by its own types: "fp16" (or "bf16") when a node writes
    float16 (bfloat16) values, else "fp32". An FP32 graph with a few float16 constants cast up stays "fp32"."""
    for node in graph.nodes:
        for tensor in node.outputs:
            dtype = graph.tensor_type(tensor).dtype
            if dtype is not None and dtype.name in _REDUCED_TYPES:
                return _REDUCED_TYPES[dtype.name]
    return "fp32"


def convert_to_fp16(model: onnx.ModelProto, keep: Sequence[str] = ()) -> Fp16Conversion:
    """Convert float32 weights and values to float16, keeping graph inputs/outputs float32, and the nodes
    named in `keep` in float32 (onnxconverter-common's node_block_list)."""
    try:
        import onnxconverter_common
        from onnxconverter_common import float16
    except ImportError as error:
        raise OptionError(
            f"{param('precision')} fp16 converts the FP32 graph with {CONVERTER}: {CONVERTER_HINT}"
        ) from error
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        converted = float16.convert_float_to_float16(
            model,
            keep_io_types=True,
            node_block_list=list(keep) or None,
            min_positive_val=FP16_TINY,
            max_finite_val=FP16_MAX,
        )
    truncated = sum(1 for w in caught if "truncated" in str(w.message))
    fixed = _restore_float_outputs(model, converted)
    present = {node.op_type for node in model.graph.node}
    kept = tuple(sorted(present & set(float16.DEFAULT_OP_BLOCK_LIST)))
    converter = f"{CONVERTER} {onnxconverter_common.__version__}"
    return Fp16Conversion(converted, converter, kept, fixed, truncated, tuple(keep))


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


def run_precision(asked: GraphPrecision, graph: GraphInfo | None) -> GraphPrecision:
    """The precision a comparison runs in: the graph's own where its types are reduced, else `asked`.

    `graph`: the ONNX file given (None: one exported now, FP32). A reduced graph asked for
    another reduced precision, and BF16 asked of an FP32 graph (no converter here writes a BF16
    graph), are refused, naming what to give instead.
    """
    own = graph_precision(graph) if graph is not None else "fp32"
    name = graph.path.name if graph is not None else "the exported graph"
    if own != "fp32":
        if asked not in ("fp32", own):
            raise OptionError(
                f"{name} computes in {own} by its own types; drop {param('precision')} {asked} or give the FP32 "
                "ONNX file",
                parameter="precision",
                value=asked,
            )
        return own
    if asked == "bf16":
        raise OptionError(
            f"{name} is an FP32 graph and no converter here writes a BF16 one; give a BF16 ONNX file with "
            f"{param('onnx')} (e.g. ModelOpt AutoCast's low_precision_type='bf16') or use fp16",
            parameter="precision",
            value=asked,
        )
    return asked


def in_precision(
    graph: GraphInfo, precision: GraphPrecision, folder: Path, keep: Sequence[str] = ()
) -> tuple[GraphInfo, list[str]]:
    """The graph the ONNX backends run in `precision` (`run_precision`), and notes.

    An FP32 graph run in FP16 is converted (`convert_to_fp16`, saved in `folder`), the nodes
    named in `keep` left in FP32; a graph whose own types are reduced runs as it is.
    """
    if precision != "fp16" or graph_precision(graph) == "fp16":
        if keep:
            raise OptionError(
                f"nodes are kept in FP32 only when trtdiff converts an FP32 graph with {param('precision')} fp16",
                parameter="keep_fp32",
                value=",".join(keep),
            )
        return graph, []
    unknown = sorted(set(keep) - {node.name for node in graph.nodes})
    if unknown:
        raise OptionError(
            f"no node of {graph.path.name} is named {unknown[0]!r}; give the ONNX node names a culprit names",
            parameter="keep_fp32",
            value=",".join(keep),
        )
    from trtdiff.source.onnx_graph import graph_from_model

    conversion = convert_to_fp16(graph.model, keep)
    path = folder / f"{graph.path.stem}.fp16.onnx"
    onnx.save(conversion.model, str(path))
    note = conversion.note("the ONNX graph every ONNX backend runs was converted")
    return graph_from_model(conversion.model, path), [note]
