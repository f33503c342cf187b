"""Parse the exact ONNX file with TensorRT, mark outputs, set precision, build a plan.

Precision: FP32 with TF32 off unless asked (TensorRT turns TF32 on by default for FP32
convolutions and matmuls). FP16: where `BuilderFlag.FP16` exists (TRT 10) it is set, with
the precision-constraint flags asked for; where it does not (TRT 11, TensorRT-RTX: strongly
typed) the ONNX model is converted to FP16 first (fp16.py) and the result says so.
Networks are created with flags 0: explicit batch is the only mode in TRT 10+, and strong
typing is then the default where it is the only mode.

Mark budget: where the marked tensors would take more device memory than the budget, the
network is built once per slice of the marks (slicing.py), each engine cached under its own
key; the budget itself is left out of the cache key, so an unsplit build keeps its key.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import onnx

from trtdiff.backends.tensorrt import cache
from trtdiff.backends.tensorrt.fp16 import convert_to_fp16
from trtdiff.backends.tensorrt.importing import import_tensorrt, tensorrt_info
from trtdiff.backends.tensorrt.marking import mark_network
from trtdiff.backends.tensorrt.result import BuildResult, EnginePlan
from trtdiff.backends.tensorrt.slicing import default_budget, select_marks, split_marks
from trtdiff.errors import BackendError, OptionError, param
from trtdiff.options import BuildSettings
from trtdiff.source.loading import utf8_path

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.backends.tensorrt.importing import GpuInfo, TensorRTInfo
    from trtdiff.backends.tensorrt.marking import MarkPlan
    from trtdiff.source.onnx_graph import GraphInfo

_CONSTRAINT_FLAGS = {"obey": "OBEY_PRECISION_CONSTRAINTS", "prefer": "PREFER_PRECISION_CONSTRAINTS"}

TRT_API = (
    "Builder.create_network",
    "Builder.create_builder_config",
    "Builder.build_serialized_network",
    "Builder.create_optimization_profile",
    "OnnxParser.parse_from_file",
    "OnnxParser.num_errors",
    "OnnxParser.get_error",
    "ParserError.desc",
    "ParserError.code",
    "ILogger.log",
    "ILogger.Severity",
    "IBuilderConfig.set_flag",
    "IBuilderConfig.clear_flag",
    "IBuilderConfig.set_memory_pool_limit",
    "IBuilderConfig.add_optimization_profile",
    "IBuilderConfig.profiling_verbosity",
    "IBuilderConfig.builder_optimization_level",
    "IOptimizationProfile.set_shape",
    "MemoryPoolType.WORKSPACE",
    "ProfilingVerbosity.DETAILED",
    "INetworkDefinition.get_input",
    "ITensor.shape",
    "IHostMemory.nbytes",
)
TRT_OPTIONAL_API = (
    "BuilderFlag.TF32",
    "BuilderFlag.FP16",
    "BuilderFlag.OBEY_PRECISION_CONSTRAINTS",
    "BuilderFlag.PREFER_PRECISION_CONSTRAINTS",
    "ParserError.node",
    "ParserError.node_name",
    "ParserError.node_operator",
    "IBuilderConfig.set_compute_capability",
    "IBuilderConfig.num_compute_capabilities",
    "IBuilderConfig.create_timing_cache",
    "IBuilderConfig.set_timing_cache",
    "IBuilderConfig.get_timing_cache",
    "ITimingCache.serialize",
)


def input_shapes_from(feeds: Mapping[str, np.ndarray]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """BuildSettings.input_shapes for these feeds (fixes dynamic inputs to the shapes compared)."""
    return tuple((name, tuple(int(d) for d in value.shape)) for name, value in feeds.items())


@dataclass
class ParsedNetwork:
    """A parsed network and the objects that must outlive it (builder, parser, logger)."""

    trt: ModuleType
    builder: Any
    network: Any
    parser: Any
    logger: Any
    model: onnx.ModelProto


def make_logger(trt: ModuleType) -> Any:
    """An ILogger that keeps errors and warnings, so messages end up in our errors, not on stderr."""

    class CollectingLogger(trt.ILogger):  # type: ignore[name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []
            self.warnings: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity in (trt.ILogger.Severity.ERROR, trt.ILogger.Severity.INTERNAL_ERROR):
                self.errors.append(msg)
            elif severity == trt.ILogger.Severity.WARNING:
                self.warnings.append(msg)

    return CollectingLogger()


def parse_onnx(
    path: Path, model: onnx.ModelProto, trt: ModuleType | None = None, label: Path | None = None
) -> ParsedNetwork:
    """Parse the ONNX file at `path` (`model` is its content, used for name mapping)."""
    trt = trt or import_tensorrt()
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    # A path its C++ cannot take (not UTF-8) is read here; the weights must then be inside the file.
    parsed = parser.parse_from_file(str(path)) if utf8_path(path) else parser.parse(path.read_bytes())
    if not parsed:
        raise BackendError(parser_message(parser, label or path, logger.errors))
    return ParsedNetwork(trt, builder, network, parser, logger, model)


def parser_message(parser: Any, path: Path, logged: list[str]) -> str:
    """One line naming the first rejected ONNX node and op, and what to try."""
    if parser.num_errors == 0:
        cause = _one_line(logged[-1] if logged else "no message")
        return f"{path}: TensorRT's ONNX parser failed ({cause}); check the file with onnx.checker"
    error = parser.get_error(0)
    more = f" (+{parser.num_errors - 1} more)" if parser.num_errors > 1 else ""
    desc = _one_line(str(error.desc()))
    name = error.node_name() if hasattr(error, "node_name") else ""
    op = error.node_operator() if hasattr(error, "node_operator") else ""
    index = error.node() if hasattr(error, "node") else -1
    if name or op or index >= 0:
        where = f"node {name or f'#{index}'} (op {op or '?'})"
        return (
            f"{path}: TensorRT's ONNX parser rejected {where}: {desc}{more}; "
            f"try another {param('opset')} or replace that op before export"
        )
    return f"{path}: TensorRT's ONNX parser could not read the model: {desc}{more}; check the file with onnx.checker"


def build_engine(
    graph: GraphInfo,
    settings: BuildSettings | None = None,
    *,
    cache_dir: Path | None = None,
    gpu: GpuInfo | None = None,
) -> BuildResult:
    """Parse `graph.path`, mark outputs, build (or load from `cache_dir`) and describe the plan.

    Where marking every tensor would exceed the mark budget (`settings.mark_budget_bytes`, else
    half the free memory of `gpu`, else none), one engine is built per slice of the marks.
    """
    settings = settings or BuildSettings()
    settings.validate()
    trt = import_tensorrt()
    info = tensorrt_info(trt)
    if settings.precision_constraints != "none" and not info.has_fp16_flag:
        raise OptionError(
            f"{info.describe()} is strongly typed and has no precision-constraint flags; drop the option",
            parameter="precision_constraints",
            value=settings.precision_constraints,
        )
    notes: list[str] = []
    extra: dict[str, Any] = {}
    parsed, parsed_what = _parse_for(graph, settings, info, trt, notes, extra)
    sizes = {name: graph.tensor_type(name).nbytes() for name in graph.node_outputs}
    plan = mark_network(
        trt, parsed.network, parsed.parser, parsed.model, settings.outputs, mark_bool=settings.mark_bool, sizes=sizes
    )
    budget: int | None
    if settings.mark_budget_bytes is not None:
        budget, why = settings.mark_budget_bytes, "as given"
    else:
        budget, why = default_budget(gpu.index if gpu is not None else None)
    plan = split_marks(plan, budget, why)
    config, flags, config_notes = configure(parsed, settings, info)
    notes += config_notes
    keyed = {k: v for k, v in settings.to_dict().items() if k != "mark_budget_bytes"}  # slices are keyed instead
    key = cache.cache_key(cache.onnx_file_bytes(graph.path, graph.model), keyed, info, gpu, extra)
    engines = _build_engines(graph, parsed, config, plan, key, settings, cache_dir, notes)
    return BuildResult(
        engines[0].plan,
        round(sum(e.build_seconds for e in engines), 4),
        flags,
        settings,
        plan,
        info,
        str(graph.path),
        parsed_what,
        key,
        all(e.from_cache for e in engines),
        tuple(notes),
        tuple(engines),
    )


def _build_engines(
    graph: GraphInfo,
    parsed: ParsedNetwork,
    config: Any,
    plan: MarkPlan,
    key: str,
    settings: BuildSettings,
    cache_dir: Path | None,
    notes: list[str],
) -> list[EnginePlan]:
    """One engine per slice of the marks (one engine when not split), each from the cache where it is there."""
    marks = plan.engine_marks()
    engines: list[EnginePlan] = []
    timing: bool | None = None
    for index, marked in enumerate(marks):
        engine_key = key if len(marks) == 1 else cache.slice_key(key, index, marked)
        if len(marks) > 1:
            select_marks(parsed.network, plan, index)
        cached = cache.load_engine(cache_dir, engine_key) if cache_dir is not None else None
        if cached is not None:
            engines.append(EnginePlan(cached, marked, engine_key, 0.0, True))
            continue
        if timing is None:
            timing = _attach_timing_cache(parsed.trt, config, cache_dir, notes)
        start = time.perf_counter()
        serialized = parsed.builder.build_serialized_network(parsed.network, config)
        seconds = round(time.perf_counter() - start, 4)
        if serialized is None:
            raise _build_failure(graph, parsed, settings)
        engines.append(EnginePlan(bytes(serialized), marked, engine_key, seconds, False))
        if cache_dir is not None:
            meta = {"onnx_path": str(graph.path), "settings": settings.to_dict(), "engine": index, "of": len(marks)}
            cache.save_engine(cache_dir, engine_key, engines[-1].plan, {**meta, "marked": list(marked)})
    if timing and cache_dir is not None:
        cache.save_timing_cache(cache_dir, bytes(config.get_timing_cache().serialize()))
    return engines


def _build_failure(graph: GraphInfo, parsed: ParsedNetwork, settings: BuildSettings) -> BackendError:
    """The error for a build that returned no plan: TensorRT's last logged error and what to try."""
    cause = _one_line(parsed.logger.errors[-1]) if parsed.logger.errors else "no message"
    hint = (
        f"try {param('outputs')} none to see whether marking outputs is the cause"
        if settings.outputs == "all"
        else "check the TensorRT log with a verbose logger"
    )
    return BackendError(f"{graph.path}: TensorRT could not build the engine: {cause}; {hint}")


def _parse_for(
    graph: GraphInfo,
    settings: BuildSettings,
    info: TensorRTInfo,
    trt: ModuleType,
    notes: list[str],
    extra: dict[str, Any],
) -> tuple[ParsedNetwork, str]:
    """Parse the given file, or its FP16 conversion where FP16 must come from the model's types; say which."""
    if not (settings.precision == "fp16" and info.strongly_typed_only):
        return parse_onnx(graph.path, graph.model, trt, label=graph.path), "the given ONNX file"
    conversion = convert_to_fp16(graph.model)
    notes.append(conversion.note())
    extra["fp16_converter"] = conversion.converter
    with tempfile.TemporaryDirectory(prefix="trtdiff-trt-") as tmp:
        source = Path(tmp) / f"{graph.path.stem}.fp16.onnx"
        onnx.save(conversion.model, str(source))
        parsed = parse_onnx(source, conversion.model, trt, label=graph.path)
    return parsed, f"an FP16 conversion of the given file ({conversion.converter})"


def configure(
    parsed: ParsedNetwork, settings: BuildSettings, info: TensorRTInfo
) -> tuple[Any, tuple[str, ...], list[str]]:
    """A builder config for `settings`: returns it, the flags set, and notes on what was done."""
    trt, config = parsed.trt, parsed.builder.create_builder_config()
    flags: list[str] = []
    notes: list[str] = []
    if hasattr(trt.BuilderFlag, "TF32"):
        if settings.tf32:
            config.set_flag(trt.BuilderFlag.TF32)
            flags.append("TF32")
        else:
            config.clear_flag(trt.BuilderFlag.TF32)
    elif settings.tf32:
        notes.append("tf32 asked for, but this TensorRT has no BuilderFlag.TF32")
    if settings.precision == "fp16" and info.has_fp16_flag:
        config.set_flag(trt.BuilderFlag.FP16)
        flags.append("FP16")
        if settings.precision_constraints != "none":
            name = _CONSTRAINT_FLAGS[settings.precision_constraints]
            config.set_flag(getattr(trt.BuilderFlag, name))
            flags.append(name)
        notes.append(
            "fp16: BuilderFlag.FP16 set on a weakly typed network; marked outputs force FP32 where they are "
            "marked (NVIDIA/TensorRT #1262), so compare with only the final outputs marked too"
        )
    if hasattr(config, "profiling_verbosity"):
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if settings.optimization_level is not None:
        config.builder_optimization_level = settings.optimization_level
    if settings.workspace_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_bytes)
    _set_compute_capabilities(trt, config, settings.compute_capabilities)
    _add_profile(parsed, config, dict(settings.input_shapes))
    return config, tuple(flags), notes


def _set_compute_capabilities(trt: ModuleType, config: Any, wanted: tuple[str, ...]) -> None:
    """TensorRT-RTX targets: names like "SM86" or "8.6"."""
    if not wanted:
        return
    if not hasattr(config, "set_compute_capability") or not hasattr(trt, "ComputeCapability"):
        raise OptionError(
            "only TensorRT-RTX builds for chosen compute capabilities; drop the option",
            parameter="compute_capabilities",
        )
    members = trt.ComputeCapability.__members__
    names = ["SM" + cc.replace(".", "") if cc[0].isdigit() else cc.upper() for cc in wanted]
    unknown = [cc for cc, name in zip(wanted, names, strict=True) if name not in members]
    if unknown:
        raise OptionError(
            f"unknown; choose from {', '.join(members)}", parameter="compute_capabilities", value=unknown[0]
        )
    config.num_compute_capabilities = len(names)
    for index, name in enumerate(names):
        config.set_compute_capability(members[name], index)


def _add_profile(parsed: ParsedNetwork, config: Any, shapes: dict[str, tuple[int, ...]]) -> None:
    """One optimization profile fixing every dynamic input to the shape it will run with."""
    network, profile = parsed.network, None
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = tuple(tensor.shape)
        if all(d >= 0 for d in dims):
            continue
        if tensor.name not in shapes:
            want = "x".join("?" if d < 0 else str(d) for d in dims)
            example = want.replace("?", "1")
            raise OptionError(
                f"input {tensor.name}: dynamic shape {want}; "
                f"give its shape ({param('input_shapes')} {tensor.name}:{example})"
            )
        shape = shapes[tensor.name]
        profile = profile or parsed.builder.create_optimization_profile()
        profile.set_shape(tensor.name, shape, shape, shape)
    if profile is not None:
        config.add_optimization_profile(profile)


def _attach_timing_cache(trt: ModuleType, config: Any, cache_dir: Path | None, notes: list[str]) -> bool:
    """Load the cache dir's timing cache into `config`; False where there is none or it is a no-op."""
    if cache_dir is None or not hasattr(config, "create_timing_cache"):
        return False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timing = config.create_timing_cache(cache.load_timing_cache(cache_dir))
        config.set_timing_cache(timing, ignore_mismatch=False)
    if any("no-op" in str(w.message) for w in caught):
        notes.append("timing cache: this TensorRT says timing-cache operations are no-ops; none kept")
        return False
    return True


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "no message"
