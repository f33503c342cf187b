"""What a comparison is asked to do, as small frozen dataclasses parsed once (by the CLI or a caller).

`compare`, `build` and `run` take the same `CompareOptions`: what to load and feed
(`LoadOptions`), how to get the ONNX file (`ExportOptions`), which backends run and how
(`BackendOptions`, with TensorRT's `BuildSettings`), when a tensor diverges (`Thresholds`),
and the CI gate's samples and mIoU limits (`GateOptions`). Field names are unique across
them, so a caller can name any field directly: `compare("m.pt", opset=13, rtol=1e-4)`.
Each `validate()` raises an `OptionError` naming the parameter; nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from trtdiff.errors import OptionError, param
from trtdiff.report import Thresholds

Exporter = Literal["auto", "torchscript", "dynamo"]
Precision = Literal["fp32", "fp16"]
PrecisionConstraints = Literal["none", "obey", "prefer"]
OutputsMode = Literal["all", "unfused", "none"]

KNOWN_BACKENDS = ("torch", "onnxruntime", "onnx-reference", "tensorrt")
ONNX_BACKENDS = ("onnxruntime", "onnx-reference", "tensorrt")
DEFAULT_BACKENDS = ("torch", "onnxruntime", "tensorrt")
DEFAULT_PROVIDER = "CPUExecutionProvider"
DEFAULT_OPSET = 17
DEFAULT_CHUNK_BYTES = 1 << 30
DEFAULT_MEMORY_BYTES = 2 << 30
EXPORTERS: tuple[Exporter, ...] = ("auto", "torchscript", "dynamo")
OUTPUT_MODES: tuple[OutputsMode, ...] = ("all", "unfused", "none")
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16")
CONSTRAINTS: tuple[PrecisionConstraints, ...] = ("none", "obey", "prefer")


@dataclass(frozen=True)
class LoadOptions:
    """How to load the model and what to feed it (random inputs of `input_shapes`, or files)."""

    model_class: str | None = None
    trust: bool = False
    input_shapes: tuple[str, ...] = ()
    input_files: tuple[str, ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class ExportOptions:
    """How to get the ONNX file: export at `opset` with `exporter`, or take `onnx` as given."""

    opset: int | None = None
    exporter: Exporter = "auto"
    onnx: str | None = None
    save_onnx: str | None = None
    simplify: bool = False

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


@dataclass(frozen=True)
class BuildSettings:
    """Everything that changes a TensorRT engine (and so its cache key).

    `tf32` and `input_shapes` are filled in from `BackendOptions.tf32` and the inputs.
    """

    outputs: OutputsMode = "all"
    precision: Precision = "fp32"
    tf32: bool = False
    precision_constraints: PrecisionConstraints = "none"
    optimization_level: int | None = None
    workspace_bytes: int | None = None
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    compute_capabilities: tuple[str, ...] = ()
    mark_bool: bool = False
    # Bytes of debug tensors one run of the (one) marked engine may copy; None: a fixed 1 GiB, never the
    # GPU's free memory. Over it, a sample takes several runs of the same engine. Not part of the cache key.
    mark_budget_bytes: int | None = None
    # Bisect the marks when marking changed the answer (None), also when the outputs differ at all (True),
    # or never (False): each step rebuilds the marked engine with half the marks. Not part of the cache key.
    bisect_marks: bool | None = None

    def validate(self) -> None:
        """Raise OptionError for a value no TensorRT accepts."""
        checks = (
            ("outputs", self.outputs, OUTPUT_MODES),
            ("precision", self.precision, PRECISIONS),
            ("precision_constraints", self.precision_constraints, CONSTRAINTS),
        )
        for name, value, allowed in checks:
            if value not in allowed:
                raise OptionError(f"unknown; choose one of {', '.join(allowed)}", parameter=name, value=value)
        if self.optimization_level is not None and not 0 <= self.optimization_level <= 5:
            raise OptionError(
                "must be 0-5 (TensorRT's default is 3)", parameter="optimization_level", value=self.optimization_level
            )
        if self.workspace_bytes is not None and self.workspace_bytes <= 0:
            raise OptionError(
                "must be a positive number of bytes", parameter="workspace_bytes", value=self.workspace_bytes
            )
        if self.mark_budget_bytes is not None and self.mark_budget_bytes <= 0:
            raise OptionError(
                "must be a positive number of bytes", parameter="mark_budget_bytes", value=self.mark_budget_bytes
            )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["input_shapes"] = {name: list(shape) for name, shape in self.input_shapes}
        return data


@dataclass(frozen=True)
class BackendOptions:
    """Which backends run and how; `recordings` replays files `trtdiff run` saved instead of running."""

    backends: tuple[str, ...] | None = None
    require: tuple[str, ...] = ()
    ort_provider: str = DEFAULT_PROVIDER
    torch_device: str = "cpu"
    tf32: bool = False
    tensorrt: BuildSettings = field(default_factory=BuildSettings)
    engine_cache: str | None = None
    save_engine: str | None = None
    recordings: dict[str, str] = field(default_factory=dict)
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    def validate(self) -> None:
        for name, names in (("backends", self.backends or ()), ("require", self.require)):
            unknown = [b for b in names if b not in KNOWN_BACKENDS]
            if unknown:
                raise OptionError(
                    f"unknown backend {unknown[0]!r}; choose from {', '.join(KNOWN_BACKENDS)}",
                    parameter=name,
                    value=",".join(names),
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


@dataclass(frozen=True)
class GateOptions:
    """Where the CI gate's samples come from (a folder, N random inputs) and the mIoU thresholds."""

    inputs_dir: str | None = None
    labels_dir: str | None = None
    num_samples: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    size: tuple[int, int] | None = None
    ignore_index: int | None = None
    min_miou: float | None = None
    max_miou_drop: float | None = None
    per_layer: bool = False

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

    culprit: bool | None = None


def validate_thresholds(thresholds: Thresholds) -> None:
    """Raise OptionError for a threshold outside its range."""
    if not -1.0 <= thresholds.min_cosine <= 1.0:
        raise OptionError("must be between -1 and 1, e.g. 0.9999", parameter="min_cosine", value=thresholds.min_cosine)
    if thresholds.rtol < 0:
        raise OptionError("must not be negative, e.g. 1e-3", parameter="rtol", value=thresholds.rtol)
    if thresholds.max_abs is not None and thresholds.max_abs < 0:
        raise OptionError("must not be negative, e.g. 1e-4", parameter="max_abs", value=thresholds.max_abs)
    if not isinstance(thresholds.allow_nonfinite, bool):
        raise OptionError("must be True or False", parameter="allow_nonfinite", value=repr(thresholds.allow_nonfinite))


@dataclass(frozen=True)
class CompareOptions:
    """Every option of `compare` (`build` and `run` read the parts they need)."""

    load: LoadOptions = field(default_factory=LoadOptions)
    export: ExportOptions = field(default_factory=ExportOptions)
    runtime: BackendOptions = field(default_factory=BackendOptions)
    thresholds: Thresholds = field(default_factory=Thresholds)
    gate: GateOptions = field(default_factory=GateOptions)
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    force: bool = False

    def with_fields(self, **values: Any) -> CompareOptions:
        """A copy with fields of the parts replaced by name: `with_fields(opset=13, input_shapes=["1x3x64x64"])`.

        A whole part can be given too (`gate=GateOptions(...)`). Lists become tuples; an
        unknown name is a TypeError, as for any Python call.
        """
        parts: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for name, value in values.items():
            value = tuple(value) if isinstance(value, list) else value
            if name in _PART_OF:
                parts.setdefault(_PART_OF[name], {})[name] = value
            elif name == "force" or name in _PARTS:
                top[name] = value
            else:
                raise TypeError(f"unknown option {name!r}; see trtdiff.options for the fields of each part")
        whole = dataclasses.replace(self, **top)
        replaced = {part: dataclasses.replace(getattr(whole, part), **fields) for part, fields in parts.items()}
        return dataclasses.replace(whole, **replaced)

    def validate(self) -> None:
        self.export.validate()
        self.runtime.validate()
        validate_thresholds(self.thresholds)
        self.gate.validate()
        if self.gate.many and self.runtime.recordings:
            raise OptionError(
                f"a recording holds one sample; drop {param('inputs_dir')}/{param('num_samples')}",
                parameter="recordings",
            )
        if self.gate.num_samples and self.gate.num_samples > 1 and self.load.input_files:
            raise OptionError(
                f"random samples need {param('input_shapes')}, not input files; drop one", parameter="num_samples"
            )


_PARTS = {
    "load": LoadOptions,
    "export": ExportOptions,
    "runtime": BackendOptions,
    "thresholds": Thresholds,
    "gate": GateOptions,
    "analysis": AnalysisOptions,
}
_PART_OF = {f.name: part for part, cls in _PARTS.items() for f in dataclasses.fields(cls)}
