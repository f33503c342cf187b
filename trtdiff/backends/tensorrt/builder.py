"""Parse the exact ONNX file with TensorRT once, build the plain engine, mark debug tensors, build the marked one.

Two engines from one parse: the *plain* engine (no marks: what a user ships) and the *marked*
engine (every tensor that can be reported marked as a debug tensor, or the unfused debug
state): one engine whatever the mark budget, which only sets how many runs a sample takes
(budget.py). Each is taken from the engine cache where it is there.

Precision: FP32 with TF32 off unless asked (TensorRT turns TF32 on by default for FP32
convolutions and matmuls). FP16: where `BuilderFlag.FP16` exists (TRT 10) it is set, with
the precision-constraint flags asked for; where it does not (TRT 11, TensorRT-RTX: strongly
typed) the ONNX model is converted to FP16 first (fp16.py) and the result says so.
Networks are created with flags 0: explicit batch is the only mode in TRT 10+, and strong
typing is then the default where it is the only mode.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from trtdiff.backends.compiled.precision import asked_types
from trtdiff.backends.tensorrt import cache
from trtdiff.backends.tensorrt.api import member
from trtdiff.backends.tensorrt.budget import budget_of, resolved_sizes
from trtdiff.backends.tensorrt.importing import import_tensorrt, tensorrt_info
from trtdiff.backends.tensorrt.logger import shared_logger, step
from trtdiff.backends.tensorrt.marking import apply_marks, plan_marks, require_debug_tensors
from trtdiff.backends.tensorrt.names import index_network, subgraph_names
from trtdiff.backends.tensorrt.onnx_files import save_for_parser
from trtdiff.backends.tensorrt.result import BuildResult, EnginePlan
from trtdiff.errors import BackendError, OptionError, param
from trtdiff.options import BuildSettings
from trtdiff.source.fp16 import convert_to_fp16, graph_precision
from trtdiff.source.loading import utf8_path
from trtdiff.source.onnx_graph import graph_from_model

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.backends.tensorrt.api import Builder, BuilderConfig, Logger, Network, OnnxParser, TrtModule
    from trtdiff.backends.tensorrt.importing import GpuInfo, TensorRTInfo
    from trtdiff.backends.tensorrt.marking import MarkPlan
    from trtdiff.backends.tensorrt.names import NetworkIndex
    from trtdiff.source.onnx_graph import GraphInfo

__all__ = ["BuildResult", "BuildSettings", "build_engine", "build_with_marks", "input_shapes_from", "parse_onnx"]

_CONSTRAINT_FLAGS = {"obey": "OBEY_PRECISION_CONSTRAINTS", "prefer": "PREFER_PRECISION_CONSTRAINTS"}
# Settings that do not change an engine: left out of its cache key.
_NOT_KEYED = ("mark_budget_bytes", "bisect_marks")

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
    """A parsed network, its index (walked once), and the objects that must outlive it."""

    trt: TrtModule
    builder: Builder
    network: Network
    parser: OnnxParser
    logger: Logger
    model: onnx.ModelProto
    index: NetworkIndex


def parse_onnx(
    path: Path, model: onnx.ModelProto, trt: TrtModule | None = None, label: Path | None = None
) -> ParsedNetwork:
    """Parse the ONNX file at `path` (`model` is its content, used for name mapping) and index the network."""
    trt = trt or import_tensorrt()
    logger = shared_logger(trt)
    with step(logger):
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        # A path its C++ cannot take (not UTF-8) is read here; the weights must then be inside the file.
        parsed = parser.parse_from_file(str(path)) if utf8_path(path) else parser.parse(path.read_bytes())
        if not parsed:
            raise BackendError(parser_message(parser, label or path, logger.errors))
    sub_nodes, _ = subgraph_names(model)
    return ParsedNetwork(trt, builder, network, parser, logger, model, index_network(network, sub_nodes))


def parser_message(parser: OnnxParser, path: Path, logged: list[str]) -> str:
    """One line naming the first rejected ONNX node and op, and what to try."""
    if parser.num_errors == 0:
        cause = _one_line(logged[-1] if logged else "no message")
        return f"{path}: TensorRT's ONNX parser failed ({cause}); check the file with onnx.checker"
    error = parser.get_error(0)
    more = f" (+{parser.num_errors - 1} more)" if parser.num_errors > 1 else ""
    desc = _one_line(str(error.desc()))
    name = str(getattr(error, "node_name")()) if hasattr(error, "node_name") else ""  # noqa: B009
    op = str(getattr(error, "node_operator")()) if hasattr(error, "node_operator") else ""  # noqa: B009
    index = int(getattr(error, "node")()) if hasattr(error, "node") else -1  # noqa: B009
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
    plain: bool = True,
) -> BuildResult:
    """Parse `graph.path` once; build (or load from `cache_dir`) the plain engine, then the marked one.

    `plain` False builds the marked engine alone (a rewritten model in the culprit step, whose
    answer is checked against the reference instead).
    """
    settings = settings or BuildSettings()
    settings.validate()
    trt = import_tensorrt()
    info = tensorrt_info(trt)
    _check_supported(settings, info)
    notes: list[str] = []
    extra: dict[str, str] = {}
    parsed, parsed_what, parsed_graph = _parse_for(graph, settings, info, trt, notes, extra)
    plan = _plan(graph, parsed, settings)
    config, flags, config_notes = configure(parsed, settings, info)
    notes += config_notes
    onnx_bytes = cache.onnx_file_bytes(graph.path, graph.model)
    marked_key = cache.cache_key(onnx_bytes, _keyed(settings), info, gpu, extra)
    plain_settings = dataclasses.replace(settings, outputs="none", mark_bool=False)
    plain_key = cache.cache_key(onnx_bytes, _keyed(plain_settings), info, gpu, extra)
    builds = _Builds(graph, parsed, config, settings, cache_dir, notes)
    plain_engine: EnginePlan | None = None
    if settings.outputs != "none":
        plain_engine = builds.get(plain_key, "plain", plan) if plain else None
        plan = apply_marks(parsed.network, parsed.index, plan)
    marked = builds.get(marked_key, "marked", plan)
    builds.save_timing_cache()
    return BuildResult(
        marked,
        plain_engine,
        flags,
        settings,
        plan,
        info,
        str(graph.path),
        parsed_what,
        tuple(notes),
        asked_types(parsed_graph),
        parsed_graph,
    )


def build_with_marks(graph: GraphInfo, settings: BuildSettings, marks: Sequence[str]) -> bytes:
    """A marked engine with only `marks` (TensorRT names) as debug tensors: one step of the marks' bisection."""
    trt = import_tensorrt()
    info = tensorrt_info(trt)
    parsed, _, _ = _parse_for(graph, settings, info, trt, [], {})
    plan = apply_marks(parsed.network, parsed.index, _plan(graph, parsed, settings), only=marks)
    config, _, _ = configure(parsed, settings, info)
    return _Builds(graph, parsed, config, settings, None, []).get("", "bisection", plan).plan


def _check_supported(settings: BuildSettings, info: TensorRTInfo) -> None:
    if settings.precision_constraints != "none" and not info.has_fp16_flag:
        raise OptionError(
            f"{info.describe()} is strongly typed and has no precision-constraint flags; drop the option",
            parameter="precision_constraints",
            value=settings.precision_constraints,
        )
    if settings.outputs == "all":
        require_debug_tensors(info.has_debug_tensors)


def _plan(graph: GraphInfo, parsed: ParsedNetwork, settings: BuildSettings) -> MarkPlan:
    """The marks `settings` ask for on this parse, grouped under the budget for the shapes fed."""
    sizes = resolved_sizes(graph, dict(settings.input_shapes))
    computed = sum(1 for t in graph.data_tensors if t not in graph.graph_inputs)
    return plan_marks(
        parsed.trt,
        parsed.index,
        parsed.parser,
        parsed.model,
        settings.outputs,
        budget_of(settings.mark_budget_bytes),
        mark_bool=settings.mark_bool,
        sizes=sizes,
        data_tensors=computed,
    )


def _keyed(settings: BuildSettings) -> dict[str, object]:
    return {k: v for k, v in settings.to_dict().items() if k not in _NOT_KEYED}


class _Builds:
    """Engines of one parse: from the cache where there, else built; the timing cache shared by both."""

    def __init__(
        self,
        graph: GraphInfo,
        parsed: ParsedNetwork,
        config: BuilderConfig,
        settings: BuildSettings,
        cache_dir: Path | None,
        notes: list[str],
    ) -> None:
        self.graph, self.parsed, self.config, self.settings = graph, parsed, config, settings
        self.cache_dir, self.notes = cache_dir, notes
        self.timing: bool | None = None

    def get(self, key: str, what: str, plan: MarkPlan) -> EnginePlan:
        cached = cache.load_engine(self.cache_dir, key) if self.cache_dir is not None and key else None
        if cached is not None:
            return EnginePlan(cached, key, 0.0, True)
        if self.timing is None:
            self.timing = _attach_timing_cache(self.parsed.trt, self.config, self.cache_dir, self.notes)
        logger = self.parsed.logger
        with step(logger):
            start = time.perf_counter()
            serialized = self.parsed.builder.build_serialized_network(self.parsed.network, self.config)
            seconds = round(time.perf_counter() - start, 4)
            if serialized is None:
                raise _build_failure(self.graph, logger, self.settings, what)
        engine = EnginePlan(bytes(serialized), key, seconds, False)
        del serialized
        if self.cache_dir is not None and key:
            meta = {"onnx_path": str(self.graph.path), "settings": self.settings.to_dict(), "engine": what}
            if what == "marked":
                meta["debug_tensors"] = list(plan.debug)
            cache.save_engine(self.cache_dir, key, engine.plan, meta)
        return engine

    def save_timing_cache(self) -> None:
        if self.timing and self.cache_dir is not None:
            cache.save_timing_cache(self.cache_dir, bytes(self.config.get_timing_cache().serialize()))


def _build_failure(graph: GraphInfo, logger: Logger, settings: BuildSettings, what: str) -> BackendError:
    """The error for a build that returned no plan: TensorRT's last logged error and what to try."""
    cause = _one_line(logger.errors[-1]) if logger.errors else "no message"
    hint = (
        f"try {param('outputs')} none to see whether marking debug tensors is the cause"
        if what == "marked" and settings.outputs == "all"
        else "check the TensorRT log with a verbose logger"
    )
    return BackendError(f"{graph.path}: TensorRT could not build the {what} engine: {cause}; {hint}")


def _parse_for(
    graph: GraphInfo,
    settings: BuildSettings,
    info: TensorRTInfo,
    trt: TrtModule,
    notes: list[str],
    extra: dict[str, str],
) -> tuple[ParsedNetwork, str, GraphInfo]:
    """Parse the given file, or its FP16 conversion where FP16 must come from the model's types; say which."""
    if not (settings.precision == "fp16" and info.strongly_typed_only) or graph_precision(graph) == "fp16":
        return parse_onnx(graph.path, graph.model, trt, label=graph.path), "the given ONNX file", graph
    conversion = convert_to_fp16(graph.model)
    notes.append(
        conversion.note("this TensorRT is strongly typed (no FP16 builder flag), so the ONNX model was converted")
    )
    extra["fp16_converter"] = conversion.converter
    with tempfile.TemporaryDirectory(prefix="trtdiff-trt-") as tmp:
        source = save_for_parser(conversion.model, Path(tmp) / f"{graph.path.stem}.fp16.onnx")
        parsed = parse_onnx(source, conversion.model, trt, label=graph.path)
    converted = graph_from_model(conversion.model, graph.path)
    return parsed, f"an FP16 conversion of the given file ({conversion.converter})", converted


def configure(
    parsed: ParsedNetwork, settings: BuildSettings, info: TensorRTInfo
) -> tuple[BuilderConfig, tuple[str, ...], list[str]]:
    """A builder config for `settings`: returns it, the flags set, and notes on what was done."""
    trt, config = parsed.trt, parsed.builder.create_builder_config()
    flags: list[str] = []
    notes: list[str] = []
    tf32 = member(trt.BuilderFlag, "TF32")
    if tf32 is not None:
        if settings.tf32:
            config.set_flag(tf32)
            flags.append("TF32")
        else:
            config.clear_flag(tf32)
    elif settings.tf32:
        notes.append("tf32 asked for, but this TensorRT has no BuilderFlag.TF32")
    fp16 = member(trt.BuilderFlag, "FP16")
    if settings.precision == "fp16" and fp16 is not None:
        config.set_flag(fp16)
        flags.append("FP16")
        if settings.precision_constraints != "none":
            name = _CONSTRAINT_FLAGS[settings.precision_constraints]
            constraint = member(trt.BuilderFlag, name)
            if constraint is not None:
                config.set_flag(constraint)
                flags.append(name)
        notes.append(
            "fp16: BuilderFlag.FP16 set on a weakly typed network; the plain engine beside the marked one "
            "shows whether marking forced FP32 anywhere (NVIDIA/TensorRT #1262)"
        )
    detailed = member(trt.ProfilingVerbosity, "DETAILED")
    if detailed is not None:
        config.profiling_verbosity = detailed
    if settings.optimization_level is not None:
        config.builder_optimization_level = settings.optimization_level
    workspace = member(trt.MemoryPoolType, "WORKSPACE")
    if settings.workspace_bytes is not None and workspace is not None:
        config.set_memory_pool_limit(workspace, settings.workspace_bytes)
    _set_compute_capabilities(trt, config, settings.compute_capabilities)
    _add_profile(parsed, config, dict(settings.input_shapes))
    return config, tuple(flags), notes


def _set_compute_capabilities(trt: TrtModule, config: BuilderConfig, wanted: tuple[str, ...]) -> None:
    """TensorRT-RTX targets: names like "SM86" or "8.6"."""
    if not wanted:
        return
    if not hasattr(config, "set_compute_capability") or not hasattr(trt, "ComputeCapability"):
        raise OptionError(
            "only TensorRT-RTX builds for chosen compute capabilities; drop the option",
            parameter="compute_capabilities",
        )
    known = trt.ComputeCapability.__members__
    names = ["SM" + cc.replace(".", "") if cc[0].isdigit() else cc.upper() for cc in wanted]
    unknown = [cc for cc, name in zip(wanted, names, strict=True) if name not in known]
    if unknown:
        raise OptionError(
            f"unknown; choose from {', '.join(known)}", parameter="compute_capabilities", value=unknown[0]
        )
    config.num_compute_capabilities = len(names)
    for index, name in enumerate(names):
        config.set_compute_capability(known[name], index)


def _add_profile(parsed: ParsedNetwork, config: BuilderConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """One optimization profile fixing every dynamic input to the shape it will run with."""
    network, profile = parsed.network, None
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = tuple(int(d) for d in tensor.shape)
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


def _attach_timing_cache(trt: TrtModule, config: BuilderConfig, cache_dir: Path | None, notes: list[str]) -> bool:
    """Load the cache dir's timing cache into `config`; False where there is none or it is a no-op.

    A cache TensorRT rejects (made by another TensorRT version or GPU: `set_timing_cache` with
    `ignore_mismatch=False` returns False) is replaced by a fresh one, with a note.
    """
    if cache_dir is None or not hasattr(config, "create_timing_cache"):
        return False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timing = config.create_timing_cache(cache.load_timing_cache(cache_dir))
        accepted = timing is not None and config.set_timing_cache(timing, ignore_mismatch=False)
    if any("no-op" in str(w.message) for w in caught):
        notes.append("timing cache: this TensorRT says timing-cache operations are no-ops; none kept")
        return False
    if not accepted:
        notes.append(
            f"timing cache {cache_dir / cache.TIMING_CACHE_NAME}: TensorRT rejected it (made by another TensorRT "
            "or GPU); started a fresh one, which replaces it"
        )
        config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    return True


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "no message"
