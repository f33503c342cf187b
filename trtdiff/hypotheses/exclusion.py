"""Does keeping the culprits in FP32 fix an FP16 comparison? Convert again, compare again, and say.

The exclusion list (`--exclude-list`, each culprit's `exclude`) is a promise: keep these nodes in
higher precision and the finding goes away. Where trtdiff itself converted the FP32 graph to FP16
(`--precision fp16`), it checks the promise: `with_exclusion_checked` converts the graph again with
those nodes kept in FP32 (onnxconverter-common's node_block_list, the `keep_fp32` option), compares
once more with the same options but no culprit pass, and adds one note saying whether every check
then passes. A graph that came in FP16 (or quantized) is not converted by trtdiff: nothing is
checked there, and the note says nothing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff.errors import OptionError
from trtdiff.pipeline.comparison import compare_once

if TYPE_CHECKING:
    import torch

    from trtdiff.options import CompareOptions
    from trtdiff.pipeline.prepare import Progress
    from trtdiff.report import Report


def with_exclusion_checked(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    report: Report,
    *,
    progress: Progress | None = None,
    name_of: Callable[[str], str] = str,
) -> Report:
    """`report`, with a note on whether its culprits' nodes kept in FP32 make every check pass (see above)."""
    nodes = excluded_nodes(report)
    if report.passed or not nodes or options.runtime.precision != "fp16" or options.runtime.keep_fp32:
        return report
    if progress is not None:
        progress("converting again with the culprits' nodes kept in FP32 and comparing (the exclusion list)")
    again = options.with_fields(keep_fp32=nodes, culprit=False, save_repro=None)
    try:
        checked = compare_once(model, again, progress=None, name_of=name_of).report
    except OptionError:  # the graph was not converted by trtdiff (it came in FP16): nothing to check
        return report
    flag = f"{name_of('keep_fp32')} {','.join(nodes)}"
    if checked.passed:
        note = f"exclusion list checked: with {', '.join(nodes)} kept in FP32 ({flag}) every check passes"
    else:
        failed = checked.failed_checks
        note = (
            f"exclusion list checked: with {', '.join(nodes)} kept in FP32 ({flag}) {len(failed)} of "
            f"{len(checked.checks)} checks still fail (first: {failed[0].id if failed else '?'}): keeping these "
            "nodes is not enough"
        )
    return dataclasses.replace(report, notes=(*report.notes, note))


def excluded_nodes(report: Report) -> tuple[str, ...]:
    """The node names of every culprit's `exclude` patterns ("^/a\\.b$" -> "/a.b"), in order, once each."""
    names = (_unescaped(pattern) for culprit in report.culprits for pattern in culprit.exclude)
    return tuple(dict.fromkeys(names))


def _unescaped(pattern: str) -> str:
    """The name `re.escape` wrote into an anchored pattern (pairing.qdq.exclude_pattern)."""
    return re.sub(r"\\(.)", r"\1", pattern.removeprefix("^").removesuffix("$"))
