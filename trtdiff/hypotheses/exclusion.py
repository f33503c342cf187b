"""Does keeping the culprits in higher precision fix the comparison? Rewrite the graph, compare again, say.

The exclusion list (`--exclude-list`, each culprit's `exclude`) is a promise: keep these nodes in
higher precision and the finding goes away. `with_exclusion_checked` checks it where trtdiff can
make that graph, compares once more with the same options but no culprit pass, and adds one note
saying whether the final outputs then pass every check (the gate's; the layers of a rewritten
graph pair differently, so their check is not the question):
- an FP32 graph trtdiff converted to FP16 (`--precision fp16`) is converted again with those
  nodes kept in FP32 (the converter's node_block_list, the `keep_fp32` option);
- a QDQ file gets the Q/DQ in front of those nodes removed (pairing.qdq.unquantized), as ModelOpt's
  `nodes_to_exclude` leaves them: an activation reads its float tensor, a weight its float
  initializer where the file holds one, else the float weight the report's `weights` name (the
  PyTorch parameter, BatchNorm folded in: pairing.weights); a weight nothing explains stays quantized.
A graph that came in FP16 is not converted by trtdiff: nothing is checked there.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from trtdiff.errors import OptionError
from trtdiff.pairing.qdq import has_qdq, unquantized
from trtdiff.pipeline.comparison import compare_once
from trtdiff.source.onnx_graph import load_graph

if TYPE_CHECKING:
    import torch

    from trtdiff.options import CompareOptions
    from trtdiff.pipeline.prepare import Progress
    from trtdiff.report import Report
    from trtdiff.source.onnx_graph import GraphInfo


def with_exclusion_checked(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    report: Report,
    *,
    progress: Progress | None = None,
    name_of: Callable[[str], str] = str,
) -> Report:
    """`report`, with a note on whether its culprits' nodes kept in higher precision make every check pass."""
    nodes = excluded_nodes(report)
    if report.passed or not nodes or options.runtime.keep_fp32:
        return report
    if options.runtime.precision == "fp16":
        how = f"with {', '.join(nodes)} kept in FP32 ({name_of('keep_fp32')} {','.join(nodes)})"
        checked = _again(model, options.with_fields(keep_fp32=nodes), progress, name_of, how)
    elif report.onnx_path is not None and has_qdq(graph := load_graph(report.onnx_path)):
        with tempfile.TemporaryDirectory(prefix="trtdiff-") as folder:
            path = Path(folder) / f"{graph.path.stem}.unquantized.onnx"
            floats = _float_weights(model, options, report, graph)
            onnx.save(unquantized(graph, nodes, floats), str(path))
            how = f"with the Q/DQ in front of {', '.join(nodes)} removed (their float weights restored where known)"
            given = isinstance(model, (str, Path)) and str(model) == report.onnx_path
            kept = set(nodes)
            faulty = [w.node for w in report.weights if w.fault and not _restored(graph, w.node, floats, kept)]
            checked = _again(
                path if given else model,
                options if given else options.with_fields(onnx=str(path)),
                progress,
                name_of,
                how,
                f" here: this check cannot undo the faulty scale of {', '.join(faulty)} (the float weights are not "
                "in the file); ModelOpt, quantizing the float model without these nodes, leaves their weights in "
                "float"
                if faulty
                else "",
            )
    else:
        return report
    return report if checked is None else dataclasses.replace(report, notes=(*report.notes, checked))


def _again(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    progress: Progress | None,
    name_of: Callable[[str], str],
    how: str,
    why_not: str = "",
) -> str | None:
    """The note on comparing `model` again with `options` (the culprits' nodes in higher precision, `how`): do the
    final outputs pass every check? None where the options cannot apply (a graph trtdiff did not convert).
    `why_not` ends the note where they still fail: what the check could not undo."""
    if progress is not None:
        progress("comparing again with the culprits' nodes in higher precision (the exclusion list)")
    try:
        checked = compare_once(model, options.with_fields(culprit=False, save_repro=None), name_of=name_of).report
    except OptionError:  # e.g. keep_fp32 on a graph that came in FP16: trtdiff converts nothing to check
        return None
    final = [check for check in checked.checks if check.scope != "layers"]
    failed = [check for check in final if not check.passed]
    if final and not failed:
        return f"exclusion list checked: {how} the final outputs pass every check"
    return (
        f"exclusion list checked: {how} {len(failed)} of {len(final)} checks of the final outputs still fail "
        f"(first: {failed[0].id if failed else '?'}): keeping these nodes is not enough{why_not}"
    )


def _float_weights(
    model: str | Path | torch.nn.Module, options: CompareOptions, report: Report, graph: GraphInfo
) -> dict[str, np.ndarray]:
    """Weight DequantizeLinear -> its float weight, for each weight of `report` a PyTorch parameter explains
    (`QuantizedWeight.source`), from `model`'s parameters; {} where the model is the ONNX file itself."""
    sources = {w.node: w.source for w in report.weights if w.source is not None and w.source.parameter is not None}
    if not sources or (isinstance(model, (str, Path)) and str(model) == report.onnx_path):
        return {}
    import torch

    from trtdiff.pairing.weights import weight_values
    from trtdiff.source.loading import load_model

    load = options.load
    module = (
        model
        if isinstance(model, torch.nn.Module)
        else load_model(str(model), model_class=load.model_class, trust=load.trust).module
    )
    if module is None:
        return {}
    parameters = {name: value.detach().float().cpu().numpy() for name, value in module.state_dict().items()}
    eps = {name: float(m.eps) for name, m in module.named_modules() if isinstance(getattr(m, "eps", None), float)}
    found = {node: weight_values(source, parameters, eps, graph) for node, source in sources.items()}
    return {node: values for node, values in found.items() if values is not None}


def _restored(graph: GraphInfo, dequantize: str, floats: Mapping[str, np.ndarray], kept: set[str]) -> bool:
    """Whether the weight DequantizeLinear `dequantize` is read in float in the unquantized graph: a node kept in
    higher precision reads it, and its float weight is known (in `floats`, or the file's initializer)."""
    from trtdiff.pairing.qdq import float_weight_of
    from trtdiff.source.onnx_graph import constant_values

    node = next((n for n in graph.nodes if n.name == dequantize), None)
    if node is None or not any(node.outputs[0] in n.inputs for n in graph.nodes if n.name in kept):
        return False
    return dequantize in floats or bool(float_weight_of(graph, node, constant_values(graph)))


def excluded_nodes(report: Report) -> tuple[str, ...]:
    """The names of the nodes every culprit keeps in higher precision (`exclude_nodes`), in order, once each.

    A report written before those names were kept holds only the patterns: their names are read back from
    them ("^/a\\.b$" -> "/a.b")."""
    names = (
        name for culprit in report.culprits for name in (culprit.exclude_nodes or map(_unescaped, culprit.exclude))
    )
    return tuple(dict.fromkeys(names))


def _unescaped(pattern: str) -> str:
    """The name `re.escape` wrote into an anchored pattern of a report written before `exclude_nodes`
    ("^" + re.escape(name) + "$", where an escaped line break is a backslash before the break itself)."""
    return re.sub(r"\\(.)", r"\1", pattern.removeprefix("^").removesuffix("$"), flags=re.DOTALL)
