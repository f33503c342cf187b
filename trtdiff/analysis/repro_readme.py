"""The READMEs of a repro bundle: the figures and the commands that show a culprit's subgraph diverging.

Every name from the model goes through `trtdiff.report.text` (Markdown-safe, one line), and
the commands' paths are quoted for the shell: a bundle's README is read by people and pasted
into terminals (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.repro_files import SUBGRAPH
from trtdiff.backends.registry import repro_readme_lines
from trtdiff.report import Thresholds

if TYPE_CHECKING:
    from trtdiff.report import Culprit
    from trtdiff.source.onnx_graph import GraphInfo


@dataclass(frozen=True)
class ReproContext:
    """What the repro folder says about where the culprit came from, and how to rerun its backends."""

    directory: Path
    graph: GraphInfo
    thresholds: Thresholds
    model: str
    ort_provider: str = "CPUExecutionProvider"


def readme(
    folder: Path,
    manifest: Mapping[str, Any],
    reference: np.ndarray | None,
    outputs: Mapping[str, np.ndarray],
    context: ReproContext,
    polygraphy: bool,
) -> str:
    """The culprit folder's README; every name from the model goes through `trtdiff.report.text` (Markdown-safe,
    one line), and the commands' paths are quoted for the shell."""
    import shlex

    from trtdiff.report.text import markdown, markdown_code, plain

    culprit = manifest["culprit"]
    thresholds = context.thresholds
    here = shlex.quote(plain(str(folder)))
    advice = f"; fix: {markdown(manifest['advice'])}" if manifest["advice"] else ""
    lines = [
        f"# {markdown(culprit['onnx_node'])} ({markdown(culprit['op_type'])}) diverges on {markdown(manifest['pair'])}",
        "",
        f"Found by trtdiff in {markdown_code(context.model)} (ONNX opset {manifest['opset']}): this node's own error "
        f"breaks the thresholds (cosine ≥ {thresholds.min_cosine}, max-abs error ≤ {thresholds.rtol} × the "
        f"reference's largest magnitude) when it runs alone on the reference's inputs. trtdiff's verdict: "
        f"**{markdown(manifest['verdict'])}**{advice}.",
        "",
        f"- `{SUBGRAPH}`: nodes {', '.join(markdown_code(n) for n in manifest['nodes'])}; "
        f"output {markdown_code(manifest['output'])}",
        "- `inputs/*.npy`, `inputs.npz`: the reference's values of its inputs "
        + ", ".join(markdown_code(n) for n in manifest["inputs"]),
        "- `outputs/reference.npy`: the reference's value of the output; `outputs/BACKEND.npy`: each backend's",
        "",
    ]
    if reference is not None:
        lines += _figures_table(reference, outputs, thresholds)
    lines += [f"Not run here: {markdown(note)}." for note in manifest.get("notes", ())]
    lines += [""] if manifest.get("notes") else []
    lines += ["Show it with trtdiff (exit 1 when the subgraph alone still diverges):", ""]
    lines += [f"    trtdiff repro {here}", ""]
    if polygraphy and reference is not None:
        lines += _polygraphy_lines(here, reference, thresholds)
    lines += [
        "With ONNX Runtime and numpy alone:",
        "",
        "```python",
        "import numpy as np, onnxruntime as ort",
        f"session = ort.InferenceSession('{SUBGRAPH}', providers=['CPUExecutionProvider'])",
        "feeds = dict(np.load('inputs.npz'))",
        "got, want = session.run(None, feeds)[0].ravel(), np.load('outputs/reference.npy').ravel()",
        "print('cosine', got @ want / np.linalg.norm(got) / np.linalg.norm(want),",
        "      'rel-err', np.abs(got - want).max() / np.abs(want).max())",
        "```",
        "",
    ]
    for name in dict.fromkeys(manifest["pair"].split("~")):  # a runtime without a command of its own: a snippet
        lines += repro_readme_lines(name, context.graph, SUBGRAPH)
    return "\n".join(lines)


def _figures_table(reference: np.ndarray, outputs: Mapping[str, np.ndarray], thresholds: Thresholds) -> list[str]:
    """The README's table: each backend's output of the subgraph against the reference (names Markdown-safe)."""
    from trtdiff.report.text import markdown

    lines = ["| output | cosine | max-abs | rel-err | diverged |", "| --- | --- | --- | --- | --- |"]
    for name, value in outputs.items():
        m = compare_tensors(reference, value, thresholds)
        cell = markdown(name).replace("|", "\\|")
        figures = [_figure(m.cosine, ".6f"), _figure(m.max_abs, ".2e"), _figure(m.rel_err, ".2e")]
        lines.append(f"| {cell} | {' | '.join(figures)} | {'yes' if m.diverged else 'no'} |")
    return [*lines, ""]


def _polygraphy_lines(here: str, reference: np.ndarray, thresholds: Thresholds) -> list[str]:
    """Polygraphy's command, its tolerance trtdiff's rtol times the reference's largest magnitude."""
    atol = thresholds.rtol * float(np.max(np.abs(reference))) if reference.size else 0.0
    return [
        "With Polygraphy (ONNX Runtime against the saved reference output; the tolerance is trtdiff's rtol "
        "times the reference's largest magnitude):",
        "",
        f"    cd {here} && polygraphy run {SUBGRAPH} --onnxrt --load-inputs polygraphy_inputs.json "
        f"--load-outputs polygraphy_reference.json --atol {atol:.3g} --rtol 0",
        "",
    ]


def top_readme(context: ReproContext, culprits: Sequence[Culprit], folders: Sequence[Path]) -> str:
    """The bundle's README: the model (Markdown-safe, one line) and the command per culprit folder."""
    import shlex

    from trtdiff.report.text import markdown_code, plain

    lines = [f"# trtdiff repro of {markdown_code(context.model)}", ""]
    for folder in folders:
        command = f"trtdiff repro {shlex.quote(plain(str(folder)))}"
        lines.append(f"- {markdown_code(folder.name + '/')}: {markdown_code(command)}")
    if len(folders) < len(culprits):
        lines.append(f"- {len(culprits) - len(folders)} culprit(s) without a local run here: no folder")
    return "\n".join(lines) + "\n"


def _figure(value: float | None, spec: str) -> str:
    """A figure for the repro's README: n/a where there are no finite values to compute it over."""
    return "n/a" if value is None else format(value, spec)
