"""Whether compare runs TensorRT here, and what the report says about it either way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff.errors import BackendError

if TYPE_CHECKING:
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.options import BuildSettings
    from trtdiff.report import TensorRTSummary, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo


def tensorrt_runner(
    graph: GraphInfo, settings: BuildSettings, engine_cache: Path | None, engine_path: Path | None, required: bool
) -> tuple[OnnxBackend | None, TensorRTSummary | None]:
    """(a runnable TensorRT backend, None), or (None, a summary with the one-line reason it was skipped)."""
    from trtdiff.backends.tensorrt import probe
    from trtdiff.backends.tensorrt.summary import skipped

    quick = _without_importing()
    reason: str | None
    if quick is not None:
        reason, version = quick
    else:
        found = probe()
        reason = None if found.can_run else (found.reason or "unknown")
        version = found.info.describe() if found.info else None
    if reason is not None:
        if required:
            raise BackendError(f"TensorRT cannot run here: {reason}", parameter="require", value="tensorrt")
        return None, skipped(reason, version)
    from trtdiff.backends.tensorrt import TensorRTBackend

    settings.validate()
    runner = TensorRTBackend(graph, settings, cache_dir=engine_cache)
    if engine_path is not None:
        runner.build.write_engines(engine_path)
    return runner, None


def _without_importing() -> tuple[str, str | None] | None:
    """(reason, version) when TensorRT surely cannot run here, found without importing it.

    Importing TensorRT costs seconds and ~100 MB; on a machine with no CUDA GPU, or none of
    the modules installed, the answer is known from torch and the installed metadata alone.
    """
    import importlib.metadata
    import importlib.util

    import torch

    from trtdiff.backends.tensorrt.importing import INSTALL_HINT, MODULE_CANDIDATES

    present = [name for name in MODULE_CANDIDATES if importlib.util.find_spec(name) is not None]
    if not present:
        return f"TensorRT is not installed ({', '.join(MODULE_CANDIDATES)} not found); {INSTALL_HINT}", None
    if torch.cuda.is_available():
        return None
    distributions = importlib.metadata.packages_distributions().get(present[0], [])
    version = None
    if distributions:
        version = (
            f"{distributions[0]} {importlib.metadata.version(distributions[0])} (module {present[0]}, not imported)"
        )
    return "no CUDA GPU: torch.cuda.is_available() is False; engines can be built here but not executed", version


def ran_summary(runners: Sequence[OnnxBackend], thresholds: Thresholds | None = None) -> TensorRTSummary | None:
    """What the live TensorRT backend among `runners` built, fused and found comparing its two engines."""
    from trtdiff.backends.tensorrt import TensorRTBackend
    from trtdiff.backends.tensorrt.summary import summarize
    from trtdiff.report import Thresholds

    runner = next((r for r in runners if isinstance(r, TensorRTBackend)), None)
    if runner is None:
        return None
    fusion, plain_fusion = runner.fusion(), runner.plain_fusion()  # before a bisection releases the engines
    parsed = runner.build.parsed_graph
    precision_fusion = runner.fusion(parsed) if parsed is not None and parsed is not runner.graph else None
    check = runner.marking_check(thresholds or Thresholds())
    return summarize(
        runner.build,
        fusion,
        status="ran",
        gpu=runner.gpu.describe(),
        graph=runner.graph,
        plain_fusion=plain_fusion,
        run_notes=runner.notes(),
        marking_check=check,
        precision_fusion=precision_fusion,
    )
