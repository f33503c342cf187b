"""Whether compare runs TensorRT here, and what the report says about it either way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtdiff.backends.base import OnnxBackend, Unavailable
    from trtdiff.report import TensorRTSummary, Thresholds


def skipped_here() -> Unavailable | None:
    """Why TensorRT cannot run here, with the report's summary saying so, or None when it can (its spec's
    `unavailable` hook)."""
    from trtdiff.backends.base import Unavailable
    from trtdiff.backends.tensorrt.summary import skipped

    found = unavailable()
    if found is None:
        return None
    reason, version = found
    return Unavailable(reason, skipped(reason, version))


def unavailable() -> tuple[str, str | None] | None:
    """(the one-line reason TensorRT cannot run here, its version if known), or None when it can.

    Found without importing TensorRT or torch where the answer is plain (no module installed,
    no NVIDIA device), else from `probe()`.
    """
    from trtdiff.backends.tensorrt import probe

    quick = _without_importing()
    if quick is not None:
        return quick
    found = probe()
    if found.can_run:
        return None
    return found.reason or "unknown", found.info.describe() if found.info else None


def _without_importing() -> tuple[str, str | None] | None:
    """(reason, version) when TensorRT surely cannot run here, found without importing it (nor torch).

    Importing TensorRT costs seconds and ~100 MB, torch a second or more; on a machine with no
    CUDA GPU, or none of the modules installed, the answer is known from the installed
    metadata and the device nodes alone (importing.gpu_info).
    """
    import importlib.metadata
    import importlib.util

    from trtdiff.backends.tensorrt.importing import INSTALL_HINT, MODULE_CANDIDATES, NO_GPU, gpu_info

    present = [name for name in MODULE_CANDIDATES if importlib.util.find_spec(name) is not None]
    if not present:
        return f"TensorRT is not installed ({', '.join(MODULE_CANDIDATES)} not found); {INSTALL_HINT}", None
    if gpu_info() is not None:
        return None
    distributions = importlib.metadata.packages_distributions().get(present[0], [])
    version = None
    if distributions:
        version = (
            f"{distributions[0]} {importlib.metadata.version(distributions[0])} (module {present[0]}, not imported)"
        )
    return NO_GPU, version


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
