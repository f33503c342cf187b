"""Derived references: PyTorch's value of an ONNX tensor that no single aten op produced.

A decomposed op (SiLU as Sigmoid and Mul, GELU as Div, Erf, Add, Mul, Mul, LayerNorm below
opset 17, attention's head splits; the reshapes and transposes between them) leaves ONNX
tensors that no recorded op stands for (attention itself is recorded op by op: torch_attention).
Each such tensor gets a *derived* value: its node run in PyTorch (pairing_eval) on the values
PyTorch has for the node's inputs, recorded or derived in turn.

A derived value is only kept when a recorded value vouches for it: some node paired with a
recorded op, run in PyTorch on the derived values that feed it, must reproduce that op's
recorded value (to VOUCH_RTOL of its magnitude). Then the ONNX nodes in between compute what
PyTorch computed, step for step, and each derived value is what PyTorch holds at that step;
a node whose computation differs from PyTorch's (an edit, a wrong attribute) breaks the
vouching and leaves its tensors unpaired rather than compared with a wrong reference.

A derived value that rounding alone could move past the thresholds (inputs moved by
PERTURBATION move it by more than MAX_AMPLIFICATION times that: the mean of a LayerNorm's
output, whose rows sum to zero, is rounding noise in every backend) is computed, since its
consumers need it, but never compared.

In a reduced-precision graph (FP16, BF16: converted, or written so) the recording is wider
(the float32 golden): each derived value is computed in the recording's precision, as PyTorch
holds it at that step, with the graph's constants widened to it and its float Casts (the ones a
converter puts at the FP32 boundary and around the ops it keeps in FP32) passing values through
(`widened`); what the graph itself rounds is the comparison's to measure, not the reference's
to copy. Its constants (a GroupNorm's scale, GELU's 1/sqrt(2)) hold the precision's rounding of
PyTorch's, so vouching there allows that rounding (`vouch_rtol`).

Derived values are computed again for each capture (each sample) from its recorded values,
by the derivation itself (`Derivation.value`), which travels with the `Pairing` that made it:
a capture alone holds recorded values only. Torch is imported when a node is evaluated, not
when this module is.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.backends.pytorch.records import DERIVED_PREFIX, TorchCapture
from trtdiff.pairing.views import view_compatible
from trtdiff.source.onnx_graph import GraphInfo, NodeInfo, TensorType

if TYPE_CHECKING:
    import torch

    from trtdiff.pairing.evaluate import NodeEvaluator

VOUCH_RTOL = 1e-4
"""How closely a node run on derived values must reproduce the recorded value that vouches for them."""
REDUCED_VOUCH_RTOL: dict[str, float] = {"fp16": 4 * 2.0**-11, "bf16": 4 * 2.0**-8}
"""The same in a reduced-precision graph: four times the precision's unit roundoff (2e-3 in FP16), the
error its rounded constants leave in a value computed from them (measured: at most 3.6e-4 in the
architecture test set, a GroupNorm's scale), well below what its noise ratio lets a layer differ by."""
PERTURBATION = 1e-6
MAX_AMPLIFICATION = 100.0
"""A derived value is compared only if inputs off by PERTURBATION (of their largest magnitude) move it
by at most MAX_AMPLIFICATION times that (of its own): else rounding alone could make it diverge."""


@dataclass(eq=False)
class Derivation:
    """The derived tensors of one pairing and how to compute them from any capture of the model."""

    graph: GraphInfo
    evaluator: NodeEvaluator
    sources: dict[str, str]
    """ONNX tensor -> capture key of the recorded value (or model input) it takes."""
    keys: dict[str, str] = field(default_factory=dict)
    """Derived ONNX tensor -> its key in the capture."""
    tensors: dict[str, str] = field(default_factory=dict)
    """Derived key -> its ONNX tensor."""
    compared: set[str] = field(default_factory=set)
    """The derived tensors to pair; the others only feed them (too sensitive to rounding to compare)."""
    prefix: str = field(default_factory=lambda: f"{DERIVED_PREFIX}{uuid.uuid4().hex[:12]}:")
    """Its keys' prefix: unique to this derivation, so that two pairings never share a key in a store."""

    def add(self, tensor: str, *, compared: bool = True) -> str:
        """Derive `tensor`; returns its key."""
        key = f"{self.prefix}{tensor}"
        self.keys[tensor] = key
        self.tensors[key] = tensor
        if compared:
            self.compared.add(tensor)
        return key

    def owns(self, key: str) -> bool:
        """Whether `key` is one of this derivation's values."""
        return key in self.tensors

    def value(self, capture: TorchCapture, key: str) -> np.ndarray:
        """The value `key` for `capture`: derived (computed into its store on first use), else recorded."""
        if key in self.tensors and key not in capture.store:
            capture.store.put(key, self.compute(capture, key))
        return capture.value(key)

    def compute(self, capture: TorchCapture, key: str) -> np.ndarray:
        """The derived value `key` for `capture` (its node run on the capture's values)."""
        tensor = self.tensors[key]
        node = self.graph.node_of(tensor)
        assert node is not None
        data = {name: self._input(capture, name) for name in node.inputs if name in self.graph.data_tensors}
        outputs = self.evaluator.run(node, data)
        if outputs is None:
            raise RuntimeError(f"{node.name} could not be computed in PyTorch for a derived value")
        value = None
        for name, output in zip(node.outputs, outputs, strict=True):
            if name in self.keys and output is not None:
                array = output.detach().cpu().numpy()
                if name == tensor:
                    value = array
                elif self.keys[name] not in capture.store:
                    capture.store.put(self.keys[name], array)
        if value is None:
            raise RuntimeError(f"{node.name} gave no value for {tensor} in PyTorch")
        return value

    def _input(self, capture: TorchCapture, name: str) -> torch.Tensor:
        import torch

        if name in self.keys:
            return torch.from_numpy(np.array(self.value(capture, self.keys[name])))
        value = as_onnx(capture.value(self.sources[name]), self.graph.tensor_type(name), widen=self.evaluator.widen)
        assert value is not None
        return value


@dataclass
class Evaluation:
    """Every float tensor without a recorded value, computed in PyTorch, and which recorded values vouch for it."""

    evaluator: NodeEvaluator
    references: _References
    derived: dict[str, torch.Tensor]
    unstable: set[str]
    """Derived tensors that rounding alone could move past the thresholds (see `_stable`)."""
    vouched: set[str]
    refuted: set[str]
    """Derived tensors (not vouched) that feed a node whose recorded value they do not reproduce."""
    rtol: float = VOUCH_RTOL
    """How closely a value must reproduce a recorded one to vouch for it, or to stand for it (`vouch_rtol`)."""

    def agrees(self, tensor: str, key: str) -> bool:
        """Whether the derived value of `tensor` is the capture's value `key`, to `rtol` of its magnitude."""
        value, capture = self.derived.get(tensor), self.references.capture
        if value is None or not capture.holds(key):
            return False
        graph, widen = self.references.graph, self.evaluator.widen
        return _agrees(value, as_onnx(capture.value(key), graph.tensor_type(tensor), widen=widen), self.rtol)


def derive(
    graph: GraphInfo, capture: TorchCapture, sources: Mapping[str, str], evaluation: Evaluation | None = None
) -> Derivation | None:
    """Derived values for the float tensors `sources` (ONNX tensor -> capture key) leaves without one.

    Returns None when none can be derived and vouched for; else the Derivation, whose values
    for this capture are already in its store. `evaluation` is `evaluate` of the same
    arguments, when the caller has it.
    """
    evaluation = evaluation if evaluation is not None else evaluate(graph, capture, sources)
    evaluator, derived, unstable = evaluation.evaluator, evaluation.derived, evaluation.unstable
    vouched = evaluation.vouched
    shapes = {t: tuple(v.shape) for t, v in derived.items()}
    evaluator.shape_of = shapes.get  # what was folded stays folded; the values themselves are let go
    if not vouched - unstable:
        return None
    derivation = Derivation(graph, evaluator, dict(evaluation.references.keys))
    for tensor in (t for t in graph.node_outputs if t in vouched):
        key = derivation.add(tensor, compared=tensor not in unstable)
        capture.store.put(key, derived[tensor].detach().cpu().numpy())
    return derivation


def evaluate(
    graph: GraphInfo, capture: TorchCapture, sources: Mapping[str, str], previous: Evaluation | None = None
) -> Evaluation:
    """Each float tensor `sources` (ONNX tensor -> capture key) leaves without a value, computed in PyTorch.

    `previous` is an evaluation of the same capture with fewer sources: its values that the
    new sources do not feed are kept instead of computed again.
    """
    import torch

    from trtdiff.pairing.evaluate import NodeEvaluator

    evaluator = previous.evaluator if previous is not None else NodeEvaluator(graph, widen=widened(graph, capture))
    references = _References(graph, capture, sources, widen=evaluator.widen)
    rtol = vouch_rtol(graph)
    moved = set(references.keys) - set(previous.references.keys) if previous is not None else set()
    derived: dict[str, torch.Tensor] = {}
    unstable: set[str] = set()
    generator = torch.Generator().manual_seed(0)

    def shape_of(tensor: str) -> tuple[int, ...] | None:
        value = derived[tensor] if tensor in derived else references.value(tensor)
        return tuple(value.shape) if value is not None else None

    evaluator.shape_of = shape_of
    for node in graph.nodes:
        wanted = [t for t in node.outputs if t and t not in references.keys and _float_data(graph, t)]
        if not wanted or not evaluator.supports(node):
            continue
        if previous is not None and not moved.intersection(node.inputs):  # the same inputs: the same outputs
            derived.update((t, previous.derived[t]) for t in wanted if t in previous.derived)
            unstable.update(t for t in wanted if t in previous.unstable)
            continue
        moved.update(wanted)
        data = references.inputs(node, derived)
        outputs = evaluator.run(node, data) if data is not None else None
        if data is None or outputs is None:
            continue
        stable = _stable(evaluator, node, data, outputs, generator)
        for tensor, value, steady in zip(node.outputs, outputs, stable, strict=True):
            if tensor in wanted and value is not None:
                derived[tensor] = value
                if not steady:
                    unstable.add(tensor)
    vouched, refuted = _vouched(graph, evaluator, references, derived, rtol)
    return Evaluation(evaluator, references, derived, unstable, vouched, refuted - vouched, rtol)


def widened(graph: GraphInfo, capture: TorchCapture) -> bool:
    """Whether `graph` computes in a reduced precision that `capture` recorded wider (see the module docstring)."""
    from trtdiff.source.fp16 import graph_precision

    return graph_precision(graph) != "fp32" and capture.dtype in ("float32", "float64")


def vouch_rtol(graph: GraphInfo) -> float:
    """How closely a derived value must reproduce a recorded one in `graph`: VOUCH_RTOL, or REDUCED_VOUCH_RTOL."""
    from trtdiff.source.fp16 import graph_precision

    return REDUCED_VOUCH_RTOL.get(graph_precision(graph), VOUCH_RTOL)


def _stable(
    evaluator: NodeEvaluator,
    node: NodeInfo,
    data: Mapping[str, torch.Tensor],
    outputs: Sequence[torch.Tensor | None],
    generator: torch.Generator,
) -> list[bool]:
    """Per output, whether inputs moved by PERTURBATION (of their size) move it by at most MAX_AMPLIFICATION times that.

    Two backends' inputs differ by rounding; an output that such differences move by much
    more (the mean of a LayerNorm's output, whose rows sum to zero: rounding noise against
    rounding noise) would diverge on a correct model, so it is not compared. A Cast between float
    types moves nothing by more than it is moved (it rounds to the nearer type): steady without a
    second run (an FP16 conversion puts one around every op it keeps in FP32).
    """
    if node.op_type == "Cast" and all(v is not None and v.is_floating_point() for v in (*data.values(), *outputs)):
        return [True] * len(outputs)
    noisy = {name: _perturbed(value, generator) for name, value in data.items()}
    again = evaluator.run(node, noisy)
    if again is None:
        return [False] * len(outputs)
    return [a is not None and b is not None and _steady(a, b) for a, b in zip(outputs, again, strict=True)]


def _perturbed(value: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torch

    if not value.is_floating_point() or value.numel() == 0:
        return value
    finite = value[torch.isfinite(value)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    noise = (torch.rand(value.shape, generator=generator, dtype=torch.float64) * 2 - 1) * (PERTURBATION * scale)
    return value + noise.to(value.dtype)


def _steady(value: torch.Tensor, moved: torch.Tensor) -> bool:
    import torch

    if value.shape != moved.shape:
        return False
    finite = torch.isfinite(value)
    if not torch.equal(finite, torch.isfinite(moved)) or not torch.equal(value[~finite], moved[~finite]):
        return False
    if not bool(finite.any()):
        return True
    scale = float(value[finite].abs().max())
    change = float((value[finite].double() - moved[finite].double()).abs().max())
    return change <= MAX_AMPLIFICATION * PERTURBATION * scale if scale > 0 else change == 0.0


def _float_data(graph: GraphInfo, tensor: str) -> bool:
    return tensor in graph.data_tensors and graph.tensor_type(tensor).is_float


def _vouched(
    graph: GraphInfo,
    evaluator: NodeEvaluator,
    references: _References,
    derived: Mapping[str, torch.Tensor],
    rtol: float,
) -> tuple[set[str], set[str]]:
    """The derived tensors that some recorded value vouches for (see the module docstring), and those one refutes."""
    vouched: set[str] = set()
    refuted: set[str] = set()
    for node in graph.nodes:
        recorded = [i for i, t in enumerate(node.outputs) if t in references.keys]
        feeding = [t for t in node.inputs if t in derived]
        if not recorded or not feeding or all(t in vouched for t in feeding):
            continue
        data = references.inputs(node, derived)
        outputs = evaluator.run(node, data) if data is not None else None
        if outputs is None:
            continue
        if all(_agrees(outputs[i], references.value(node.outputs[i]), rtol) for i in recorded):
            vouched |= _ancestors(graph, feeding, derived)
        else:
            refuted |= _ancestors(graph, feeding, derived)
    if evaluator.widen:
        vouched |= _passed_through(graph, references, derived, vouched)
    return vouched, refuted


def _passed_through(
    graph: GraphInfo, references: _References, derived: Mapping[str, torch.Tensor], vouched: set[str]
) -> set[str]:
    """The float Casts of a widened evaluation whose input has a value: they hold it, whoever reads them.

    Such a Cast computes nothing PyTorch did not (it rounds to the graph's precision, which the
    comparison measures), so it needs no recorded value downstream: the converter's Cast of a
    graph input that only a Shape reads is paired too.
    """
    found: set[str] = set()
    for node in graph.nodes:
        if node.op_type != "Cast" or not node.inputs or not node.outputs or node.outputs[0] not in derived:
            continue
        source = node.inputs[0]
        if source in references.keys or source in vouched or source in found:
            found.add(node.outputs[0])
    return found


def _agrees(value: torch.Tensor | None, reference: torch.Tensor | None, rtol: float) -> bool:
    import torch

    if value is None or reference is None or value.numel() != reference.numel():
        return False
    ours, theirs = value.detach().reshape(-1), reference.detach().reshape(-1).to(value.dtype)
    finite = torch.isfinite(theirs)
    if not bool(finite.all()) or not bool(torch.isfinite(ours).all()):
        if not torch.equal(finite, torch.isfinite(ours)) or not torch.equal(ours[~finite], theirs[~finite]):
            return False
        ours, theirs = ours[finite], theirs[finite]
    if theirs.numel() == 0:
        return True
    return float((ours - theirs).abs().max()) <= rtol * float(theirs.abs().max())


def _ancestors(graph: GraphInfo, tensors: Iterable[str], derived: Mapping[str, torch.Tensor]) -> set[str]:
    """`tensors` and every derived tensor they are computed from, through derived tensors only."""
    found: set[str] = set()
    stack = [t for t in tensors if t in derived]
    while stack:
        tensor = stack.pop()
        if tensor in found:
            continue
        found.add(tensor)
        node = graph.node_of(tensor)
        if node is not None:
            stack.extend(t for t in node.inputs if t in derived and t not in found)
    return found


class _References:
    """PyTorch's recorded values by ONNX tensor (paired tensors and the model's inputs), as torch tensors."""

    def __init__(self, graph: GraphInfo, capture: TorchCapture, sources: Mapping[str, str], *, widen: bool) -> None:
        self.graph = graph
        self.capture = capture
        self.widen = widen
        self.keys = dict(sources)
        if len(graph.graph_inputs) == len(capture.input_keys):
            self.keys.update(zip(graph.graph_inputs, capture.input_keys, strict=True))
        self._values: dict[str, torch.Tensor | None] = {}

    def value(self, tensor: str) -> torch.Tensor | None:
        if tensor not in self._values:
            key = self.keys.get(tensor)
            held = key is not None and self.capture.holds(key)  # a summarizing recording drops what does not fit
            self._values[tensor] = (
                as_onnx(self.capture.value(key), self.graph.tensor_type(tensor), widen=self.widen)
                if held and key is not None
                else None
            )
        return self._values[tensor]

    def inputs(self, node: NodeInfo, derived: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """The values of `node`'s inputs computed from the model's inputs, or None if one has none."""
        data: dict[str, torch.Tensor] = {}
        for name in node.inputs:
            if not name or name not in self.graph.data_tensors:
                continue
            value = derived.get(name)
            if value is None:
                value = self.value(name)
            if value is None:
                return None
            data[name] = value
        return data


def as_onnx(value: np.ndarray, onnx_type: TensorType, *, widen: bool = False) -> torch.Tensor | None:
    """A recorded value as the ONNX tensor holds it: its static shape (through a view) and dtype.

    `widen` (a reduced-precision graph, `widened`): a float value keeps its own dtype where the tensor's is narrower.
    """
    import torch

    from trtdiff.pairing.evaluate import torch_dtype

    tensor = torch.from_numpy(np.array(value))
    shape = onnx_type.shape
    if shape is not None and None not in shape and tuple(shape) != tuple(tensor.shape):
        static = tuple(int(d) for d in shape if d is not None)
        if not view_compatible(static, tuple(tensor.shape)):
            return None
        tensor = tensor.reshape(static)
    elif shape is not None and len(shape) != tensor.dim():
        return None
    if onnx_type.dtype is not None and onnx_type.is_float and tensor.is_floating_point():
        dtype = torch_dtype(onnx_type.dtype)
        if not (widen and dtype.itemsize < tensor.dtype.itemsize):
            tensor = tensor.to(dtype)
    return tensor
