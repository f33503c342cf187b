"""The ONNX graph coloured by error: node data for Google's Model Explorer.

Model Explorer (`ai-edge-model-explorer`, with the ONNX adapter `model-explorer-onnx`) draws
an ONNX file and colours its nodes from *node data*: per node id a value, and thresholds or
colours. The ONNX adapter's node id is the ONNX node's name (`<node_N>` for an unnamed node,
N its position in the graph). `write_model_explorer(report, "me.json")` writes four node-data
files, one value per node each (Model Explorer shows one value per node and file):

- `me.json`: every ONNX node's status as a number, coloured: 0 not compared (constants,
  shape arithmetic, unpaired tensors; grey), 1 agrees (green), 2 diverged (inherited),
  3 first divergence, 4 culprit (red), 5 where NaN/Inf first appear, 6 screened (passed bounds
  from statistics alone, `--capture stats`: not compared value by value; yellow);
- `me.error.json`: the accumulated error, the worst relative error (max-abs error over the
  reference's largest magnitude) over the node's compared outputs and backend pairs, each
  node coloured by its status;
- `me.local.json`: the local error (the node alone on the reference's inputs), red where it
  breaks the thresholds: where the error is introduced;
- `me.cosine.json`: the worst cosine, red below `min_cosine`.

Each file is a `GraphNodeData` (`results`, `name`, `thresholds`, ...): written with Model
Explorer's own builder where it is installed (the `explorer` extra), the same JSON without it.
Values that are not finite numbers are left out (JSON holds no NaN).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff import outputs
from trtdiff.errors import OptionError, ReportFileError, first_line
from trtdiff.report import Layer, Report

if TYPE_CHECKING:
    import onnx

NAME_PREFIX = "trtdiff"
# Status codes of the status overlay, with their colours (the other overlays colour nodes the same way).
NOT_COMPARED, AGREES, DIVERGED, FIRST_DIVERGENCE, CULPRIT, NON_FINITE, SCREENED = range(7)
STATUS_NAMES = (
    "not compared",
    "agrees",
    "diverged (inherited)",
    "first divergence",
    "culprit",
    "NaN/Inf first appear",
    "screened (statistics alone)",
)
GREY, GREEN, ORANGE, DEEP_ORANGE, RED, PURPLE = "#bdbdbd", "#43a047", "#fb8c00", "#f4511e", "#d32f2f", "#8e24aa"
YELLOW = "#fbc02d"
STATUS_COLOURS = (GREY, GREEN, ORANGE, DEEP_ORANGE, RED, PURPLE, YELLOW)
TOP = 1e300  # the last threshold's bound: every finite value at or below it
SUFFIXES = ("", ".error", ".local", ".cosine")


@dataclass(frozen=True)
class NodeValue:
    """One node's figure in one overlay, and its colour (None: the thresholds colour it)."""

    value: float
    colour: str | None = None


@dataclass(frozen=True)
class Overlay:
    """One node-data file: a display name, a value per node id, thresholds (value at or below -> colour)."""

    suffix: str
    name: str
    results: dict[str, NodeValue]
    thresholds: tuple[tuple[float, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The GraphNodeData JSON, as Model Explorer's `GraphNodeData.to_json_string` writes it."""
        try:
            from model_explorer import node_data_builder as builder
        except ImportError:
            return self._plain()
        data = builder.GraphNodeData(
            results={
                node: builder.NodeDataResult(value=result.value, bgColor=result.colour)
                for node, result in self.results.items()
            },
            name=self.name,
            thresholds=[builder.ThresholdItem(value=value, bgColor=colour) for value, colour in self.thresholds],
        )
        written: dict[str, Any] = json.loads(data.to_json_string())
        return written

    def _plain(self) -> dict[str, Any]:
        """The same JSON without Model Explorer installed (its dataclass fields, None values left out)."""
        return {
            "results": {
                node: {"value": r.value, **({"bgColor": r.colour} if r.colour is not None else {})}
                for node, r in self.results.items()
            },
            "name": self.name,
            "thresholds": [{"value": value, "bgColor": colour} for value, colour in self.thresholds],
            "gradient": [],
            "hideInAggregatedStatsTable": False,
            "hideInChildrenStatsTable": False,
            "showExpandedSummaryOnGroupNode": False,
            "showLabelCountColumnsInChildrenStatsTable": False,
        }


@dataclass
class _Node:
    """What the report says about one ONNX node, gathered over its compared outputs."""

    rel_err: list[float] = field(default_factory=list)
    cosine: list[float] = field(default_factory=list)
    local_rel_err: list[float] = field(default_factory=list)
    local_diverged: bool = False
    diverged: bool = False
    compared: bool = False
    screened: bool = False


def overlays(report: Report, model: onnx.ModelProto | None = None) -> tuple[Overlay, ...]:
    """The four overlays of `report`, keyed by the node ids Model Explorer's ONNX adapter shows for `model`.

    Without the ONNX model, nodes are keyed by the names the report holds (the same for
    every named node; exporters name them all).
    """
    ids = node_ids(model)
    nodes = _gather(report.layers)
    status = _status(report, nodes, ids.keys() if ids else nodes.keys())

    def key(name: str) -> str:
        return ids.get(name, name)

    rtol = report.thresholds.rtol
    accumulated = {
        key(name): NodeValue(max(node.rel_err), STATUS_COLOURS[status[name]])
        for name, node in nodes.items()
        if node.rel_err
    }
    local = {
        key(name): NodeValue(max(node.local_rel_err), RED if node.local_diverged else GREEN)
        for name, node in nodes.items()
        if node.local_rel_err
    }
    cosines = {key(name): NodeValue(min(node.cosine)) for name, node in nodes.items() if node.cosine}
    below = math.nextafter(report.thresholds.min_cosine, -math.inf)
    statuses = {key(name): NodeValue(float(code)) for name, code in status.items()}
    return (
        Overlay(
            "",
            f"{NAME_PREFIX}: status (0 not compared, 1 agrees, 2 diverged, 3 first divergence, 4 culprit, 5 NaN/Inf, "
            "6 screened)",
            statuses,
            tuple((float(code), colour) for code, colour in enumerate(STATUS_COLOURS)),
        ),
        Overlay(".error", f"{NAME_PREFIX}: accumulated error", accumulated, ((rtol, GREEN), (TOP, ORANGE))),
        Overlay(".local", f"{NAME_PREFIX}: local error", local, ((rtol, GREEN), (TOP, RED))),
        Overlay(".cosine", f"{NAME_PREFIX}: cosine", cosines, ((below, RED), (TOP, GREEN))),
    )


def node_ids(model: onnx.ModelProto | None) -> dict[str, str]:
    """trtdiff's name of each node of `model`'s graph -> the id Model Explorer's ONNX adapter gives it."""
    if model is None:
        return {}
    return {
        node.name or f"{node.op_type}_{index}": node.name or f"<node_{index}>"
        for index, node in enumerate(model.graph.node)
    }


def _gather(layers: Iterable[Layer]) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    for layer in layers:
        node = nodes.setdefault(layer.onnx_node, _Node())
        node.compared = True
        node.diverged |= layer.diverged
        node.screened |= layer.screened
        node.rel_err += [m.rel_err for m in layer.pairs.values() if m.rel_err is not None and math.isfinite(m.rel_err)]
        node.cosine += [m.cosine for m in layer.pairs.values() if m.cosine is not None and math.isfinite(m.cosine)]
        for metrics in (layer.local or {}).values():
            node.local_diverged |= metrics.diverged
            if metrics.rel_err is not None and math.isfinite(metrics.rel_err):
                node.local_rel_err.append(metrics.rel_err)
    return nodes


def _status(report: Report, nodes: dict[str, _Node], names: Iterable[str]) -> dict[str, int]:
    """Every node's status code; the strongest mark wins (NaN/Inf, culprit, first divergence, diverged)."""
    culprits = {c.onnx_node for c in report.culprits} | ({report.culprit.onnx_node} if report.culprit else set())
    non_finite = {entry.onnx_node for entry in report.non_finite}
    first = report.first_divergence.onnx_node if report.first_divergence else None
    status: dict[str, int] = {}
    for name in dict.fromkeys([*names, *nodes]):
        node = nodes.get(name)
        if name in non_finite:
            status[name] = NON_FINITE
        elif name in culprits:
            status[name] = CULPRIT
        elif name == first:
            status[name] = FIRST_DIVERGENCE
        elif node is None or not node.compared:
            status[name] = NOT_COMPARED
        else:
            status[name] = DIVERGED if node.diverged else SCREENED if node.screened else AGREES
    return status


def overlay_paths(path: str | Path) -> tuple[Path, ...]:
    """The files `write_model_explorer(report, path)` writes, in overlay order: me.json, me.error.json, ..."""
    base = _base(Path(path))
    return tuple(Path(f"{base}{suffix}.json") for suffix in SUFFIXES)


def onnx_beside(path: str | Path) -> Path:
    """Where the ONNX file an overlay belongs to is kept: me.json -> me.onnx."""
    return Path(f"{_base(Path(path))}.onnx")


def _base(path: Path) -> Path:
    return path.with_suffix("") if path.suffix == ".json" else path


def is_overlay(path: Path) -> bool:
    """Whether `path` holds node data trtdiff wrote (so it may be written again)."""
    text = outputs.head(path, 256 << 20)  # a regular file, never read through a link
    try:
        data = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and str(data.get("name", "")).startswith(NAME_PREFIX) and "results" in data


def check_overlay_paths(path: str) -> None:
    """Node data overwrites only earlier trtdiff node data; the ONNX file beside it, only beside earlier node data.

    Checked before any work (ReportFiles.validate), and for a sweep, whose files are named by
    its combinations, before any of them is written.
    """
    files = overlay_paths(path)
    for target in files:
        outputs.check_path(target, "model_explorer")
        if outputs.found(target) != "missing" and not is_overlay(target):
            raise OptionError(
                f"{target} exists and is not trtdiff node data; choose another path",
                parameter="model_explorer",
                value=path,
            )
    beside = onnx_beside(path)
    outputs.check_path(beside, "model_explorer")
    if outputs.found(beside) != "missing" and not is_overlay(files[0]):
        raise OptionError(
            f"{beside} exists and belongs to no earlier trtdiff node data here; choose another path",
            parameter="model_explorer",
            value=path,
        )


def load_onnx(report: Report, report_path: str | Path | None = None) -> onnx.ModelProto | None:
    """The ONNX file the report compared (its graph only: no weights), or None when it was not kept.

    `onnx_path` is looked up as written (from the current directory), then from the report's folder, then
    by its name beside the report (an artifact folder downloaded elsewhere).
    """
    found = onnx_file(report, report_path)
    if found is None:
        return None
    return read_onnx(found, report_path)


def read_onnx(found: Path, report_path: str | Path | None = None) -> onnx.ModelProto:
    """The ONNX graph at `found` (no weights); ReportFileError naming the report when it is no ONNX model."""
    import onnx

    try:
        model = onnx.load(str(found), load_external_data=False)
    except Exception as error:  # noqa: BLE001 -- protobuf's DecodeError and friends, as source/loading.py
        reason = first_line(error, 80)
    else:
        if model.ir_version > 0 and model.HasField("graph"):
            return model
        reason = "it holds no ONNX graph"
    raise ReportFileError(
        f"{report_path or found}: its ONNX file {found} is not an ONNX model ({reason}); "
        "put the file the report compared there, or compare again with --save-onnx PATH"
    )


def onnx_file(report: Report, report_path: str | Path | None = None) -> Path | None:
    """Where the report's ONNX file is now, or None."""
    if not report.onnx_path:
        return None
    saved = Path(report.onnx_path)
    candidates = [saved]
    if report_path is not None:  # a CI artifact downloaded elsewhere: the files lie side by side
        folder = Path(report_path).parent
        candidates += [folder / saved, folder / saved.name] if not saved.is_absolute() else [folder / saved.name]
    return next((c for c in candidates if c.is_file()), None)


def write_model_explorer(report: Report, path: str | Path, model: onnx.ModelProto | None = None) -> tuple[Path, ...]:
    """Write the four overlays of `report` next to each other (me.json, me.error.json, ...); the paths written."""
    written = []
    for overlay, target in zip(overlays(report, model), overlay_paths(path), strict=True):
        outputs.write_text(target, json.dumps(overlay.to_dict(), indent=2, allow_nan=False) + "\n")
        written.append(target)
    return tuple(written)


def coverage(overlay: Overlay, model: onnx.ModelProto) -> float:
    """The share of `model`'s nodes that have a value in `overlay`."""
    ids = node_ids(model).values()
    return sum(node in overlay.results for node in ids) / max(len(ids), 1)
