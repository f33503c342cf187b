"""The one place backends are named, chosen and opened: recordings, ONNX Runtime, the ONNX spec, TensorRT, OpenVINO.

`BACKENDS` maps each name of `trtdiff.options.KNOWN_BACKENDS` to a `BackendSpec`: the class
that runs it (imported only when one is opened), whether it needs a GPU, the pip extra that
installs it, what it is, and what it can do (its capabilities: the hooks and roles the
functions below ask, so that no stage above the backends names a runtime). `open_backend`
opens one on an ONNX graph with the comparison's options; `open_backends` opens those a
comparison chose, in a fixed order (recordings, then ONNX Runtime, the spec evaluator,
TensorRT, OpenVINO), and says why one that cannot run here was skipped. Both hand back
context managers: every backend opened is closed when the `with` block ends, errors included,
and when opening a later one fails, the ones opened before it are closed. A new backend is a
class with the `OnnxBackend` lifecycle and one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Literal

from trtdiff.backends.base import EngineRequest, OnnxBackend, OpenRequest, Unavailable
from trtdiff.errors import BackendError, OptionError, param
from trtdiff.options import DEFAULT_BACKENDS, BackendOptions

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.backends.base import OutputComparison
    from trtdiff.options import BuildSettings
    from trtdiff.report import TensorRTSummary, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo


@dataclass(frozen=True)
class BackendSpec:
    """What a backend name stands for, and what it can do besides running its ONNX file.

    `opens`: "module:Class" of its `OnnxBackend`, imported when one is opened (None for the
    PyTorch reference, which is captured from the model, not opened on an ONNX file).
    `needs_gpu`: it runs nothing without a CUDA GPU. `extra`: the pip extra that installs
    it (None: a core dependency). `title`: its name in sentences.

    Its capabilities, asked through this module's functions so that the stages above it know
    no runtime by name (a hook is "module:function", imported when asked):

    - `compiled`: a compiling (fusing) runtime (TensorRT, OpenVINO): a failure of it on a model
      trtdiff rewrote (the culprit pass's shadow model, attribution's injected one) is a note
      of the report, not the end of a comparison already made (`tolerates_rewrite_failure`).
    - `unavailable`: hook saying why it cannot run here (base.Unavailable; None: it can);
      `open_backends` skips it with that reason, or refuses when it is required.
    - `reopens`: hook opening it on a model trtdiff rewrote (`reopen_backend`; None: opened as
      on the original file, without a plain-against-marked check).
    - `exact`: the runtime asked for values the comparison did not give (`exact_backend`):
      shape arithmetic as the file computes it, a reference where PyTorch's is not at hand,
      inspect's magnitudes.
    - `evaluates_spec`: the ONNX spec's own evaluator (`spec_evaluator`), the third opinion of
      a culprit's export-or-runtime verdict.
    - `reruns_repro`: runs a repro bundle's standalone subgraph again (`repro_backends`);
      `repro_readme`: hook writing the README lines that replay the subgraph in it, for a
      runtime with no command of its own (`repro_readme_lines`).
    - A runtime that builds engines (TensorRT): `engine_settings`, hook deriving the
      comparison's engine settings from the options and the inputs fed (`engine_settings`);
      `saves_beside`, the second file `--save-engine PATH` writes (`saved_beside`); `builds`,
      what `trtdiff build` builds without running (`build_engines`); `summarizes`, the
      report's own part for what it built and ran (`ran_summary`).

    Whether it computes a reduced precision or only emulates it is the opened backend's own
    answer (`OnnxBackend.emulates`).
    """

    name: str
    kind: Literal["reference", "onnx"]
    opens: str | None
    needs_gpu: bool
    extra: str | None
    title: str
    describes: str
    compiled: bool = False
    reopens: str | None = None
    unavailable: str | None = None
    exact: bool = False
    evaluates_spec: bool = False
    reruns_repro: bool = False
    repro_readme: str | None = None
    engine_settings: str | None = None
    saves_beside: str | None = None
    builds: str | None = None
    summarizes: str | None = None


BACKENDS: Mapping[str, BackendSpec] = MappingProxyType(
    {
        "torch": BackendSpec(
            "torch",
            "reference",
            None,
            needs_gpu=False,
            extra=None,
            title="PyTorch",
            describes="the model's own forward in PyTorch, recorded op by op: the reference",
        ),
        "onnxruntime": BackendSpec(
            "onnxruntime",
            "onnx",
            "trtdiff.backends.onnxruntime_backend:OnnxRuntimeBackend",
            needs_gpu=False,
            extra=None,
            title="ONNX Runtime",
            describes="ONNX Runtime on the exact ONNX file, graph optimizations off, every node output exposed",
            exact=True,
            reruns_repro=True,
        ),
        "onnx-reference": BackendSpec(
            "onnx-reference",
            "onnx",
            "trtdiff.backends.onnx_reference:OnnxReferenceBackend",
            needs_gpu=False,
            extra=None,
            title="the ONNX reference evaluator",
            describes="onnx.reference, the ONNX spec's own evaluator (numpy, CPU): which runtime follows the spec",
            evaluates_spec=True,
            reruns_repro=True,
        ),
        "tensorrt": BackendSpec(
            "tensorrt",
            "onnx",
            "trtdiff.backends.tensorrt.runtime:TensorRTBackend",
            needs_gpu=True,
            extra="tensorrt-rtx",
            title="TensorRT",
            describes="TensorRT (or TensorRT-RTX): a marked engine with debug tensors beside the plain engine",
            compiled=True,
            unavailable="trtdiff.backends.tensorrt.selection:skipped_here",
            reopens="trtdiff.backends.tensorrt.rewritten:reopen",
            engine_settings="trtdiff.backends.tensorrt.settings:engine_settings",
            saves_beside="trtdiff.backends.tensorrt.result:marked_engine_path",
            builds="trtdiff.backends.tensorrt.command:build",
            summarizes="trtdiff.backends.tensorrt.selection:ran_summary",
        ),
        "openvino": BackendSpec(
            "openvino",
            "onnx",
            "trtdiff.backends.openvino.runtime:OpenVINOBackend",
            needs_gpu=False,
            extra="openvino",
            title="OpenVINO",
            describes="OpenVINO (CPU plugin by default, the graph's precision): compiled models with added outputs "
            "beside the plain one",
            compiled=True,
            unavailable="trtdiff.backends.openvino:skipped_here",
            repro_readme="trtdiff.backends.openvino.repro:readme_lines",
        ),
    }
)
"""Every backend by name, in the order they are opened (the names of trtdiff.options.KNOWN_BACKENDS)."""


def tolerates_rewrite_failure(name: str) -> bool:
    """Whether backend `name` failing on a rewritten model (culprit pass, attribution) is a note: a compiled runtime."""
    spec = BACKENDS.get(name)
    return spec is not None and spec.compiled


def exact_backend() -> str:
    """The backend trtdiff asks for values the comparison did not give (BackendSpec.exact): ONNX Runtime."""
    return next(spec.name for spec in BACKENDS.values() if spec.exact)


def spec_evaluator() -> str:
    """The ONNX spec's own evaluator (BackendSpec.evaluates_spec): the third opinion of a culprit's verdict."""
    return next(spec.name for spec in BACKENDS.values() if spec.evaluates_spec)


def repro_backends() -> tuple[str, ...]:
    """The backends that run a repro's standalone subgraph again (BackendSpec.reruns_repro), in registry order."""
    return tuple(spec.name for spec in BACKENDS.values() if spec.reruns_repro)


def repro_readme_lines(name: str, graph: GraphInfo, subgraph: str) -> list[str]:
    """The repro README's lines replaying the `subgraph` file in backend `name` as the comparison on `graph` ran it
    (BackendSpec.repro_readme: OpenVINO, which has no command for it); none for the others."""
    spec = BACKENDS.get(name)
    if spec is None or spec.repro_readme is None:
        return []
    write: Callable[[GraphInfo, str], list[str]] = _hook(spec.repro_readme)
    return write(graph, subgraph)


def engine_settings(options: BackendOptions, feeds: Mapping[str, np.ndarray] | None = None) -> BuildSettings:
    """The comparison's engine settings from `options` and, given `feeds`, their shapes, as the backend that builds
    engines derives them (BackendSpec.engine_settings: TensorRT's part of the options with the precision and TF32).

    Imports neither TensorRT nor torch; a precision no engine is built at is refused when the settings are validated.
    """
    derive: Callable[[BackendOptions, Mapping[str, np.ndarray] | None], BuildSettings] = _declared("engine_settings")
    return derive(options, feeds)


def saved_beside(path: Path) -> Path | None:
    """The second file `--save-engine PATH` writes beside PATH (BackendSpec.saves_beside: TensorRT's marked engine),
    None where no backend writes one. Imports neither TensorRT nor torch."""
    beside: Callable[[Path], Path] | None = _declared("saves_beside")
    return None if beside is None else beside(path)


def build_engines(
    graph: GraphInfo,
    settings: BuildSettings,
    options: BackendOptions,
    engine_path: Path | None,
    timed: Callable[[str], AbstractContextManager[None]],
) -> TensorRTSummary:
    """What `trtdiff build` does (BackendSpec.builds: TensorRT): the engines of `graph` built with `settings`, not
    run, written to `engine_path` where given, and what the report says about them; `timed(step)` times each step."""
    build: Callable[..., TensorRTSummary] = _declared("builds")
    return build(graph, settings, options, engine_path, timed)


def ran_summary(backends: Sequence[OnnxBackend], thresholds: Thresholds | None = None) -> TensorRTSummary | None:
    """The report's `tensorrt` part: what the live backend among `backends` whose spec `summarizes` (TensorRT) built,
    fused and found comparing its two engines under `thresholds`; None where none of them ran."""
    for spec in BACKENDS.values():
        if spec.summarizes is None or not any(backend.name == spec.name for backend in backends):
            continue
        summarize: Callable[[Sequence[OnnxBackend], Thresholds | None], TensorRTSummary | None] = _hook(spec.summarizes)
        found = summarize(backends, thresholds)
        if found is not None:
            return found
    return None


def _declared(attribute: str) -> Any:
    """The function the first spec declaring hook `attribute` names (imported now), None where no spec declares it."""
    path = next((found for spec in BACKENDS.values() if (found := getattr(spec, attribute)) is not None), None)
    return None if path is None else _hook(path)


def backend_spec(name: str) -> BackendSpec:
    """The spec of backend `name`; an OptionError naming the choices for any other name."""
    spec = BACKENDS.get(name)
    if spec is None:
        raise OptionError(f"unknown backend; choose from {', '.join(BACKENDS)}", parameter="backends", value=name)
    return spec


def backend_class(name: str) -> type[OnnxBackend]:
    """The class that runs ONNX backend `name` (its module is imported now, not before)."""
    spec = backend_spec(name)
    if spec.opens is None:
        raise OptionError(
            f"{spec.title} is the reference, recorded from the model; it runs no ONNX file",
            parameter="backend",
            value=name,
        )
    found = _hook(spec.opens)
    if not (isinstance(found, type) and issubclass(found, OnnxBackend)):
        raise TypeError(f"{spec.opens} is not an OnnxBackend")
    return found


def open_backend(
    name: str,
    graph: GraphInfo,
    options: BackendOptions | None = None,
    *,
    feeds: Mapping[str, np.ndarray] | None = None,
    engine_path: Path | None = None,
    compare_outputs: OutputComparison | None = None,
    engine: BuildSettings | None = None,
) -> OnnxBackend:
    """Open ONNX backend `name` on `graph` with `options` (ONNX Runtime's provider, TensorRT's settings).

    The backend is a context manager: use it in a `with` block (or an ExitStack) so that it is
    closed on every path. `feeds` and `compare_outputs` are read by the runtimes that need them,
    `engine` (the engine settings the comparison derived) and `engine_path` (where to write the
    engines) by one that builds engines (base.OpenRequest, base.EngineRequest).
    Raises OptionError for an unknown name, BackendError (or the backend's own TrtdiffError)
    when it cannot open.
    """
    request = OpenRequest(
        options if options is not None else BackendOptions(),
        feeds=feeds,
        compare_outputs=compare_outputs,
        engine=EngineRequest(engine, engine_path),
    )
    return backend_class(name).open(graph, request)


def reopen_backend(
    name: str,
    graph: GraphInfo,
    feeds: Mapping[str, np.ndarray],
    options: BackendOptions,
    engine: BuildSettings | None = None,
) -> OnnxBackend:
    """Backend `name` on a model trtdiff rewrote (the culprit step's shadow model, attribution's injected one),
    with the comparison's `options` and engine settings (`engine`).

    Through its spec's `reopens` where it has one (TensorRT: one engine, no plain one beside
    it); else opened as on the original file, without a plain-against-marked check.
    """
    spec = backend_spec(name)
    if spec.reopens is None:
        return open_backend(name, graph, options, feeds=feeds)
    reopen: Callable[..., OnnxBackend] = _hook(spec.reopens)
    return reopen(graph, feeds, options, engine)


def _hook(path: str) -> Any:
    """The function a spec names as "module:function" (its module is imported now, not before)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def open_recording(name: str, path: str | Path, graph: GraphInfo) -> OnnxBackend:
    """A recording of backend `name` (`trtdiff run ... save`) replayed on `graph` (InputError when it does not fit)."""
    from trtdiff.backends.recorded import RecordedBackend

    return RecordedBackend(name, path, graph)


@dataclass(frozen=True)
class OpenedBackends:
    """The ONNX backends ready to run, what TensorRT did (if asked for), and notes for the report.

    A context manager: leaving the `with` block closes every backend (`close()`).
    """

    backends: tuple[OnnxBackend, ...]
    tensorrt: TensorRTSummary | None
    notes: tuple[str, ...]
    _stack: ExitStack = field(default_factory=ExitStack, repr=False, compare=False)

    def close(self) -> None:
        """Close every backend, the last opened first (idempotent)."""
        self._stack.close()

    def __enter__(self) -> OpenedBackends:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def choose_backends(options: BackendOptions, has_torch: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the backends to try, notes): as given, else torch (with a PyTorch model), onnxruntime, tensorrt.

    Required backends are added; recorded ones come after the others.
    """
    chosen = tuple(dict.fromkeys(options.backends)) if options.backends else DEFAULT_BACKENDS
    chosen = tuple(dict.fromkeys((*chosen, *options.require, *options.recordings)))
    notes: tuple[str, ...] = ()
    if "torch" in chosen and not has_torch:
        notes = ("MODEL is an ONNX file: only ONNX backends are compared",)
        if "torch" in options.require:
            raise OptionError(
                f"MODEL is an ONNX file; give the PyTorch model as MODEL and the file with {param('onnx')}",
                parameter="require",
                value="torch",
            )
        chosen = tuple(b for b in chosen if b != "torch")
    return chosen, notes


def open_backends(
    graph: GraphInfo,
    feeds: Mapping[str, np.ndarray],
    options: BackendOptions,
    names: Sequence[str],
    engine_path: Path | None = None,
    *,
    compare_outputs: OutputComparison | None = None,
    engine: BuildSettings | None = None,
) -> OpenedBackends:
    """Open the ONNX backends among `names` on `graph` (recordings replace running a backend).

    A backend whose spec says it cannot run here (`unavailable`: TensorRT without a GPU it
    supports, OpenVINO not installed) is skipped with the reason (a BackendError naming
    `require` when required). `compare_outputs`: how TensorRT and OpenVINO compare their plain
    and marked models' outputs; `engine`: the engine settings TensorRT builds with. Use the
    result in a `with` block: it closes what it opened.
    """
    with ExitStack() as stack:
        opened: list[OnnxBackend] = [
            stack.enter_context(open_recording(n, p, graph)) for n, p in options.recordings.items() if n in names
        ]
        notes: list[str] = []
        summary = None
        for spec in BACKENDS.values():
            if spec.kind != "onnx" or spec.name not in names or spec.name in options.recordings:
                continue
            missing = _unavailable(spec, options)
            if missing is not None:
                summary = missing.summary if missing.summary is not None else summary
                notes.append(f"{spec.title} skipped: {missing.reason}")
                if engine_path is not None and spec.builds is not None:
                    notes.append(
                        f"no engine written to {engine_path}: {spec.title} did not run; `trtdiff build` builds one"
                    )
                continue
            backend = open_backend(
                spec.name,
                graph,
                options,
                feeds=feeds,
                engine_path=engine_path,
                compare_outputs=compare_outputs,
                engine=engine,
            )
            opened.append(stack.enter_context(backend))
        return OpenedBackends(tuple(opened), summary, tuple(notes), stack.pop_all())


def _unavailable(spec: BackendSpec, options: BackendOptions) -> Unavailable | None:
    """Why `spec`'s backend cannot run here (its spec's `unavailable` hook), or None when it can (or has no hook).

    BackendError naming `require` instead when it is required.
    """
    if spec.unavailable is None:
        return None
    check: Callable[[], Unavailable | None] = _hook(spec.unavailable)
    found = check()
    if found is not None and spec.name in options.require:
        raise BackendError(f"{spec.title} cannot run here: {found.reason}", parameter="require", value=spec.name)
    return found
