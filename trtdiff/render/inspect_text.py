"""The terminal view of an Inspection: the file as written, each Resize, the findings, a closing line.

Every line wraps at the console's width (80 columns when piped); names, messages and source
lines from the model are printed as plain text, never read as rich markup.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from rich.console import Console
from rich.text import Text

from trtdiff.render.format import module_text, plural
from trtdiff.render.safe_text import SafeText
from trtdiff.report.inspection import Finding, Inspection, ResizeInfo
from trtdiff.report.text import plain

_STYLES = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}
_SOURCE = re.compile(r"^(.*?):(\d+): (.*)$")


def render_inspection(inspection: Inspection, console: Console) -> None:
    """Print `inspection`: header, Resize rows, findings (worst first), then the verdict."""
    inspection = inspection.named()
    inputs = ", ".join(f"{name} {shape}" for name, shape in inspection.inputs.items())
    _say(console, f"trtdiff inspect {inspection.model} (inputs: {inputs})", 0, lead="bold")
    _say(console, _onnx_line(inspection), 0)
    for note in inspection.notes:
        _say(console, f"note: {note}", 0, style="dim")
    if inspection.resizes:
        _say(console, f"{plural(len(inspection.resizes), 'Resize')}:", 0, lead="bold")
    for row in inspection.resizes:
        _resize(row, console)
    for finding in inspection.findings:
        _finding(finding, console)
    console.print(_verdict(inspection))


def _onnx_line(inspection: Inspection) -> str:
    domains = ", ".join(f"{domain} {version}" for domain, version in inspection.opset_imports.items())
    producer = inspection.producer or "unknown producer"
    where = f", {inspection.onnx_path}" if inspection.onnx_path else ""
    return f"ONNX: opset {inspection.opset} as written ({domains}), {producer}, exporter {inspection.exporter}{where}"


def module_words(module: str | None) -> str:
    """ "module decoder", "the model itself" (top level), "no PyTorch module"."""
    return module_text(module)


def source_words(source: str | None) -> str | None:
    """ "deeplabv3plus.py:120: up = F.interpolate(...)": the file's name without its folder."""
    if source is None:
        return None
    found = _SOURCE.match(source)
    return f"{Path(found.group(1)).name}:{found.group(2)}: {found.group(3)}" if found else source


def _shape(shape: tuple[int | None, ...] | None) -> str:
    return "?" if shape is None else "x".join("?" if d is None else str(d) for d in shape) or "scalar"


def resize_words(row: ResizeInfo) -> str:
    """ "linear, half_pixel, sizes 1x32x16x16, 1x32x8x8 → 1x32x16x16; PyTorch upsample_bilinear2d(align_corners=False)".

    Attributes that only matter for one mode (nearest_mode, the cubic coefficients) are named for that mode.
    """
    parts = [row.mode]
    if row.coordinate_transformation_mode is None:
        parts.append("no coordinate mode (before opset 11)")
    else:
        parts.append(row.coordinate_transformation_mode)
        if row.mode == "nearest":
            parts.append(f"nearest_mode {row.nearest_mode}")
        if row.mode == "cubic":
            parts.append(f"cubic_coeff_a {row.cubic_coeff_a:g}, exclude_outside {row.exclude_outside}")
    if row.sizes is not None:
        parts.append("sizes " + _shape(row.sizes))
    elif row.scales is not None:
        parts.append("scales " + "x".join(f"{s:g}" for s in row.scales))
    else:
        parts.append("scales computed at run time")
    text = ", ".join(parts) + f", {_shape(row.input_shape)} → {_shape(row.output_shape)}"
    if row.broadcasts:
        text += " (one input pixel per resized axis: every coordinate mode agrees)"
    if row.torch_op is not None:
        aligned = "" if row.align_corners is None else f"(align_corners={row.align_corners})"
        text += f"; PyTorch {row.torch_op}{aligned}"
    return text


def _say(console: Console, text: str, left: int = 4, style: str = "", lead: str = "") -> None:
    """`text` wrapped to the console's width, every line indented by `left` (no trailing spaces).

    `lead` styles the first word (a severity, a title).
    """
    pad = " " * left
    lines = textwrap.wrap(plain(text), console.width, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False)
    for number, line in enumerate(lines):
        first, space, rest = line.partition(" ") if number == 0 and lead else ("", "", line)
        console.print(SafeText.assemble((first, lead), space, rest, style=style))


def _resize(row: ResizeInfo, console: Console) -> None:
    _say(console, f"{row.node} ({row.op_type}, {module_words(row.module)})", 2)
    _say(console, resize_words(row))
    source = source_words(row.source)
    if source:
        _say(console, f"at {source}", style="dim")


def _finding(finding: Finding, console: Console) -> None:
    nodes = ", ".join(finding.nodes[:3]) + (f", … {len(finding.nodes) - 3} more" if len(finding.nodes) > 3 else "")
    where = f" {nodes} ({module_words(finding.module)})" if finding.nodes else ""
    _say(console, f"{finding.severity.upper()} {finding.code}:{where}", 0, lead=_STYLES[finding.severity])
    _say(console, finding.message)
    source = source_words(finding.source)
    if source:
        _say(console, f"at {source}", style="dim")
    _say(console, f"fix: {finding.advice}")


def _verdict(inspection: Inspection) -> Text:
    counts = {s: sum(f.severity == s for f in inspection.findings) for s in ("error", "warning", "info")}
    tally = f"{plural(counts['error'], 'error')}, {plural(counts['warning'], 'warning')}, {counts['info']} info"
    if inspection.clean:
        return SafeText.assemble(("OK", "bold green"), f": no finding above info ({tally}).")
    worst = inspection.worst or "error"
    return SafeText.assemble((worst.upper(), _STYLES[worst]), f": {tally}; the findings above say what to change.")
