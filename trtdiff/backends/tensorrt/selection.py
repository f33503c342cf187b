"""Whether compare runs TensorRT here, and what the report says about it either way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trtdiff.backends.base import OnnxBackend
from trtdiff.backends.tensorrt.builder import BuildSettings
from trtdiff.errors import BackendError
from trtdiff.onnx_graph import GraphInfo
from trtdiff.report import TensorRTSummary


def tensorrt_runner(graph: GraphInfo, settings: BuildSettings, engine_cache: str | Path | None, engine_path: Path | None,
              required: bool) -> tuple[OnnxBackend | None, TensorRTSummary | None]:
    """(a runnable TensorRT backend, None), or (None, a summary with the one-line reason it was skipped)."""
    from trtdiff.backends.tensorrt import probe
    from trtdiff.backends.tensorrt.summary import skipped

    found = probe()
    if not found.can_run:
        reason = found.reason or "unknown"
        if required:
            raise BackendError(f"--require tensorrt: TensorRT cannot run here: {reason}")
        return None, skipped(reason, found.info.describe() if found.info else None)
    from trtdiff.backends.tensorrt import TensorRTBackend

    settings.validate()
    runner = TensorRTBackend(graph, settings, cache_dir=Path(engine_cache) if engine_cache else None)
    if engine_path is not None:
        engine_path.write_bytes(runner.build.plan)
    return runner, None


def ran_summary(runners: Sequence[OnnxBackend]) -> TensorRTSummary | None:
    """What the live TensorRT backend among `runners` built and fused, or None if there is none."""
    from trtdiff.backends.tensorrt import TensorRTBackend
    from trtdiff.backends.tensorrt.summary import summarize

    runner = next((r for r in runners if isinstance(r, TensorRTBackend)), None)
    if runner is None:
        return None
    return summarize(runner.build, runner.fusion(), status="ran", gpu=runner.gpu.describe())  # type: ignore[attr-defined]
