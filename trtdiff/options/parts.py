"""The option parts: small frozen dataclasses, each field declared once with `option(...)`.

`CompareOptions` gathers what `compare`, `build` and `run` read: what to load and feed
(`LoadOptions`), how to get the ONNX file (`ExportOptions`), which backends run and how
(`BackendOptions`, with TensorRT's `BuildSettings`), when a tensor diverges (`Thresholds`),
the CI gate (`GateOptions`) and culprits (`AnalysisOptions`). The command line's own parts
(`SweepAxes`, `ReportOptions`, `RunOptions`, `DemoOptions`) are declared here too, so that
every flag has one declaration. Each `validate()` raises an `OptionError` naming the
parameter; nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from trtdiff.errors import OptionError, param
from trtdiff.options.declare import COMPARE, Declared, Parser, all_declarations, option
from trtdiff.options.exporters import export_problem
from trtdiff.options.parse import (
    check_input_shape,
    parse_bytes,
    parse_channels,
    parse_hw,
    parse_names,
    parse_opset,
    parse_opsets,
    parse_recording,
)

Exporter = Literal["auto", "torchscript", "dynamo"]
Precision = Literal["fp32", "fp16", "bf16"]
PrecisionConstraints = Literal["none", "obey", "prefer"]
OutputsMode = Literal["all", "unfused", "none"]
OnnxBackendName = Literal["onnxruntime", "onnx-reference", "tensorrt", "openvino"]
SweepPrecision = Literal["fp32", "tf32", "fp16"]
Capture = Literal["full", "stats"]

KNOWN_BACKENDS = ("torch", "onnxruntime", "onnx-reference", "tensorrt", "openvino")
ONNX_BACKENDS: tuple[OnnxBackendName, ...] = ("onnxruntime", "onnx-reference", "tensorrt", "openvino")
DEFAULT_BACKENDS = ("torch", "onnxruntime", "tensorrt")
DEFAULT_PROVIDER = "auto"
DEFAULT_OPENVINO_DEVICE = "CPU"
DEFAULT_TORCH_DEVICE = "auto"
DEFAULT_OPSET = 17
DEFAULT_CHUNK_BYTES = 1 << 30
DEFAULT_MEMORY_BYTES = 2 << 30
DEFAULT_MARK_BUDGET_BYTES = 1 << 30
EXPORTERS: tuple[Exporter, ...] = ("auto", "torchscript", "dynamo")
OUTPUT_MODES: tuple[OutputsMode, ...] = ("all", "unfused", "none")
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "bf16")
CONSTRAINTS: tuple[PrecisionConstraints, ...] = ("none", "obey", "prefer")
SWEEP_PRECISIONS: tuple[SweepPrecision, ...] = ("fp32", "tf32", "fp16")
CAPTURES: tuple[Capture, ...] = ("full", "stats")

MODEL = "Model and inputs"
EXPORT = "Export"
BACKENDS = "Backends"
TENSORRT = "TensorRT"
THRESHOLDS = "Thresholds and culprits"
GATE = "CI gate over many samples"
REPORTS = "Reports"
RECORDING = "Recording"
DEMO = "Demo"
CONFIG = "Configuration"
VIEW = "Model Explorer"
SINGLE = ("run", "build", "inspect")  # commands that export once (compare sweeps)
RENDERED = ("compare", "report")  # commands that write report files (`report` renders a saved one)
ENGINES = ("compare", "run", "build")  # commands that build a TensorRT engine
_EXPORTER_HELP = "auto (TorchScript below opset 18, dynamo from 18), torchscript or dynamo"


def _one_of(allowed: tuple[str, ...], what: str) -> Parser:
    """A reader of comma-separated names, each one of `allowed` ("unknown backend 'foo'; choose from ...")."""

    def parse(text: str, parameter: str) -> tuple[str, ...]:
        names = parse_names(text, parameter)
        unknown = [n for n in names if n not in allowed]
        if unknown:
            raise OptionError(unknown_name(what, unknown[0], allowed), parameter=parameter, value=text)
        return names

    return parse


def unknown_name(what: str, name: str, allowed: tuple[str, ...]) -> str:
    """ "unknown backend 'openvno' (did you mean 'openvino'?); choose from ...": the closest name if one is close."""
    close = difflib.get_close_matches(name, allowed, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {what} {name!r}{guess}; choose from {', '.join(allowed)}"


_exporters = _one_of(EXPORTERS, "exporter")
_precisions = _one_of(SWEEP_PRECISIONS, "precision")
_backends = _one_of(KNOWN_BACKENDS, "backend")


# fmt: off
@dataclass(frozen=True)
class LoadOptions:
    """How to load the model and what to feed it (random inputs of `input_shapes`, or files)."""

    model_class: str | None = option(None, group=MODEL, metavar="PKG.MOD:CLASS", runs_code=True,
                                     help="Class or factory to build the model a state_dict belongs to.")
    trust: bool = option(False, group=MODEL, runs_code=True,
                         help="Allow loading a pickled nn.Module (torch.save(model)): unpickling runs code from the "
                              "file.")
    input_shapes: tuple[str, ...] = option((), group=MODEL, flag="--input-shape", metavar="[NAME:]SHAPE",
                                           parse=check_input_shape, repeat=True,
                                           help="Random input of this shape, e.g. 1x3x512x512 or image:1x3x512x512. "
                                                "Repeat for several inputs.")
    input_files: tuple[str, ...] = option((), group=MODEL, flag="--input", metavar="[NAME:]FILE", repeat=True,
                                          help="Inputs from a .npy, .npz or .pt file. Repeat for several.")
    seed: int = option(0, group=MODEL, metavar="N", help="Seed of the random inputs.")


@dataclass(frozen=True)
class ExportOptions:
    """How to get the ONNX file: export at `opset` with `exporter`, or take `onnx` as given."""

    opset: int | None = option(None, group=EXPORT, commands=SINGLE, metavar="N", default_text=str(DEFAULT_OPSET),
                               parse=parse_opset, help="ONNX opset to export at.")
    exporter: Exporter = option("auto", group=EXPORT, commands=SINGLE, help=f"{_EXPORTER_HELP}.")
    onnx: str | None = option(None, group=EXPORT, metavar="FILE",
                              help="Use this ONNX file (e.g. after onnxsim) instead of exporting one.")
    save_onnx: str | None = option(None, writes=True, group=EXPORT, metavar="PATH", help="Keep the exported ONNX file.")
    simplify: bool = option(False, group=EXPORT, commands=COMPARE,
                            help="Also compare the ONNX file after onnxslim, side by side (the simplify extra).")

    def validate(self) -> None:
        if self.exporter not in EXPORTERS:
            raise OptionError(
                f"unknown; choose one of {', '.join(EXPORTERS)}", parameter="exporter", value=self.exporter
            )
        if self.save_onnx is not None and self.onnx is not None:
            raise OptionError(
                f"nothing is exported when an ONNX file is given with {param('onnx')}; drop one of them",
                parameter="save_onnx",
            )
        problem = export_problem(self.opset, self.exporter) if self.opset is not None and self.onnx is None else None
        if problem is not None:
            value = self.opset if problem.parameter == "opset" else self.exporter
            raise OptionError(problem.message, parameter=problem.parameter, value=value)


@dataclass(frozen=True)
class SweepAxes:
    """What `trtdiff compare` varies when given several values: opsets, exporters, TensorRT precisions.

    The command line's `--opset 11,13,17` fills these; `trtdiff.sweep(model, opsets=...,
    exporters=..., precisions=...)` takes them by the same names.
    """

    opsets: tuple[int, ...] = option((), group=EXPORT, commands=COMPARE, flag="--opset", metavar="N[,N...]",
                                     parse=parse_opsets, default_text=str(DEFAULT_OPSET),
                                     help="ONNX opset to export at; several (e.g. 11,13,17) compare each: a sweep.")
    exporters: tuple[Exporter, ...] = option((), group=EXPORT, commands=COMPARE, flag="--exporter",
                                             metavar="NAME[,NAME...]", parse=_exporters, default_text="auto",
                                             help=f"{_EXPORTER_HELP}; several: a sweep.")
    precisions: tuple[SweepPrecision, ...] = option((), group=TENSORRT, commands=COMPARE, flag="--sweep-precision",
                                                    last=True, metavar="LIST", parse=_precisions,
                                                    help="Compare TensorRT at each precision: fp32 (TF32 off), tf32, "
                                                         "fp16, e.g. fp32,tf32: a sweep.")

    @property
    def many(self) -> bool:
        """Whether these axes ask for a sweep (several values on one axis, or precisions at all)."""
        return len(self.opsets) > 1 or len(self.exporters) > 1 or bool(self.precisions)


@dataclass(frozen=True)
class BuildSettings:
    """TensorRT's options: everything that changes an engine (and so its cache key).

    `precision`, `tf32` and `input_shapes` are not options here: they are filled in from
    `BackendOptions.precision`, `BackendOptions.tf32` and the inputs fed when the engine is built.
    """

    outputs: OutputsMode = option("all", group=TENSORRT, commands=ENGINES, flag="--trt-outputs",
                                  help="all: every tensor as a debug tensor of one engine (beside the plain engine); "
                                       "unfused: keep fusion, read surviving tensors; none: final outputs only.")
    precision: Precision = "fp32"
    tf32: bool = False
    precision_constraints: PrecisionConstraints = option("none", group=TENSORRT, commands=ENGINES,
                                                         help="TensorRT 10 layer precision constraints with "
                                                              "--precision fp16.")
    optimization_level: int | None = option(None, group=TENSORRT, commands=ENGINES, flag="--builder-opt-level",
                                            metavar="0-5", help="TensorRT builder optimization level.")
    workspace_bytes: int | None = option(None, group=TENSORRT, commands=ENGINES, flag="--workspace", metavar="SIZE",
                                         parse=parse_bytes, help="TensorRT workspace limit, e.g. 2GB.")
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    compute_capabilities: tuple[str, ...] = option((), group=TENSORRT, commands=ENGINES,
                                                   flag="--trt-compute-capability", metavar="SMxx", repeat=True,
                                                   help="TensorRT-RTX only: build for this compute capability "
                                                        "(e.g. SM86). Repeatable.")
    mark_bool: bool = option(False, group=TENSORRT, flag=None,
                             help="Mark bool tensors too (mark-all of bool tensors breaks some TensorRT versions).")
    mark_budget_bytes: int | None = option(None, group=TENSORRT, commands=ENGINES, flag="--trt-mark-budget",
                                           metavar="SIZE", parse=parse_bytes, default_text="1GB",
                                           help="Bytes of debug tensors in one group of the marked engine: what the "
                                                "marking check's bisection switches on at once and what `trtdiff "
                                                "build` plans. A comparison runs the engine once per sample and "
                                                "streams its debug tensors in chunks within --memory-limit.")
    bisect_marks: bool | None = option(None, group=TENSORRT, commands=ENGINES, flag="--trt-bisect",
                                       secondary="--no-trt-bisect",
                                       help="Bisect the marks (a rebuild per step) also when outputs differ at all / "
                                            "never; by default when marking changed the answer.")

    def validate(self) -> None:
        """Raise OptionError for a value no TensorRT accepts (bf16 too: trtdiff builds no BF16 engine yet)."""
        checks = (
            ("outputs", self.outputs, OUTPUT_MODES),
            ("precision", self.precision, PRECISIONS),
            ("precision_constraints", self.precision_constraints, CONSTRAINTS),
        )
        for name, value, allowed in checks:
            if value not in allowed:
                raise OptionError(f"unknown; choose one of {', '.join(allowed)}", parameter=name, value=value)
        if self.precision == "bf16":
            raise OptionError(
                "TensorRT is built at fp32 or fp16 here; bf16 engines are not built by trtdiff yet",
                parameter="precision",
                value=self.precision,
            )
        if self.optimization_level is not None and not 0 <= self.optimization_level <= 5:
            raise OptionError(
                "must be 0-5 (TensorRT's default is 3)", parameter="optimization_level", value=self.optimization_level
            )
        for name in ("workspace_bytes", "mark_budget_bytes"):
            size = getattr(self, name)
            if size is not None and size <= 0:
                raise OptionError("must be a positive number of bytes", parameter=name, value=size)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["input_shapes"] = {name: list(shape) for name, shape in self.input_shapes}
        return data


@dataclass(frozen=True)
class BackendOptions:
    """Which backends run and how; `recordings` replays files `trtdiff run` saved instead of running."""

    backends: tuple[str, ...] | None = option(None, group=BACKENDS, commands=COMPARE, metavar="LIST",
                                              parse=_backends, default_text="torch,onnxruntime,tensorrt",
                                              help="Comma-separated backends (torch, onnxruntime, onnx-reference, "
                                                   "tensorrt, openvino); TensorRT only where it can run; "
                                                   "openvino only when asked.")
    require: tuple[str, ...] = option((), group=BACKENDS, commands=COMPARE, metavar="LIST",
                                      parse=_backends,
                                      help="Backends that must run (e.g. tensorrt): exit 2 instead of skipping.")
    ort_provider: str = option(DEFAULT_PROVIDER, group=BACKENDS, commands=("compare", "run", "inspect"),
                               metavar="NAME", help="ONNX Runtime execution provider: auto (CUDAExecutionProvider "
                                                    "where onnxruntime-gpu has it, TF32 off unless --tf32; else "
                                                    "CPUExecutionProvider), or a provider's name.")
    openvino_device: str = option(DEFAULT_OPENVINO_DEVICE, group=BACKENDS, commands=("compare", "run"),
                                  metavar="DEVICE", help="OpenVINO device the openvino backend compiles for (CPU; "
                                                         "another plugin's name where one is installed), "
                                                         "inference precision the graph's (f32; f16 with "
                                                         "--precision fp16).")
    torch_device: str = option(DEFAULT_TORCH_DEVICE, group=BACKENDS, commands=COMPARE, metavar="DEVICE",
                               help="Where the PyTorch reference runs and is compared: auto (a CUDA GPU when torch "
                                    "sees one, else cpu), cpu, cuda, cuda:1 …")
    precision: Precision = option("fp32", group=BACKENDS, commands=ENGINES, alias=("--fp16", "fp16"),
                                  help="Precision the ONNX backends compute in: fp32; fp16 (the ONNX graph converted "
                                       "with onnxruntime's float16 converter, inputs and outputs kept FP32, for "
                                       "every ONNX "
                                       "backend; TensorRT 10 also gets its FP16 flag); bf16 (an ONNX file whose own "
                                       "types are bfloat16). Reduced precision is judged against the noise it makes "
                                       "(docs/culprits.md).")
    keep_fp32: tuple[str, ...] = option((), group=BACKENDS, commands=ENGINES, metavar="NODE[,NODE...]",
                                        parse=parse_names, repeat=True,
                                        help="With --precision fp16: keep these ONNX nodes in FP32 when the graph is "
                                             "converted (the converter's node_block_list): try the exclusion "
                                             "a culprit names.")
    tf32: bool = option(False, group=TENSORRT, commands=ENGINES,
                        help="Allow TF32 in TensorRT and in the PyTorch reference on CUDA (off: true FP32).")
    tensorrt: BuildSettings = field(default_factory=BuildSettings)
    engine_cache: str | None = option(None, writes=True, group=TENSORRT, commands=ENGINES, metavar="DIR",
                                      help="Folder of cached engines and the timing cache.")
    save_engine: str | None = option(None, writes=True, group=TENSORRT, commands=ENGINES, metavar="PATH",
                                     help="Write the TensorRT engine that ships (the marked one beside it as "
                                          "NAME.marked.engine).")
    recordings: dict[str, str] = option(group=BACKENDS, commands=COMPARE, factory=dict, flag="--load",
                                        metavar="BACKEND=FILE", parse=parse_recording, repeat=True,
                                        help="Compare a recording from `trtdiff run --save` instead of running that "
                                             "backend.")
    memory_bytes: int = option(DEFAULT_MEMORY_BYTES, group=BACKENDS, commands=COMPARE, flag="--memory-limit",
                               metavar="SIZE", parse=parse_bytes, default_text="2GB",
                               help="Memory for the tensors compared: peak memory stays under the runtimes and "
                                    "weights each backend holds + the largest frontier of the ONNX graph (the live "
                                    "tensors between the segments it runs in) + this. Half holds one chunk of the "
                                    "backends' values, half the values being compared and the final outputs; a "
                                    "reference the culprit pass reads is held in half (the rest spilled to disk "
                                    "once). Refused up front where that cannot fit here.")
    chunk_bytes: int = option(DEFAULT_CHUNK_BYTES, group=BACKENDS, flag=None, parse=parse_bytes, default_text="1GB",
                              help="Intermediates one backend returns at once (compared, then dropped).")

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise OptionError(
                f"unknown; choose one of {', '.join(PRECISIONS)}", parameter="precision", value=self.precision
            )
        for name, names in (("backends", self.backends or ()), ("require", self.require)):
            unknown = [b for b in names if b not in KNOWN_BACKENDS]
            if unknown:
                raise OptionError(
                    unknown_name("backend", unknown[0], KNOWN_BACKENDS), parameter=name, value=",".join(names)
                )
        for name, path in self.recordings.items():
            if name not in ONNX_BACKENDS:
                raise OptionError(
                    f"only ONNX backends are recorded ({', '.join(ONNX_BACKENDS)})",
                    parameter="recordings",
                    value=f"{name}={path}",
                )
        for name, size in (("memory_bytes", self.memory_bytes), ("chunk_bytes", self.chunk_bytes)):
            if size <= 0:
                raise OptionError("must be a positive number of bytes", parameter=name, value=size)
        self.tensorrt.validate()


def _in_range(name: str, value: object, low: float, high: float, what: str, *, finite: bool = True) -> None:
    """Raise OptionError unless `value` is a number in [low, high] (finite unless `finite` is False; never NaN)."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if math.isnan(number) or not low <= number <= high or (finite and not math.isfinite(number)):
        raise OptionError(what, parameter=name, value=value)


@dataclass(frozen=True)
class Thresholds:
    """When a tensor counts as diverged: direction (cosine) and magnitude (relative, absolute).

    Final outputs must also be finite: a NaN or Inf on either side fails the gate, unless
    `allow_nonfinite`, which asks only that NaN, +Inf and -Inf sit at the same positions on
    both sides.
    """

    min_cosine: float = option(0.9999, group=THRESHOLDS, commands=COMPARE, metavar="X",
                               help="Diverged below this cosine.")
    rtol: float = option(1e-3, group=THRESHOLDS, commands=COMPARE, metavar="X",
                         help="Diverged above this max-abs error over the reference's largest magnitude.")
    max_abs: float | None = option(None, group=THRESHOLDS, commands=COMPARE, metavar="X", default_text="off",
                                   help="Diverged above this absolute max error.")
    max_quant_steps: float = option(8.0, group=THRESHOLDS, commands=COMPARE, metavar="N",
                                    help="Quantized tensors (a DequantizeLinear's output, a QuantizeLinear's input) "
                                         "are judged by their error (99.9th percentile of |delta|) in steps of "
                                         "that DequantizeLinear's scale instead of cosine and rtol: diverged "
                                         "above N steps.")
    max_weight_steps: float = option(1.0, group=THRESHOLDS, commands=COMPARE, metavar="N",
                                     help="Each quantized weight of a Q/DQ file is compared with the float weight it "
                                          "quantizes (the PyTorch parameter, BatchNorm folded in as the export "
                                          "did): diverged above N steps of its scale anywhere inside the grid "
                                          "(rounding to nearest leaves at most 0.5).")
    quant_min_cosine: float = option(0.99, group=THRESHOLDS, commands=COMPARE, metavar="X",
                                     help="In a quantized model (Q/DQ nodes) compared with its float model, the "
                                          "final outputs are judged by their cosine against this instead of "
                                          "--min-cosine and --rtol (quantization moves every value; what users "
                                          "keep is the direction), and each layer by its node's own error.")
    max_noise_ratio: float = option(8.0, group=THRESHOLDS, commands=COMPARE, metavar="X",
                                    help="In an FP16/BF16 comparison, float tensors are judged by their error over "
                                         "the error the precision itself makes there (PyTorch in that precision "
                                         "against PyTorch in float64) instead of cosine and rtol: diverged above "
                                         "X times.")
    allow_nonfinite: bool = option(False, group=THRESHOLDS, commands=COMPARE,
                                   help="Let final outputs hold NaN/Inf, at the same positions in every backend "
                                        "(default: any fails).")

    def validate(self) -> None:
        """Raise OptionError for a threshold outside its range.

        NaN is refused everywhere (every comparison with NaN is false, so a NaN limit would pass
        anything); only the limits that may be switched off (steps, weight steps, noise ratio) accept +inf.
        """
        _in_range("min_cosine", self.min_cosine, -1.0, 1.0, "must be between -1 and 1, e.g. 0.9999")
        _in_range("quant_min_cosine", self.quant_min_cosine, -1.0, 1.0, "must be between -1 and 1, e.g. 0.99")
        _in_range("rtol", self.rtol, 0.0, math.inf, "must be a finite number, 0 or more, e.g. 1e-3")
        if self.max_abs is not None:
            _in_range("max_abs", self.max_abs, 0.0, math.inf, "must be a finite number, 0 or more, e.g. 1e-4")
        _in_range("max_weight_steps", self.max_weight_steps, 0.0, math.inf, "must be 0 or more (inf: off), e.g. 1",
                  finite=False)
        _in_range("max_quant_steps", self.max_quant_steps, 0.0, math.inf, "must be 0 or more (inf: off), e.g. 4",
                  finite=False)
        _in_range("max_noise_ratio", self.max_noise_ratio, math.ulp(0.0), math.inf,
                  "must be positive (inf: off), e.g. 8", finite=False)
        if not isinstance(self.allow_nonfinite, bool):
            raise OptionError("must be True or False", parameter="allow_nonfinite", value=repr(self.allow_nonfinite))


@dataclass(frozen=True)
class GateOptions:
    """Where the CI gate's samples come from (a folder, N random inputs) and the mIoU thresholds."""

    inputs_dir: str | None = option(None, group=GATE, commands=COMPARE, flag="--inputs", metavar="DIR",
                                    help="Folder of PNG/JPEG images or .npy/.npz input tensors: gate every sample's "
                                         "final outputs.")
    labels_dir: str | None = option(None, group=GATE, commands=COMPARE, flag="--labels", metavar="DIR",
                                    help="Folder of label masks (single-channel PNG, class index per pixel, same "
                                         "stem as the image).")
    num_samples: int | None = option(None, group=GATE, commands=COMPARE, metavar="N",
                                     help="Gate N seeded random inputs (of --input-shape).")
    mean: tuple[float, ...] | None = option(None, group=GATE, commands=COMPARE, metavar="R,G,B", parse=parse_channels,
                                            help="Per-channel mean for images, e.g. 0.485,0.456,0.406.")
    std: tuple[float, ...] | None = option(None, group=GATE, commands=COMPARE, metavar="R,G,B", parse=parse_channels,
                                           help="Per-channel std for images, e.g. 0.229,0.224,0.225.")
    size: tuple[int, int] | None = option(None, group=GATE, commands=COMPARE, metavar="HxW", parse=parse_hw,
                                          help="Resize images (bilinear) and masks (nearest) to this size, e.g. "
                                               "512x1024.")
    ignore_index: int | None = option(None, group=GATE, commands=COMPARE, metavar="N",
                                      help="Label value that mIoU ignores (e.g. 255).")
    min_miou: float | None = option(None, group=GATE, commands=COMPARE, metavar="X",
                                    help="Fail below this mIoU: against --labels when given, else agreement with the "
                                         "reference's argmax.")
    max_miou_drop: float | None = option(None, group=GATE, commands=COMPARE, metavar="X",
                                         help="Fail when a backend's mIoU against --labels is this much below "
                                              "PyTorch's.")
    per_layer: bool = option(False, group=GATE, commands=COMPARE,
                             help="With several samples, gate every layer of the first sample too.")

    def validate(self) -> None:
        if self.inputs_dir is not None and self.num_samples is not None:
            raise OptionError(
                f"random samples and {param('inputs_dir')} exclude each other; drop one", parameter="num_samples"
            )
        if self.num_samples is not None and self.num_samples < 1:
            raise OptionError("must be at least 1", parameter="num_samples", value=self.num_samples)
        if self.labels_dir is not None and self.inputs_dir is None:
            raise OptionError(
                f"masks are paired with the images of {param('inputs_dir')}; give it too", parameter="labels_dir"
            )
        for name, value in (("min_miou", self.min_miou), ("max_miou_drop", self.max_miou_drop)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise OptionError(f"must be between 0 and 1, e.g. {param(name)} 0.9", parameter=name, value=value)
        if self.max_miou_drop is not None and self.labels_dir is None:
            raise OptionError(
                f"the drop is measured against ground truth; give {param('labels_dir')}", parameter="max_miou_drop"
            )

    @property
    def many(self) -> bool:
        """Whether several samples are gated (a folder or random samples)."""
        return self.inputs_dir is not None or self.num_samples is not None


@dataclass(frozen=True)
class AnalysisOptions:
    """Whether to name culprits: local error per node, export-or-runtime verdicts, attribution.

    `culprit` None: when a divergence is found; True: always; False: never.
    """

    culprit: bool | None = option(None, group=THRESHOLDS, commands=COMPARE, secondary="--no-culprit",
                                  default_text="when a divergence is found",
                                  help="Name the nodes that introduce the error (local error, export or runtime, "
                                       "attribution).")
    save_repro: str | None = option(None, writes=True, group=THRESHOLDS, commands=COMPARE, metavar="DIR",
                                    help="Write each culprit's subgraph as a standalone ONNX file with its inputs, "
                                         "every backend's output and a README with the command that shows it, into "
                                         "DIR: a new or empty folder or an earlier repro, written whole or not at "
                                         "all.")
    capture: Capture = option("full", group=THRESHOLDS, commands=COMPARE,
                              help="full: every value of every layer compared. stats: per tensor only statistics "
                                   "made where it lives (NaN/Inf counts, min, max, mean, norm, sampled values), "
                                   "compared to find the first suspicious layer; then only the layers around it "
                                   "are compared in full and searched for culprits (large inputs: about one "
                                   "forward's time; docs/performance.md).")

    def validate(self) -> None:
        if self.capture not in CAPTURES:
            raise OptionError(f"unknown; choose one of {', '.join(CAPTURES)}", parameter="capture", value=self.capture)


@dataclass(frozen=True)
class ReportOptions:
    """What the command line prints and writes: the table, the verdict alone, report files."""

    show_all: bool = option(False, group=REPORTS, commands=("compare", "demo"), flag="--all",
                            help="Show every layer, not only those up to the first divergence.")
    json: str | None = option(None, writes=True, group=REPORTS, commands=("compare", "build", "inspect"),
                              metavar="PATH", help="Write the report (of a build, of an inspection) as JSON here.")
    junit: str | None = option(None, writes=True, group=REPORTS, commands=RENDERED, metavar="PATH",
                               help="Write JUnit XML (one test case per check).")
    markdown: str | None = option(None, writes=True, group=REPORTS, commands=RENDERED, metavar="PATH",
                                  help="Write a Markdown summary (PR comment, CI step summary).")
    html: str | None = option(None, writes=True, group=REPORTS, commands=RENDERED, metavar="PATH",
                              help="Write a self-contained HTML report with plots (the html extra).")
    exclude_list: str | None = option(None, writes=True, group=REPORTS, commands=("compare",), metavar="PATH",
                                      help="Write the nodes to keep in higher precision (each culprit's, in a "
                                           "quantized graph) one a line, as regular expressions NVIDIA ModelOpt's "
                                           "quantization takes in nodes_to_exclude (escaped and anchored).")
    model_explorer: str | None = option(None, writes=True, group=REPORTS, commands=RENDERED, metavar="PATH",
                                        help="Write node data for Google's Model Explorer (error, local error, cosine, "
                                             "status per ONNX node), the ONNX file beside it; `trtdiff view` opens "
                                             "them.")
    quiet: bool = option(False, group=REPORTS, commands=COMPARE, short="-q",
                         help="No progress display and no table: the verdict, where NaN/Inf first appear (when "
                              "outputs are not finite), the culprits and their fixes.")


@dataclass(frozen=True)
class RunOptions:
    """`trtdiff run`: which ONNX backend to run and record, and where to save the recording."""

    backend: OnnxBackendName | None = option(None, group=RECORDING, commands=("run",), required=True,
                                             help="The backend to run and record.")
    save: str | None = option(None, writes=True, group=RECORDING, commands=("run",), metavar="PATH",
                              required=True, help="The .npz file to write.")


@dataclass(frozen=True)
class DemoOptions:
    """`trtdiff demo`: which embedded DeepLabV3+, at which input shape and opsets."""

    example: Literal["resnet", "mobilenetv2"] = option("resnet", group=DEMO, commands=("demo",), flag="--model",
                                                       help="Which embedded DeepLabV3+ to run.")
    demo_shape: str = option("1x3x128x128", group=DEMO, commands=("demo",), flag="--input-shape", metavar="SHAPE",
                             parse=check_input_shape, help="Input shape.")
    demo_opsets: tuple[int, ...] = option((10, 13), group=DEMO, commands=("demo",), flag="--opsets",
                                          metavar="N,N...", parse=parse_opsets, default_text="10,13",
                                          help="Comma-separated opsets to export at.")


@dataclass(frozen=True)
class ConfigOptions:
    """Where options come from besides the command line: `[tool.trtdiff]` in pyproject.toml, or a file given."""

    config: str | None = option(None, group=CONFIG, metavar="FILE",
                                help="Read options from this TOML file (a pyproject.toml's [tool.trtdiff], or a file "
                                     "of options at top level) instead of the nearest pyproject.toml.")
    no_config: bool = option(False, group=CONFIG,
                             help="Read no config file: the defaults and the command line only.")


@dataclass(frozen=True)
class ViewOptions:
    """`trtdiff view`: where Model Explorer's local server listens, and whether a browser opens."""

    port: int | None = option(None, group=VIEW, commands=("view",), metavar="N", default_text="8080 or the next free",
                              help="Port of Model Explorer's local server.")
    host: str = option("localhost", group=VIEW, commands=("view",), metavar="HOST",
                       help="Host Model Explorer's server listens on.")
    no_browser: bool = option(False, group=VIEW, commands=("view",),
                              help="Start the server and print its address without opening a browser.")
# fmt: on


@dataclass(frozen=True)
class CompareOptions:
    """Every option of `compare` (`build` and `run` read the parts they need)."""

    load: LoadOptions = field(default_factory=LoadOptions)
    export: ExportOptions = field(default_factory=ExportOptions)
    runtime: BackendOptions = field(default_factory=BackendOptions)
    thresholds: Thresholds = field(default_factory=Thresholds)
    gate: GateOptions = field(default_factory=GateOptions)
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    force: bool = option(
        False,
        writes=True,
        group=EXPORT,
        help="Let --save-onnx, --save-engine (and NAME.marked.engine beside it) and run's --save replace an existing "
        "file (a link there is replaced, never followed). Nothing else: report files are written only over "
        "earlier trtdiff reports, --save-repro only into an empty folder or an earlier repro.",
    )

    def with_fields(self, **values: Any) -> CompareOptions:
        """A copy with options replaced by name: `with_fields(opset=13, input_shapes=["1x3x64x64"], precision="fp16")`.

        Any declared option of any part can be named (TensorRT's too); a whole part can be
        given as well (`gate=GateOptions(...)`). Text is read as the command line reads it
        (`memory_bytes="2GB"`), lists become tuples; an unknown name is a TypeError, as for
        any Python call.
        """
        parts: dict[tuple[str, ...], dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for name, value in values.items():
            if name in _PART_PATHS:
                *outer, last = _PART_PATHS[name]
                if outer:
                    parts.setdefault(tuple(outer), {})[last] = value
                else:
                    top[name] = value
                continue
            declared = _compare_declared().get(name)
            if declared is None:
                raise TypeError(f"unknown option {name!r}; see trtdiff.options for the fields of each part")
            path = _PATH_OF[declared.part]
            if not path:
                top[name] = declared.read(value)
            else:
                parts.setdefault(path, {})[name] = declared.read(value)
        whole = dataclasses.replace(self, **top)
        for path, fields in sorted(parts.items(), key=lambda item: len(item[0])):  # whole parts first
            whole = _replace_at(whole, path, fields)
        return whole

    def validate(self) -> None:
        self.export.validate()
        self.runtime.validate()
        self.thresholds.validate()
        self.gate.validate()
        self.analysis.validate()
        if self.gate.many and self.runtime.recordings:
            raise OptionError(
                f"a recording holds one sample; drop {param('inputs_dir')}/{param('num_samples')}",
                parameter="recordings",
            )
        if self.gate.num_samples and self.gate.num_samples > 1 and self.load.input_files:
            raise OptionError(
                f"random samples need {param('input_shapes')}, not input files; drop one", parameter="num_samples"
            )


def _replace_at(whole: Any, path: tuple[str, ...], fields: dict[str, Any]) -> Any:
    """`whole` with the part at `path` (e.g. ("runtime", "tensorrt")) given these fields."""
    head, *rest = path
    inner = getattr(whole, head)
    updated = _replace_at(inner, tuple(rest), fields) if rest else dataclasses.replace(inner, **fields)
    return dataclasses.replace(whole, **{head: updated})


_PART_PATHS: dict[str, tuple[str, ...]] = {
    "load": ("load",),
    "export": ("export",),
    "runtime": ("runtime",),
    "thresholds": ("thresholds",),
    "gate": ("gate",),
    "analysis": ("analysis",),
    "tensorrt": ("runtime", "tensorrt"),
}
_PATH_OF: dict[type, tuple[str, ...]] = {
    LoadOptions: ("load",),
    ExportOptions: ("export",),
    BackendOptions: ("runtime",),
    BuildSettings: ("runtime", "tensorrt"),
    Thresholds: ("thresholds",),
    GateOptions: ("gate",),
    AnalysisOptions: ("analysis",),
    CompareOptions: (),
}
COMPARE_PARTS: tuple[type, ...] = (
    LoadOptions,
    ExportOptions,
    CompareOptions,
    BuildSettings,
    BackendOptions,
    Thresholds,
    AnalysisOptions,
    GateOptions,
)
"""The parts a `CompareOptions` holds (`compare(**fields)` names any option of these)."""
CLI_PARTS: tuple[type, ...] = (SweepAxes, ReportOptions, RunOptions, DemoOptions, ConfigOptions, ViewOptions)
DISPLAY_ORDER: tuple[type, ...] = (LoadOptions, SweepAxes, *COMPARE_PARTS[1:], *CLI_PARTS[1:])
"""Every part, in the order help and the README list their options (within each group)."""
"""The command line's own parts: what it varies, prints and writes."""


@cache  # the parts are fixed classes: one table of their options, built on first use
def _compare_declared() -> dict[str, Declared]:
    return {d.name: d for d in all_declarations(COMPARE_PARTS)}
