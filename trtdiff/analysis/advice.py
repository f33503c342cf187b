"""What to change for each culprit: the fix of the `inspect` rule that explains its node, if one does.

The culprit step says where the error is introduced; inspect's rules (inspect_findings) say
why nodes of a kind go wrong and what to change. A culprit takes the advice of the most
severe finding that names its ONNX node, so the verdict line carries the fix (re-export at
opset 11 for a linear Resize below it, and so on). A rule about what the ONNX file computes
(`EXPORT_RULES`) does not explain a culprit whose file the ONNX spec evaluator cleared (a
runtime verdict): re-exporting would not change what the runtime does there.

The PyTorch upsampling calls (for align_corners) are recorded only when a culprit is a
Resize or Upsample, with one forward pass; without them the graph alone is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from trtdiff.errors import TrtdiffError, render_names
from trtdiff.source.pitfalls import EXPORT_RULES, NAMING_RULES, SUBGRAPH_RULES

if TYPE_CHECKING:
    from trtdiff.report import Culprit
    from trtdiff.report.inspection import Finding, Interpolation
    from trtdiff.source.onnx_graph import GraphInfo

# The model's upsampling calls, recorded on demand (an empty list where there is no PyTorch model).
Interpolations = Callable[[], Sequence["Interpolation"]]
_RESIZES = frozenset({"Resize", "Upsample"})


def advise(
    culprits: Sequence[Culprit],
    graph: GraphInfo,
    interpolations: Interpolations = lambda: (),
    name_of: Callable[[str], str] = str,
    magnitudes: Mapping[str, float] | None = None,
) -> tuple[Culprit, ...]:
    """The culprits with the advice of the rule that explains each node ("" where none does).

    Parameters in the advice are written as `name_of` writes them (the parameter itself; the
    CLI passes its flags). `magnitudes`: the reference's largest |value| per tensor, given in a
    reduced-precision comparison, where a value past float16's range explains a culprit.
    """
    if not culprits:
        return ()
    from trtdiff.source.pitfalls import inspect_graph

    calls = _recorded(interpolations) if any(c.op_type in _RESIZES for c in culprits) else ()
    _, findings = inspect_graph(graph, calls=calls, magnitudes=magnitudes)
    advised = []
    for culprit in culprits:
        finding = explaining(culprit, findings)
        if finding is not None:
            advice = render_names(finding.advice, name_of)
            if finding.code in NAMING_RULES:  # the node at fault may not be the culprit: say which, and why
                advice = f"{finding.message}; {advice}"
            culprit = dataclasses.replace(culprit, advice=advice, advice_code=finding.code)
        advised.append(culprit)
    return tuple(advised)


def explaining(culprit: Culprit, findings: Sequence[Finding]) -> Finding | None:
    """The first finding (they come most severe first) naming the culprit's node, where it fits the verdict.

    A finding of `SUBGRAPH_RULES` also explains a culprit whose subgraph (the nodes run for its
    local error) holds its node: a baked Reshape shows first in the op after it.
    """

    def names(finding: Finding) -> bool:
        nodes = set(culprit.subgraph) if finding.code in SUBGRAPH_RULES else {culprit.onnx_node}
        return bool(nodes & set(finding.nodes)) or culprit.onnx_node in finding.nodes

    return next(
        (f for f in findings if names(f) and not (culprit.verdict == "runtime" and f.code in EXPORT_RULES)),
        None,
    )


def _recorded(interpolations: Interpolations) -> Sequence[Interpolation]:
    """The upsampling calls, or none where the forward pass cannot run here (the graph alone is read then)."""
    try:
        return interpolations()
    except TrtdiffError:
        return ()
