"""OpenVINO as an `OnnxBackend`: the plain compiled model that ships, and marked ones with added outputs.

The ONNX file is read once (`Core.read_model`, the bytes ONNX Runtime ran) and compiled
for the device (`--openvino-device`, CPU by default) with the inference precision set
explicitly to the one the graph computes in (f32, or f16 for `--precision fp16`'s converted
graph, where the device has native FP16): unset, the CPU plugin runs bf16 where the CPU has it
(AMX, AVX512-BF16), which would be a different model from the one being compared. A CPU without
native FP16 would compile the f16 hint as bf16 (this project's AMD EPYC), 8x FP16's error: it is
asked for f32 instead. The precision the compiled model reports back is the one `describe()`
names, and `emulates` says so, with the precisions its executed layers report
(runtimePrecision), when it is not the graph's.

Intermediates come from added outputs (`Model.add_outputs`) on a copy of the read model:
one compiled model per group of wanted tensors (the comparison's chunks), a few kept for the
next sample. Adding outputs can change what the plugin fuses, so the plain compiled model
(no added output) runs once per `run` beside them and its final outputs are compared with
each marked one's (`compiled.answer.AnswerCheck`, shared with TensorRT); where they differ,
the marks are bisected as TensorRT's are (`compiled.answer.minimal_marks`: each step
compiles the model with half of them added and runs the sample that differed most).
`close()` drops every compiled model.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, OpenRequest, chunk_names
from trtdiff.backends.compiled.answer import AnswerCheck, Bisection, judged, minimal_marks, still_changes
from trtdiff.backends.openvino import import_openvino, version
from trtdiff.backends.openvino.names import TensorMap, tensor_map
from trtdiff.errors import BackendError, OptionError, first_line
from trtdiff.options import DEFAULT_OPENVINO_DEVICE
from trtdiff.source.fp16 import graph_precision

if TYPE_CHECKING:
    from typing import Self

    from trtdiff.backends.base import OutputComparison
    from trtdiff.report import MarkingCheck, RuntimeSummary, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo

HINTS = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}  # the graph's precision -> INFERENCE_PRECISION_HINT
KEPT_MARKED = 4  # marked compiled models kept for the next sample (one per chunk of wanted tensors)
_LISTED = 5  # names quoted in a note


class OpenVINOBackend(OnnxBackend):
    """Compiles the ONNX file in `graph` for an OpenVINO device and returns its tensors by ONNX name."""

    name = "openvino"

    @classmethod
    def open(cls, graph: GraphInfo, request: OpenRequest) -> Self:
        """Without `compare_outputs` (a rewritten model of the culprit step, registry.reopen_backend): no
        plain-against-marked check."""
        return cls(graph, request.options.openvino_device, compare=request.compare_outputs)

    def __init__(
        self,
        graph: GraphInfo,
        device: str = DEFAULT_OPENVINO_DEVICE,
        *,
        compare: OutputComparison | None = None,
        bisect_marks: bool | None = None,
        precision: str | None = None,
    ) -> None:
        """`compare`: how the plain model's outputs are compared with a marked one's (none: that check is not run).

        `precision`: the inference precision hint (f32, f16, bf16); None: the one the graph's own
        types compute in (f16 for `--precision fp16`'s converted graph, else f32).

        `bisect_marks`: None bisects the marks when marking changed the answer beyond the
        thresholds, True as soon as the outputs differ at all, False never.
        """
        ov = import_openvino()
        self.graph, self.device = graph, device
        self._core = ov.Core()
        devices = list(self._core.available_devices)
        if device not in devices:
            raise OptionError(
                f"no such OpenVINO device here; choose from {', '.join(devices)}",
                parameter="openvino_device",
                value=device,
            )
        self.precision_wanted = precision or HINTS[graph_precision(graph)]
        self.precision_asked = self.precision_wanted if precision or self._native(self.precision_wanted) else "f32"
        self._model: Any = self._read(graph)
        self.tensors: TensorMap = tensor_map(self._model, graph)
        self.compile_seconds = 0.0
        self._marked: dict[tuple[str, ...], Any] = {}
        self.plain: Any = self._compile(self._model, "the plain model")
        self.inference_precision = _type_name(self.plain.get_property("INFERENCE_PRECISION_HINT"))
        self.answer = AnswerCheck(compare) if compare is not None else None
        self._compare, self.bisect_marks = compare, bisect_marks
        self._plain_run: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None  # inputs, outputs
        self.marked_compiles = 0
        self.marked_tensors: set[str] = set()
        self.version = version()

    def _native(self, hint: str) -> bool:
        """Whether the device computes in `hint` itself. Asked for f16 without native FP16, the CPU plugin
        compiles bf16 (this AMD EPYC), whose error is 8x FP16's: judged against FP16's noise, a correct model
        would come close to the limit. Such a device is asked for f32 instead, and `emulates` says so."""
        wanted = {"f16": "FP16", "bf16": "BF16"}.get(hint)
        if wanted is None:
            return True
        try:
            capabilities = set(self._core.get_property(self.device, "OPTIMIZATION_CAPABILITIES"))
        except Exception:  # noqa: BLE001 -- a plugin that does not say: ask, and read back what it compiled
            return True
        return wanted in capabilities

    def _read(self, graph: GraphInfo) -> Any:
        """The model as OpenVINO reads it from the ONNX bytes (past protobuf's 2 GB: from the file itself)."""
        from trtdiff.backends.base import serialized

        data = serialized(graph.model)
        source: bytes | str = data if data is not None else str(graph.path)
        try:
            return self._core.read_model(source)
        except Exception as error:  # OpenVINO raises RuntimeError/GeneralFailure with C++ context
            raise BackendError(f"{graph.path}: OpenVINO cannot read the model: {_message(error)}") from error

    def _compile(self, model: Any, what: str) -> Any:
        started = time.perf_counter()
        try:
            compiled = self._core.compile_model(model, self.device, {"INFERENCE_PRECISION_HINT": self.precision_asked})
        except Exception as error:
            raise BackendError(
                f"{self.graph.path}: OpenVINO ({self.device}) cannot compile {what}: {_message(error)}"
            ) from error
        self.compile_seconds += time.perf_counter() - started
        return compiled

    def _release(self) -> None:
        self._plain_run = None
        self._marked.clear()
        self.plain = None
        self._model = None

    def describe(self) -> str:
        return f"openvino {self.version} ({self.device_text()}, inference precision {self.inference_precision})"

    def emulates(self, precision: str) -> str | None:
        """Where the plugin compiled another precision than the reduced one asked (no native FP16 on this CPU)."""
        if precision == "fp32" or self.inference_precision == self.precision_wanted:
            return None
        from trtdiff.backends.openvino.fusion import runtime_graph

        counts: dict[str, int] = {}
        for layer in runtime_graph(self.plain, self.graph).fusion.layers if self.plain is not None else ():
            for kind in layer.output_types[:1]:
                counts[kind] = counts.get(kind, 0) + 1
        ran = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda item: -item[1]))
        chosen = self.inference_precision
        why = {
            "bf16": "bf16 keeps float32's range with 8 bits of mantissa to FP16's 11, so its error is larger than "
            "FP16's and an FP16 overflow vanishes",
            "f32": "an FP16 overflow vanishes and its figures understate FP16's own error",
        }.get(chosen, f"its figures are {chosen}'s, not {precision}'s")
        asked = "" if self.precision_asked == self.precision_wanted else f", so it was asked for {self.precision_asked}"
        return (
            f"OpenVINO's {self.device} plugin has no native {precision.upper()} on {self.device_text()}{asked} and "
            f"compiled {chosen} (executed layers by runtimePrecision: {ran or 'not read'}): {why}"
        )

    def device_text(self) -> str:
        """The device and, where its plugin says, its full name (CPU: AMD EPYC)."""
        try:
            name = str(self._core.get_property(self.device, "FULL_DEVICE_NAME"))
        except Exception:  # noqa: BLE001 -- a plugin without the property: the device's short name stands
            return self.device
        return f"{self.device}: {name}"

    def marked_models(self) -> tuple[Any, ...]:
        """The marked compiled models kept (the most recent last), for their runtime graphs."""
        return tuple(self._marked.values())

    def available(self) -> set[str]:
        return set(self.tensors.port_of)

    def notes(self) -> tuple[str, ...]:
        """What the report should say: the ONNX tensors OpenVINO has no tensor for (not compared)."""
        unmapped = self.tensors.unmapped
        if not unmapped:
            return ()
        more = f" and {len(unmapped) - _LISTED} more" if len(unmapped) > _LISTED else ""
        return (
            f"openvino: {len(unmapped)} ONNX tensors have no OpenVINO tensor of that name (folded or renamed when "
            f"read) and are not compared ({', '.join(unmapped[:_LISTED])}{more})",
        )

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        """One inference per chunk of wanted tensors (a compiled model with those outputs added); yield each chunk.

        The plain model runs once per sample (the same input arrays: the comparison's chunks of one sample)
        where anything is marked; its outputs are compared with each marked run's.
        """
        self._check_open()
        names = [t for t in dict.fromkeys(wanted) if t in self.tensors.port_of]
        inputs = {name: feeds[name] for name in self.graph.graph_inputs if name in feeds}
        for group in chunk_names(names, sizes, max_bytes):
            marks = [t for t in group if t not in self.tensors.outputs]
            self.marked_tensors.update(marks)
            values = self._infer(self._marked_model(marks) if marks else self._plain_model(), inputs)
            if marks and self.answer is not None:
                self.answer.add(inputs, self._plain_outputs(inputs), self._final(values))
            yield {name: values[name] for name in group if name in values}

    def _plain_outputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The plain model's final outputs on `inputs`, run once per sample (a new sample: other input arrays)."""
        last = self._plain_run
        if last is None or last[0].keys() != inputs.keys() or any(last[0][k] is not v for k, v in inputs.items()):
            if self.answer is not None:
                self.answer.new_sample()
            last = (dict(inputs), self._final(self._infer(self._plain_model(), inputs)))
            self._plain_run = last
        return last[1]

    def _final(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: values[name] for name in self.graph.graph_outputs if name in values}

    def _plain_model(self) -> Any:
        if self.plain is None:
            raise BackendError(f"the {self.name} backend was closed while it ran")
        return self.plain

    def _marked_model(self, marks: Sequence[str]) -> Any:
        """The compiled model with `marks` added as outputs (one per port), compiled once and kept for a while."""
        if self._model is None:
            raise BackendError(f"the {self.name} backend was closed while it ran")
        key = tuple(sorted(set(self.tensors.representative(marks).values())))
        compiled = self._marked.pop(key, None)
        if compiled is None:
            model = self._model.clone()
            try:
                model.add_outputs(list(key))
            except Exception as error:
                raise BackendError(
                    f"{self.graph.path}: OpenVINO cannot return {len(key)} tensors as outputs: {_message(error)}"
                ) from error
            compiled = self._compile(model, f"the model with {len(key)} added outputs")
            self.marked_compiles += 1
            while len(self._marked) >= KEPT_MARKED:
                self._marked.pop(next(iter(self._marked)))
        self._marked[key] = compiled  # the most recent last
        return compiled

    def _infer(self, compiled: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output of one inference by each of its names (the values are copies, not the request's memory)."""
        try:
            results = compiled.create_infer_request().infer(dict(inputs), share_outputs=False)
        except Exception as error:
            raise BackendError(f"{self.graph.path}: OpenVINO failed to run the model: {_message(error)}") from error
        values: dict[str, np.ndarray] = {}
        for index, output in enumerate(compiled.outputs):
            value = np.asarray(results[index])
            values.update((name, value) for name in output.get_names())
        return values

    def runtime_summary(self, thresholds: Thresholds) -> RuntimeSummary:
        """What was compiled, fused and run, and the marking check (read before `close()`)."""
        from trtdiff.backends.openvino.summary import summarize

        return summarize(self, self.marking_check(thresholds))

    def marking_check(self, thresholds: Thresholds) -> MarkingCheck:
        """Whether adding outputs changed the final outputs over the samples run, bisecting the marks where asked."""
        from trtdiff.report import MarkingCheck

        if self.answer is None:
            return MarkingCheck(status="not run", reason="the backend was opened without an output comparison")
        return judged(self.answer, thresholds, lambda: self.bisect(thresholds), strict=self.bisect_marks)

    def bisect(self, thresholds: Thresholds) -> Bisection:
        """Compile with half the marks at a time and run the sample that differed most; one such model at a time."""
        answer = self.answer
        witness = answer.witness if answer is not None else None
        expected = answer.witness_plain if answer is not None else None
        compare = self._compare
        if compare is None or witness is None or expected is None or self._model is None:
            raise BackendError("no sample differed; nothing to bisect")
        strict = self.bisect_marks is True
        model = self._model

        def changes(marks: Sequence[str]) -> bool:
            marked = model.clone()
            marked.add_outputs(list(marks))
            compiled = self._compile(marked, f"the model with {len(marks)} added outputs (bisection)")
            check = AnswerCheck(compare)
            check.add(witness, expected, self._final(self._infer(compiled, witness)))
            return still_changes(check, thresholds, strict)

        marks = sorted(set(self.tensors.representative(self.marked_tensors).values()))
        return minimal_marks(marks, changes)


def _type_name(value: object) -> str:
    """An OpenVINO element type as its short name (f32, bf16, f16), whatever object the property returns."""
    to_string = getattr(value, "to_string", None)
    return str(to_string()) if callable(to_string) else str(value)


def _message(error: BaseException) -> str:
    """OpenVINO's message without its C++ source context: the last line that says something."""
    text = str(error) or type(error).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("[")]
    useful = [line for line in lines if "src/" not in line and ".cpp:" not in line]
    return (useful or lines or [first_line(error) or type(error).__name__])[-1][:400]
