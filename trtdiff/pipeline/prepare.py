"""The step `compare`, `build` and `run` share: load -> inputs -> export or read ONNX -> open backends.

`prepare` takes the same `CompareOptions` for all three commands and yields one `Prepared`
value that the rest of the pipeline reads; the exported file lives in a temporary folder
until the `with` block ends, and every backend opened is closed then, errors included.
The run settings are derived from the options here, once: the PyTorch reference (module,
device, TF32, memory limit: `TorchReference`, whose `record` every recording goes through)
and the engine settings (the registry's `engine_settings`: TensorRT's), carried in `Prepared` to every consumer.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff import outputs
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends.registry import choose_backends, engine_settings, open_backends, saved_beside
from trtdiff.backends.store import release_memory
from trtdiff.errors import (
    ExportError,
    InputError,
    ModelRunError,
    OnnxFileError,
    OptionError,
    TrtdiffError,
    param,
)
from trtdiff.options import DEFAULT_OPSET, CompareOptions, ExportOptions, LoadOptions
from trtdiff.options.exporters import export_problem
from trtdiff.source.fp16 import GraphPrecision, in_precision, run_precision
from trtdiff.source.inputs import make_inputs
from trtdiff.source.loading import LoadedModel, from_module, load_model
from trtdiff.source.onnx_graph import GraphInfo, load_graph

if TYPE_CHECKING:
    import numpy as np
    import torch

    from trtdiff.backends.base import OnnxBackend
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.backends.pytorch.reference import TorchReference
    from trtdiff.backends.registry import OpenedBackends
    from trtdiff.options import BuildSettings
    from trtdiff.report import TensorRTSummary

Progress = Callable[[str], None]
# Makes the first recording of the PyTorch reference (`TorchReference.record`; a sweep lends one).
Record = Callable[["TorchReference", "Mapping[str, np.ndarray]"], "TorchCapture"]
# The same, given the module alone: a caller's own recording step.
Capture = Callable[["torch.nn.Module", "Mapping[str, np.ndarray]"], "TorchCapture"]


@dataclass(frozen=True)
class Source:
    """The loaded model, the ONNX file the user gave (if any), and the inputs, in input order."""

    loaded: LoadedModel
    given_graph: GraphInfo | None
    feeds: dict[str, np.ndarray]
    input_names: tuple[str, ...] = ()
    dtypes: dict[str, np.dtype] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def has_torch(self) -> bool:
        return self.loaded.kind != "onnx"


@dataclass(frozen=True)
class Prepared:
    """The model, its inputs, the ONNX graph compared, the backends opened on it and the run settings."""

    loaded: LoadedModel
    graph: GraphInfo
    exporter: str
    onnx_path: str | None
    model_feeds: dict[str, np.ndarray]
    feeds: dict[str, np.ndarray]
    input_names: tuple[str, ...]
    dtypes: dict[str, np.dtype]
    chosen: tuple[str, ...]
    capture: TorchCapture | None
    backends: tuple[OnnxBackend, ...]
    tensorrt: TensorRTSummary | None
    engine_path: Path | None
    notes: tuple[str, ...]
    reference: TorchReference | None  # the PyTorch side, when "torch" is chosen and the model has a module
    engine: BuildSettings  # TensorRT's engine settings: the options' TensorRT part, TF32, the shapes fed
    precision: GraphPrecision = "fp32"  # what the ONNX backends compute in (source.fp16.run_precision)
    emulated: frozenset[str] = frozenset()  # backends that run that graph without computing in its precision

    @property
    def has_torch(self) -> bool:
        return self.loaded.kind != "onnx"

    @property
    def inputs(self) -> dict[str, tuple[int, ...]]:
        """Each model input's shape, as the report states it."""
        return {name: tuple(int(d) for d in value.shape) for name, value in self.model_feeds.items()}


@contextmanager
def prepare(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    *,
    backends: Sequence[str] | None = None,
    first_feeds: Mapping[str, np.ndarray] | None = None,
    capture: Capture | None = None,
    timings: dict[str, float] | None = None,
    say: Progress | None = None,
    record: Record | None = None,
) -> Iterator[Prepared]:
    """Load `model`, build its inputs, export it (or read the given file) and open the backends.

    `backends` names the ONNX backends to open (default: those the options choose; "torch" is
    not opened here). `first_feeds` replaces the inputs built from shapes and files (a data
    set's first sample). When "torch" is chosen, `record` records the PyTorch reference (or
    `capture`, given the module alone); neither: nothing is recorded.
    """
    timings = {} if timings is None else timings
    say = say or (lambda _text: None)
    save_path = check_new_file(options.export.save_onnx, options.force, "save_onnx")
    engine_path = check_new_file(
        options.runtime.save_engine, options.force, "save_engine", _marked_beside(options.runtime.save_engine)
    )
    source, backends, notes = _loaded(model, options, backends, first_feeds, timings, say)
    precision = run_precision(options.runtime.precision, source.given_graph)
    golden = precision != "fp32"  # reduced precision is judged against the float32 model, its inputs made float32
    reference = _reference(source, options, backends, golden=golden)
    recording = _recording(record or _capturing(capture), reference, source, say, timings)
    with ExitStack() as stack:  # closed last in, first out: the backends, then the folder they read
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtdiff-")))
        graph, exporter, recorded = _export_then_record(
            source, options.export, save_path, folder, notes, recording, timings, say
        )
        graph, converted = in_precision(graph, precision, folder, options.runtime.keep_fp32)
        notes += converted
        feeds = onnx_feeds(graph, source.feeds)
        engine = engine_settings(options.runtime, feeds)  # every engine of the comparison is built with these
        opened = stack.enter_context(_opened(graph, feeds, options, backends, engine_path, engine, timings, say))
        emulated = _emulated(opened.backends, precision)
        yield Prepared(
            loaded=source.loaded,
            graph=graph,
            exporter=exporter,
            onnx_path=_onnx_path(source, save_path),
            model_feeds=source.feeds,
            feeds=feeds,
            input_names=source.input_names,
            dtypes=source.dtypes,
            chosen=tuple(backends),
            capture=recorded,
            backends=opened.backends,
            tensorrt=opened.tensorrt,
            engine_path=engine_path,
            notes=(*notes, *opened.notes, *(f"{name}: {why}" for name, why in emulated.items())),
            reference=reference,
            engine=engine,
            precision=precision,
            emulated=frozenset(emulated),
        )


@contextmanager
def _opened(
    graph: GraphInfo,
    feeds: dict[str, np.ndarray],
    options: CompareOptions,
    backends: Sequence[str],
    engine_path: Path | None,
    engine: BuildSettings,
    timings: dict[str, float],
    say: Progress,
) -> Iterator[OpenedBackends]:
    """The ONNX backends opened on `graph` (timed), closed when the block ends."""
    say("preparing backends (a TensorRT engine build can take minutes)")
    with timed(timings, "backends"):
        opening = open_backends(
            graph, feeds, options.runtime, backends, engine_path, compare_outputs=compare_tensors, engine=engine
        )
    with opening as opened:
        yield opened


def _emulated(backends: Sequence[OnnxBackend], precision: GraphPrecision) -> dict[str, str]:
    """Each backend that runs a reduced-precision graph without computing in that precision -> why."""
    return {b.name: why for b in backends if (why := b.emulates(precision)) is not None}


def _capturing(capture: Capture | None) -> Record | None:
    """`capture` (the module alone) as a recording step, for callers that give no `record`."""
    return None if capture is None else functools.partial(_module_only, capture)


def _recording(
    record: Record | None,
    reference: TorchReference | None,
    source: Source,
    say: Progress,
    timings: dict[str, float],
) -> Callable[[], TorchCapture] | None:
    """How the PyTorch reference is recorded, when it is: `record` with the comparison's reference."""
    if record is None or reference is None:
        return None
    return functools.partial(_recorded, record, reference, source, say, timings)


def _loaded(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    backends: Sequence[str] | None,
    first_feeds: Mapping[str, np.ndarray] | None,
    timings: dict[str, float],
    say: Progress,
) -> tuple[Source, Sequence[str], list[str]]:
    """The model loaded with its inputs, the backends to open (the options' choice unless given), the notes."""
    say("loading the model")
    with timed(timings, "load"):
        source = load_source(model, options.load, options.export.onnx, first_feeds)
    _check_exportable(source, options.export)
    if backends is not None:
        return source, backends, [*source.notes]
    chosen, chosen_notes = choose_backends(options.runtime, source.loaded.kind != "onnx")
    return source, chosen, [*source.notes, *chosen_notes]


def _reference(
    source: Source, options: CompareOptions, backends: Sequence[str], *, golden: bool
) -> TorchReference | None:
    """The PyTorch reference with the options' settings, when "torch" is compared and the model has a module
    (`golden`: the reference of a reduced-precision comparison, TorchReference.of)."""
    module = source.loaded.module
    if "torch" not in backends or module is None:
        return None
    from trtdiff.backends.pytorch.reference import TorchReference  # torch-free until it records

    return TorchReference.of(module, options.runtime, golden=golden)


def _module_only(step: Capture, reference: TorchReference, feeds: Mapping[str, np.ndarray]) -> TorchCapture:
    """A caller's recording step that takes the module alone, as a `Record`."""
    return step(reference.module, feeds)


def _onnx_path(source: Source, save_path: Path | None) -> str | None:
    """The ONNX file the report names: the given one (never exported), else where the export was saved."""
    given = source.given_graph.path if source.given_graph is not None else None
    return str(given or save_path) if save_path or given else None


def _export_then_record(
    source: Source,
    options: ExportOptions,
    save_path: Path | None,
    folder: Path,
    notes: list[str],
    record: Callable[[], TorchCapture] | None,
    timings: dict[str, float],
    say: Progress,
) -> tuple[GraphInfo, str, TorchCapture | None]:
    """The ONNX graph and its exporter, and the PyTorch recording (`record`, when one is wanted); `notes` grows.

    An exporter that runs the forward only to read what it returns (the TorchScript exporter
    with an archive) is given the recording's outputs instead: recorded first, then exported,
    one forward for both. Otherwise exported first, so that the export's own peak does not
    come on top of the recorded values; when that export fails, the forward is recorded
    anyway: a model whose forward fails (or returns no tensor) is named for that, rather than
    for the export it broke.
    """
    recorded: TorchCapture | None = None
    returned: Callable[[], Any] | None = None
    if record is not None and _export_reads_recording(source, options):
        recorded = record()
        notes += recorded.notes
        from trtdiff.backends.pytorch.capture import returned_value

        returned = functools.partial(returned_value, recorded)
    say("exporting to ONNX" if source.given_graph is None else "reading the ONNX file")
    try:
        with timed(timings, "export"):
            graph, exporter = onnx_graph_for(source, options, save_path, folder, notes, returned=returned)
    except TrtdiffError:
        if record is not None and recorded is None:
            record()
        raise
    release_memory()  # what the export freed, before the recording takes its own
    if record is not None and recorded is None:
        recorded = record()
        notes += recorded.notes
    return graph, exporter, recorded


def _export_reads_recording(source: Source, options: ExportOptions) -> bool:
    """Whether the export would run the forward only for its outputs, which the recording holds."""
    if source.given_graph is not None:
        return False
    from trtdiff.source.export import choose_exporter, reads_returned

    exporter = choose_exporter(options.exporter, options.opset or DEFAULT_OPSET, source.loaded)
    return reads_returned(source.loaded, exporter)


def _recorded(
    record: Record, reference: TorchReference, source: Source, say: Progress, timings: dict[str, float]
) -> TorchCapture:
    """The PyTorch reference recorded; a forward that fails or returns no tensor is named with the model it is."""
    say("running PyTorch, recording every op")
    try:
        with timed(timings, "torch"):
            recorded = record(reference, source.feeds)
    except ModelRunError as error:
        raise ModelRunError(f"{source.loaded.source}: {error.template}") from error
    if not recorded.output_keys:
        raise ModelRunError(
            f"{source.loaded.source}: the model's forward returned no tensor (None, or no tensor among what it "
            "returns); trtdiff compares the tensors a model returns: return its outputs"
        )
    return recorded


def load_source(
    model: str | Path | torch.nn.Module,
    options: LoadOptions,
    onnx: str | Path | None,
    first_feeds: Mapping[str, np.ndarray] | None = None,
) -> Source:
    """Load MODEL (a file, a factory spec or an nn.Module), the given ONNX file, and the inputs.

    `first_feeds` replaces the inputs built from shapes and files (a data set's first sample).
    """
    if isinstance(model, (str, Path)):
        loaded = load_model(str(model), model_class=options.model_class, trust=options.trust)
    else:
        loaded = from_module(model)
    if loaded.kind == "onnx":
        if onnx is not None:
            raise OptionError(
                "MODEL is already an ONNX file; give the PyTorch model as MODEL", parameter="onnx", value=onnx
            )
        onnx = loaded.onnx_path
    given = load_graph(onnx) if onnx is not None else None
    names = given.graph_inputs if given is not None else loaded.input_names
    dtypes = {} if given is None else {n: dtype for n in names if (dtype := given.tensor_type(n).dtype) is not None}
    notes = [*loaded.notes, *(given.notes if given is not None else ())]
    if first_feeds is not None:
        values = list(first_feeds.values())
        feeds = dict(zip(names, values, strict=True)) if len(names) == len(values) else dict(first_feeds)
        return Source(loaded, given, feeds, tuple(names), dtypes, tuple(notes))
    derived: dict[str, tuple[int, ...]] = {}
    if given is not None and not options.input_files:
        derived = _file_shapes(given, options.input_shapes)
        notes += _file_shape_notes(given, derived)
    feeds = make_inputs(
        list(names),
        shapes=list(options.input_shapes),
        files=list(options.input_files),
        seed=options.seed,
        dtypes=dtypes,
        file_shapes=derived,
    )
    return Source(loaded, given, feeds, tuple(names), dtypes, tuple(notes))


def _file_shapes(graph: GraphInfo, given: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Shapes for the inputs `given` does not name, read from the ONNX file (dynamic dimensions 1, empty ones 0).

    Positional shapes (no name) leave the file's shapes unused; an input of unknown rank gets none.
    """
    from trtdiff.options.parse import parse_input_shape

    named = [parse_input_shape(text)[0] for text in given]
    if given and None in named:
        return {}
    shapes = {}
    for name in graph.graph_inputs:
        shape = graph.tensor_type(name).shape
        if name not in named and shape is not None:
            shapes[name] = tuple(1 if d is None else d for d in shape)
    return shapes


def _file_shape_notes(graph: GraphInfo, derived: Mapping[str, tuple[int, ...]]) -> list[str]:
    """What was chosen for the file's dynamic dimensions, and which inputs the file declares empty."""

    def written(name: str) -> str:
        return f"{name}:{'x'.join(map(str, derived[name])) or 'scalar'}"

    dynamic = [n for n in derived if any(d is None for d in graph.tensor_type(n).shape or ())]
    empty = [n for n in derived if 0 in derived[n]]
    notes = []
    if dynamic:
        notes.append(
            f"dynamic dimensions set to 1 (give {', '.join(dynamic)} a shape to choose): "
            + ", ".join(written(n) for n in derived)
        )
    if empty:
        notes.append(
            f"empty input {', '.join(written(n) for n in empty)}: the file writes a 0 dimension, so the tensors "
            "computed from it are empty and compare exactly"
        )
    return notes


def _check_exportable(source: Source, options: ExportOptions) -> None:
    """Refuse an opset or exporter this model cannot be exported with, before recording PyTorch."""
    if source.given_graph is not None:
        return
    problem = export_problem(options.opset or DEFAULT_OPSET, options.exporter, source.loaded.kind)
    if problem is not None:
        value = (options.opset or DEFAULT_OPSET) if problem.parameter == "opset" else options.exporter
        raise OptionError(problem.message, parameter=problem.parameter, value=value)


def onnx_graph_for(
    source: Source,
    options: ExportOptions,
    save_path: Path | None,
    folder: Path,
    notes: list[str],
    returned: Callable[[], Any] | None = None,
) -> tuple[GraphInfo, str]:
    """The ONNX graph to compare (given, or exported now) and the name of the exporter used.

    `returned` gives what the forward returns on the inputs, for an exporter that reads it (export_onnx).
    """
    given, opset = source.given_graph, options.opset
    if given is not None:
        if opset is not None and given.opset != opset:
            notes.append(f"opset {opset} ignored: the given ONNX file declares opset {given.opset}")
        return given, "given"
    from trtdiff.source.export import export_onnx  # imports torch: only when exporting

    target = save_path if save_path is not None else folder / "model.onnx"
    result = export_onnx(
        source.loaded,
        source.feeds,
        opset=opset or DEFAULT_OPSET,
        exporter=options.exporter,
        path=target,
        returned=returned,
    )
    try:
        return load_graph(result.path), result.exporter  # opset and exporter are the report's own fields
    except OnnxFileError as error:  # the file is trtdiff's own export: the model is what to look at
        raise ExportError(
            f"{source.loaded.source}: the {result.exporter} exporter wrote an ONNX graph trtdiff cannot use "
            f"({error.template.removeprefix(f'{result.path}: ').split(';')[0]}): does the model's forward return "
            "a tensor computed from its inputs?"
        ) from error


def check_new_file(
    path: str | Path | None, force: bool, parameter: str, beside: str | Path | None = None
) -> Path | None:
    """A path trtdiff may write: never an existing file unless `force`, and its folder must exist.

    A symbolic link at the path counts as an existing file (one to a missing file too): with
    `force` it is replaced itself, never followed (trtdiff.outputs). `beside`: a second file
    written with it (the marked engine beside the one that ships), under the same rule.
    """
    if path is None:
        return None
    path = Path(path)
    for target in (path, *([] if beside is None else [Path(beside)])):
        there = outputs.found(target)
        if there == "folder":
            raise OptionError(f"{target} is a folder; give a file path", parameter=parameter, value=path)
        if there != "missing" and not force:
            what = "the file exists" if target == path else f"{target}, written beside it, exists"
            raise OptionError(
                f"{what}; choose another path or pass {param('force')} to overwrite it",
                parameter=parameter,
                value=path,
            )
    if not path.parent.is_dir():
        raise OptionError(f"folder {path.parent} does not exist; create it first", parameter=parameter, value=path)
    return path


def _marked_beside(path: str | None) -> Path | None:
    """Where the marked engine is written beside `--save-engine PATH` (None without one): the registry's
    `saved_beside`."""
    if path is None:
        return None
    return saved_beside(Path(path))


def onnx_feeds(graph: GraphInfo, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs keyed by the ONNX file's input names, checked against its static dimensions."""
    values = list(feeds.values())
    if set(graph.graph_inputs) <= set(feeds):
        named = {name: feeds[name] for name in graph.graph_inputs}
    elif len(graph.graph_inputs) == len(values):
        named = dict(zip(graph.graph_inputs, values, strict=True))
    else:
        raise InputError(
            f"{graph.path}: the ONNX file has inputs {', '.join(graph.graph_inputs)} but the model was given "
            f"{', '.join(feeds)}; check that {param('onnx')} belongs to this model"
        )
    for name, value in named.items():
        expected = graph.tensor_type(name)
        if expected.shape is None:
            continue
        fits = len(expected.shape) == value.ndim and all(
            d is None or d == v for d, v in zip(expected.shape, value.shape, strict=False)
        )
        if not fits:
            want = "x".join("?" if d is None else str(d) for d in expected.shape)
            got = "x".join(map(str, value.shape))
            fix = (
                f"drop {param('input_shapes')} for it to feed the empty input the file declares"
                if 0 in expected.shape
                else f"use {param('input_shapes')} {name}:{want.replace('?', '1')}"
            )
            raise InputError(f"input {name}: shape {got} does not fit {graph.path.name}, which expects {want}; {fix}")
    return named


@contextmanager
def timed(timings: dict[str, float], step: str) -> Iterator[None]:
    """Add the seconds the block took to `timings[step]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[step] = timings.get(step, 0.0) + time.perf_counter() - start
