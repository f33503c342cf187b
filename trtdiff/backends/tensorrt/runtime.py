"""TensorRT as an `OnnxBackend`: one marked engine run group by group, beside the plain engine that ships.

No machine this project has can execute a TensorRT engine (docs/tensorrt.md: the RTX
runtime refuses the H200, and full TensorRT cannot be installed), so the execution path
(execution.py) is written against the documented TensorRT 10/11 Python API and never ran.
What runs here is tested for real: the builds, the name mapping, the run groups, the
listener and allocator objects, the fusion and precision reading, the bisection logic.

A sample takes one run of the one marked engine, whatever the mark budget or the chunk size:
the run switches on the debug state of every wanted tensor (or, unfused, every tensor the
engine kept), and the listener hands each wanted tensor to the comparison as it fires, in
chunks of at most `max_bytes` (stream.py: the run goes on a thread of its own and waits
while the chunk is full). The plain engine runs once per sample beside it; its final outputs
are compared with the marked engine's ("did marking change the answer?") with the comparison
the opener hands in (`compare`; none: the check is not run). The backend follows
base.OnnxBackend's lifecycle: `close()` stops a run still streaming, then releases both
engines, their contexts and buffers, once.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, OpenRequest, chunk_names
from trtdiff.backends.compiled.answer import AnswerCheck, Bisection, judged, minimal_marks, still_changes
from trtdiff.backends.tensorrt import cache
from trtdiff.backends.tensorrt.budget import run_groups
from trtdiff.backends.tensorrt.buffers import cuda_initialized, to_numpy
from trtdiff.backends.tensorrt.builder import build_engine, build_with_marks
from trtdiff.backends.tensorrt.execution import NO_EXECUTION, DebugNames, EngineSession
from trtdiff.backends.tensorrt.fusion import engine_fusion
from trtdiff.backends.tensorrt.importing import import_tensorrt, probe
from trtdiff.backends.tensorrt.logger import shared_logger
from trtdiff.backends.tensorrt.settings import engine_settings
from trtdiff.backends.tensorrt.stream import ThreadedRun
from trtdiff.errors import BackendError

if TYPE_CHECKING:
    from typing import Self

    import torch

    from trtdiff.backends.base import OutputComparison
    from trtdiff.backends.compiled.fusion import FusionReport
    from trtdiff.backends.tensorrt.api import Runtime
    from trtdiff.backends.tensorrt.builder import BuildResult
    from trtdiff.backends.tensorrt.execution import DebugMode
    from trtdiff.backends.tensorrt.marking import MarkPlan
    from trtdiff.options import BackendOptions, BuildSettings
    from trtdiff.report import MarkingCheck, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo

    # a streamed run: debug copies by ONNX name; what EngineSession.execute returns
    _Run = ThreadedRun[np.ndarray | torch.Tensor, tuple[dict[str, torch.Tensor], dict[str, np.ndarray | torch.Tensor]]]

__all__ = ["NO_EXECUTION", "TensorRTBackend", "plan_run"]

TRT_API = ("Runtime", "ICudaEngine.create_engine_inspector")
TRT_OPTIONAL_API: tuple[str, ...] = ()
_LISTED = 5  # names quoted in a note
NO_GROUP = -1  # an unfused run that copies no debug tensor


def plan_run(plan: MarkPlan, names: Sequence[str]) -> tuple[str, ...] | None:
    """The one run of a sample for the wanted debug tensors `names` (ONNX names): the TensorRT names it switches on.

    Mode "all": every wanted debug tensor, in the network's order, whatever the mark budget
    (the run streams them; its groups no longer split a sample). Mode "unfused": () (the
    engine's own debug tensors, all on). None where no debug tensor is wanted: a run with
    every debug tensor off, the outputs only.
    """
    if plan.mode == "unfused":
        return () if names else None
    wanted = {plan.onnx_to_trt[n] for n in names if n in plan.onnx_to_trt}
    return tuple(t for t in plan.debug if t in wanted) or None


class TensorRTBackend(OnnxBackend):
    """Builds (or loads from `cache_dir`) the marked and the plain engine for the ONNX file in `graph`, runs them."""

    name = "tensorrt"
    runs_once = True

    @classmethod
    def open(cls, graph: GraphInfo, request: OpenRequest) -> Self:
        """Build with the request's engine settings (else its options' and inputs'); write the engines where asked."""
        options, engine = request.options, request.engine
        settings = engine.settings if engine.settings is not None else engine_settings(options, request.feeds)
        backend = cls.with_settings(graph, settings, options, compare=request.compare_outputs)
        if engine.save_to is not None:
            try:
                backend.build.write_engines(engine.save_to)
            except BaseException:
                backend.close()
                raise
        return backend

    @classmethod
    def with_settings(
        cls,
        graph: GraphInfo,
        settings: BuildSettings,
        options: BackendOptions,
        *,
        plain_engine: bool = True,
        compare: OutputComparison | None = None,
    ) -> Self:
        """Built with `settings` (validated first) and the engine cache of `options` (`open`, and `rewritten.reopen`
        with `plain_engine` False: one engine on a model the culprit step rewrote)."""
        settings.validate()
        cache_dir = Path(options.engine_cache) if options.engine_cache else None
        return cls(graph, settings, cache_dir=cache_dir, plain_engine=plain_engine, compare=compare)

    def __init__(
        self,
        graph: GraphInfo,
        settings: BuildSettings | None = None,
        *,
        cache_dir: Path | None = None,
        device: int = 0,
        build: BuildResult | None = None,
        plain_engine: bool = True,
        compare: OutputComparison | None = None,
    ) -> None:
        """`plain_engine` False: no plain engine beside the marked one (a rewritten model of the culprit step).

        `compare`: how the plain engine's outputs are compared with the marked one's (none: that check is not run).
        """
        found = probe(device)
        if not found.can_run or found.gpu is None:
            raise BackendError(f"{NO_EXECUTION}: {found.reason}")
        import torch

        self.graph, self.gpu, self.cache_dir = graph, found.gpu, cache_dir
        with torch.cuda.device(found.gpu.index):
            self.build = build or build_engine(graph, settings, cache_dir=cache_dir, gpu=found.gpu, plain=plain_engine)
        self._trt = import_tensorrt()
        self._logger = shared_logger(self._trt)
        self._runtime: Runtime = self._trt.Runtime(self._logger)
        plan = self.build.mark_plan
        self._reverse = plan.trt_to_onnx
        self._available = self._returnable()
        self._marked: EngineSession | None = None
        self._plain: EngineSession | None = None
        self._streaming: _Run | None = None
        self._notes: dict[str, None] = {}
        self.unmapped_debug: tuple[str, ...] = ()
        self._compare = compare
        self.answer = AnswerCheck(compare) if compare is not None else None
        self._marked = self._open(self.build.marked.plan, self.build.marked.cache_key, "marked", self._debug_mode())

    def _release(self) -> None:
        """Stop a run still streaming, release both engines, their contexts and buffers (it cannot run afterwards)."""
        if self._streaming is not None:
            self._streaming.close()  # joins its thread: no engine runs while its context is released
        for session in (self._marked, self._plain):
            if session is not None:
                session.release()
        self._marked = self._plain = None
        _release_cached_memory()

    def describe(self) -> str:
        settings = self.build.settings
        precision = settings.precision + ("+tf32" if settings.tf32 else "")
        return (
            f"{self.build.info.describe()} on {self.gpu.describe()} ({precision}, outputs {settings.outputs}, "
            "1 engine, 1 run per sample)"
        )

    def available(self) -> set[str]:
        """Outputs and debug tensors; in unfused mode every mapped tensor, of which the engine reports those it kept."""
        return set(self._available)

    def notes(self) -> tuple[str, ...]:
        """What the runs so far found worth saying: debug tensors not mapped or not received, runtime cache."""
        return tuple(self._notes)

    def _returnable(self) -> frozenset[str]:
        plan = self.build.mark_plan
        if plan.mode == "unfused" and plan.debug_unfused:
            return frozenset(plan.onnx_to_trt) - frozenset(self.graph.graph_inputs)
        return frozenset(plan.returned_onnx())

    def _debug_mode(self) -> DebugMode:
        plan = self.build.mark_plan
        if plan.mode == "unfused":
            return "unfused" if plan.debug_unfused else None
        return "names" if plan.debug else None

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Run the marked engine once; yield the wanted debug tensors as they fire, then its outputs.

        Chunks hold at most `max_bytes` (a larger tensor comes alone). The plain engine runs
        once beside it; its outputs are compared with the marked engine's (`answer`).
        """
        self._check_open()
        plan = self.build.mark_plan
        names = [t for t in dict.fromkeys(wanted) if t in self._available]
        outputs = {self._reverse[t] for t in plan.outputs if t in self._reverse}
        plain = self._plain_outputs(feeds) if self.answer is not None else None
        if self.answer is not None:
            self.answer.new_sample()
        debug = [n for n in names if n not in outputs]
        switched = plan_run(plan, debug)
        if switched is None:
            values = self._execute(feeds, NO_GROUP if plan.mode == "unfused" else None, set(names), plain)
        else:
            route = DebugNames(self._reverse, plan.tensor_names, outputs, set(debug))
            values = yield from self._stream(feeds, switched, route, set(names), plain, max_bytes)
        try:
            for chunk in chunk_names([n for n in names if n in values], sizes, max_bytes):
                yield {name: values.pop(name) for name in chunk}
        finally:
            values.clear()
            _release_cached_memory()

    def _execute(
        self, feeds: Mapping[str, np.ndarray], group: int | None, wanted: set[str], plain: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]:
        """One run that reports no debug tensor (every one off; unfused: none copied); the wanted outputs."""
        session = self._session()
        outputs, debug = session.execute(feeds, group=group)
        debug.clear()
        self.unmapped_debug = ()
        return self._finish(session, feeds, outputs, wanted, plain, mapped=0, expected=False)

    def _stream(
        self,
        feeds: Mapping[str, np.ndarray],
        switched: tuple[str, ...],
        route: DebugNames,
        wanted: set[str],
        plain: dict[str, np.ndarray] | None,
        max_bytes: int,
    ) -> Generator[dict[str, np.ndarray], None, dict[str, np.ndarray]]:
        """The run with debug tensors, on a thread of its own: yield them as they fire, return the wanted outputs.

        An error of the run is raised here; an error or Ctrl-C in the comparison, or the
        caller closing the generator, stops the stream and joins the thread (stream.py).
        """
        session = self._session()
        run: _Run = ThreadedRun(
            lambda sink: session.execute(feeds, debug_names=switched, sink=sink), max_bytes, route.route
        )
        self._streaming = run
        try:
            for chunk in run.chunks():
                yield {name: _host(chunk.pop(name)) for name in list(chunk)}  # nothing here keeps it
        finally:
            run.close()
            self._streaming = None
            _release_cached_memory()
        outputs, _ = run.result
        self.unmapped_debug = tuple(route.unmapped)
        return self._finish(session, feeds, outputs, wanted, plain, mapped=route.handed, expected=True)

    def _finish(
        self,
        session: EngineSession,
        feeds: Mapping[str, np.ndarray],
        outputs: dict[str, torch.Tensor],
        wanted: set[str],
        plain: dict[str, np.ndarray] | None,
        *,
        mapped: int,
        expected: bool,
    ) -> dict[str, np.ndarray]:
        """After a run: its outputs against the plain engine's, what its debug tensors were; its wanted outputs."""
        final = {self._reverse[n]: to_numpy(t) for n, t in outputs.items() if n in self._reverse}
        outputs.clear()
        if plain is not None and self.answer is not None:
            self.answer.add(feeds, plain, final)
        self._note_debug(session, mapped, expected)
        self._notes.update(dict.fromkeys(session.notes))
        return {name: value for name, value in final.items() if name in wanted}

    def _plain_outputs(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The plain engine's final outputs on `feeds` (None where the marked engine is the plain one)."""
        if self.build.plain is None:
            return None
        if self._plain is None:
            self._plain = self._open(self.build.plain.plan, self.build.plain.cache_key, "plain", None)
        outputs, _ = self._plain.execute(feeds)
        final = {self._reverse.get(n, n): to_numpy(t) for n, t in outputs.items()}
        outputs.clear()
        return final

    def _session(self) -> EngineSession:
        if self._marked is None:
            raise BackendError(f"the TensorRT backend for {self.graph.path} was closed; open it again")
        return self._marked

    def _open(self, plan: bytes, key: str, what: str, debug: DebugMode) -> EngineSession:
        label = f"{self.graph.path} ({what} engine)"
        budget = self.build.mark_plan.budget.bytes if self.build.mark_plan.budget else None
        return EngineSession(
            self._trt,
            self._runtime,
            self._logger,
            plan,
            self.gpu,
            label=label,
            debug=debug,
            budget=budget,
            runtime_cache=cache.runtime_cache_path(self.cache_dir, key) if self.cache_dir is not None and key else None,
        )

    def fusion(self, graph: GraphInfo | None = None) -> FusionReport:
        """The marked engine's layers and their ONNX nodes: the engine inspector, else the plan scan (never raises).

        `graph`: the model to name nodes from (default the one compared; the FP16 conversion for precision).
        """
        engine = self._marked.engine if self._marked is not None else None
        return engine_fusion(engine, self._trt, graph or self.graph, (self.build.plan,))

    def plain_fusion(self) -> FusionReport:
        """The plain engine's layers: its inspector where it was loaded, else the plan scan (never raises)."""
        engine = self._plain.engine if self._plain is not None else None
        return engine_fusion(engine, self._trt, self.graph, (self.build.plain_plan,))

    def marking_check(self, thresholds: Thresholds) -> MarkingCheck:
        """Whether marking changed the answer over the samples run, bisecting the marks where asked (settings)."""
        from trtdiff.report import MarkingCheck

        if self.build.plain is None:
            return MarkingCheck(status="not run", reason="nothing is marked (outputs none): one engine")
        answer = self.answer
        if answer is None:
            return MarkingCheck(status="not run", reason="the backend was opened without an output comparison")
        return judged(
            answer,
            thresholds,
            lambda: self.bisect(thresholds),
            strict=self.build.settings.bisect_marks,
            can_bisect=self.build.mark_plan.mode == "all",
            rename=self._reverse,
        )

    def bisect(self, thresholds: Thresholds) -> Bisection:
        """Rebuild with half the marks at a time on the sample that differed most; one engine loaded at a time."""
        compare = self._compare
        witness = self.answer.witness if self.answer is not None else None
        expected = self.answer.witness_plain if self.answer is not None else None
        if compare is None or witness is None or expected is None:
            raise BackendError("no sample differed; nothing to bisect")
        self.close()  # the measured engines are done; each step loads only its own
        strict = self.build.settings.bisect_marks is True

        def changes(marks: Sequence[str]) -> bool:
            plan = build_with_marks(self.graph, self.build.settings, marks)
            session = self._open(plan, "", "bisection", "names")
            try:
                check = AnswerCheck(compare)
                budget = self.build.mark_plan.budget
                sizes = self.build.mark_plan.sizes
                for group in run_groups(list(marks), sizes, budget.bytes if budget else 1 << 62) or [()]:
                    outputs, debug = session.execute(witness, debug_names=group)
                    debug.clear()
                    final = {self._reverse.get(n, n): to_numpy(t) for n, t in outputs.items()}
                    check.add(witness, expected, final)
            finally:
                session.release()
                _release_cached_memory()
            return still_changes(check, thresholds, strict)

        return minimal_marks(self.build.mark_plan.debug, changes)

    def _note_debug(self, session: EngineSession, mapped: int, expected: bool) -> None:
        """Say what a run's debug tensors were: none at all (where some were switched on), unmapped, unsupported."""
        collector = session.collector
        if expected and collector.calls == 0:
            self._notes["the engine reported no debug tensors at all; only the network outputs were compared"] = None
        if self.unmapped_debug:
            listed = ", ".join(self.unmapped_debug[:_LISTED])
            more = f" and {len(self.unmapped_debug) - _LISTED} more" if len(self.unmapped_debug) > _LISTED else ""
            self._notes[
                f"{len(self.unmapped_debug)} debug tensors have no ONNX name and were not compared "
                f"({listed}{more}); {mapped} were mapped"
            ] = None
        if collector.skipped:
            names = list(collector.skipped)
            more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
            self._notes[
                f"{len(names)} debug tensors of types with no torch equivalent (FP8, INT4, FP4) were not "
                f"compared ({', '.join(names[:_LISTED])}{more})"
            ] = None


def _host(value: np.ndarray | torch.Tensor) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else to_numpy(value)


def _release_cached_memory() -> None:
    """Hand the memory of dropped device copies back to the driver, for ONNX Runtime and PyTorch."""
    import torch

    if cuda_initialized():
        torch.cuda.empty_cache()
