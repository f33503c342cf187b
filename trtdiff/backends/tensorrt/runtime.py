"""TensorRT as an `OnnxBackend`: build, load one engine at a time, run it, return numpy by ONNX name.

No machine this project has can execute a TensorRT engine (notes/tensorrt.md: the RTX
runtime refuses the H200, and full TensorRT cannot be installed), so the execution path
(execution.py) is written against the documented TensorRT 10/11 Python API and never ran.
What runs here is tested for real: the build (split by the mark budget), the name mapping,
the choice of engine per request, the listener and allocator objects, the fusion fallback.

A build split by the mark budget has several engines; only one is loaded at a time (each
holds the weights), and `run()` executes those that hold the wanted tensors, in order,
yielding each engine's tensors before loading the next. Device copies are dropped as soon as
their chunk is on the host.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, chunk_names
from trtdiff.backends.tensorrt import cache
from trtdiff.backends.tensorrt.buffers import to_numpy
from trtdiff.backends.tensorrt.builder import build_engine, make_logger
from trtdiff.backends.tensorrt.execution import NO_EXECUTION, EngineSession, map_debug_names
from trtdiff.backends.tensorrt.fusion import engine_fusion
from trtdiff.backends.tensorrt.importing import import_tensorrt, probe
from trtdiff.errors import BackendError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from trtdiff.backends.tensorrt.builder import BuildResult, BuildSettings
    from trtdiff.backends.tensorrt.fusion import FusionReport
    from trtdiff.source.onnx_graph import GraphInfo

__all__ = ["NO_EXECUTION", "TensorRTBackend", "plan_runs"]

TRT_API = ("Runtime", "ICudaEngine.create_engine_inspector")
TRT_OPTIONAL_API: tuple[str, ...] = ()
_LISTED = 5  # unmapped debug names quoted in a note


def plan_runs(names: Sequence[str], owner: Mapping[str, int], active: int | None) -> list[tuple[int, list[str]]]:
    """Which engines to run for `names`, in order, and what each returns.

    `owner` maps the tensors one engine marks to it; the rest (the network outputs, or all names
    for a build of one engine) come from any engine: the loaded one where it runs anyway, else the
    last one that runs, else the loaded one, else the first. The loaded engine runs first.
    """
    groups: dict[int, list[str]] = {}
    shared: list[str] = []
    for name in dict.fromkeys(names):
        if name in owner:
            groups.setdefault(owner[name], []).append(name)
        else:
            shared.append(name)
    if shared:
        if active is not None and (active in groups or not groups):
            target = active
        else:
            target = max(groups) if groups else 0
        groups.setdefault(target, []).extend(shared)
    return sorted(groups.items(), key=lambda item: (item[0] != active, item[0]))


class TensorRTBackend:
    """Builds (or loads from `cache_dir`) and runs the engines for the exact ONNX file in `graph`."""

    name = "tensorrt"

    def __init__(
        self,
        graph: GraphInfo,
        settings: BuildSettings | None = None,
        *,
        cache_dir: Path | None = None,
        device: int = 0,
        build: BuildResult | None = None,
    ) -> None:
        found = probe(device)
        if not found.can_run or found.gpu is None:
            raise BackendError(f"{NO_EXECUTION}: {found.reason}")
        import torch

        self.graph, self.gpu, self.cache_dir = graph, found.gpu, cache_dir
        with torch.cuda.device(found.gpu.index):
            self.build = build or build_engine(graph, settings, cache_dir=cache_dir, gpu=found.gpu)
        self._trt = import_tensorrt()
        self._logger = make_logger(self._trt)
        self._runtime = self._trt.Runtime(self._logger)
        plan = self.build.mark_plan
        self._reverse = plan.trt_to_onnx
        self._owner = plan.owner_of()
        self._available = self._returnable()
        self._session: EngineSession | None = None
        self._active: int | None = None
        self._notes: dict[str, None] = {}
        self.unmapped_debug: tuple[str, ...] = ()
        self._load(0)  # fail now, not in the middle of the comparison

    def describe(self) -> str:
        settings = self.build.settings
        precision = settings.precision + ("+tf32" if settings.tf32 else "")
        engines = len(self.build.plans)
        split = f", {engines} engines (mark budget)" if engines > 1 else ""
        return f"{self.build.info.describe()} on {self.gpu.describe()} ({precision}, outputs {settings.outputs}{split})"

    def available(self) -> set[str]:
        """Marked outputs; in unfused mode every mapped tensor, of which the engine reports those it kept."""
        return set(self._available)

    def notes(self) -> tuple[str, ...]:
        """What the runs so far found worth saying: debug tensors not mapped or not received, runtime cache."""
        return tuple(self._notes)

    def _returnable(self) -> frozenset[str]:
        """What `available` returns, computed once: the mark plan does not change after the build."""
        plan = self.build.mark_plan
        if plan.debug_unfused:
            return frozenset(plan.onnx_to_trt) - frozenset(self.graph.graph_inputs)
        return frozenset(plan.returned_onnx())

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Execute each engine that holds wanted tensors once; copy them to the host chunk by chunk."""
        names = [t for t in wanted if t in self._available]
        for index, group in plan_runs(names, self._owner, self._active):
            values = self._execute(index, feeds, set(group))
            try:
                for chunk in chunk_names(group, sizes, max_bytes):
                    yield {name: to_numpy(values.pop(name)) for name in chunk if name in values}
            finally:
                values.clear()
                _release_cached_memory()

    def fusion(self) -> FusionReport:
        """Which ONNX nodes each engine layer computes: the engine inspector, else the plan scan (never raises)."""
        if self._session is None or len(self.build.plans) > 1:
            return self.build.fusion_hint(self.graph)
        return engine_fusion(self._session.engine, self._trt, self.graph, self.build.plans)

    def _load(self, index: int) -> EngineSession:
        """The session of engine `index`, loading it in place of the one loaded (one engine at a time)."""
        if self._session is not None and self._active == index:
            return self._session
        if self._session is not None:
            self._session.release()
            self._session, self._active = None, None
            _release_cached_memory()
        engines = self.build.engines
        plan, key = (
            (engines[index].plan, engines[index].cache_key) if engines else (self.build.plan, self.build.cache_key)
        )
        label = str(self.graph.path) + (f" (engine {index + 1} of {len(engines)})" if len(engines) > 1 else "")
        self._session = EngineSession(
            self._trt,
            self._runtime,
            self._logger,
            plan,
            self.gpu,
            label=label,
            debug=self.build.mark_plan.debug_unfused,
            runtime_cache=cache.runtime_cache_path(self.cache_dir, key) if self.cache_dir is not None else None,
        )
        self._active = index
        return self._session

    def _execute(self, index: int, feeds: Mapping[str, np.ndarray], wanted: set[str]) -> dict[str, torch.Tensor]:
        """Run engine `index`; the wanted tensors by ONNX name (the rest is dropped at once)."""
        session = self._load(index)
        outputs, debug = session.execute(feeds)
        real = frozenset(self._reverse[n] for n in outputs if n in self._reverse)
        values = {self._reverse[n]: t for n, t in outputs.items() if self._reverse.get(n) in wanted}
        outputs.clear()
        if self.build.mark_plan.debug_unfused:
            mapped, self.unmapped_debug = map_debug_names(debug, self._reverse, self.build.mark_plan.tensor_names, real)
            debug.clear()
            values.update((name, tensor) for name, tensor in mapped.items() if name in wanted)
            self._note_debug(session, len(mapped))
        self._notes.update(dict.fromkeys(session.notes))
        return values

    def _note_debug(self, session: EngineSession, mapped: int) -> None:
        """Say what the unfused run's debug tensors were: none at all, some unmapped, some of unsupported types."""
        collector = session.listener.collector if session.listener is not None else None
        if collector is not None and collector.calls == 0:
            self._notes[
                "unfused: the engine reported no debug tensors at all; only the network outputs were compared "
                "(use outputs all to mark tensors instead)"
            ] = None
        if self.unmapped_debug:
            listed = ", ".join(self.unmapped_debug[:_LISTED])
            more = f" and {len(self.unmapped_debug) - _LISTED} more" if len(self.unmapped_debug) > _LISTED else ""
            self._notes[
                f"unfused: {len(self.unmapped_debug)} debug tensors have no ONNX name and were not compared "
                f"({listed}{more}); {mapped} were mapped"
            ] = None
        if collector is not None and collector.skipped:
            names = list(collector.skipped)
            more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
            self._notes[
                f"unfused: {len(names)} debug tensors of types with no torch equivalent (FP8, INT4, FP4) were not "
                f"compared ({', '.join(names[:_LISTED])}{more})"
            ] = None


def _release_cached_memory() -> None:
    """Hand the memory of dropped device copies back to the driver, for ONNX Runtime and PyTorch."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
