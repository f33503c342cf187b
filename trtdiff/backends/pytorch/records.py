"""What one reference forward pass left behind, as plain data: records, module calls, values in a store.

The capture (capture.py, which needs torch) fills these; pairing and the comparison read them
without importing torch. A recorded value is looked up by key (`TorchRecord.key`, the model's
outputs and inputs); a *derived* value (an ONNX tensor no single aten op produced) is computed
by the `Pairing` that derived it, never by the capture alone (pairing.pairs: `Pairing.value`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.backends.store import TensorStore

INPUT = -1
"""`TorchRecord.sources` entry of a value computed from a model input by unrecorded ops only."""
RECORD_PREFIX = "torch:"
OUTPUT_PREFIX = "torch:output:"
DERIVED_PREFIX = "torch:derived:"
INPUT_PREFIX = "torch:input:"


@dataclass(frozen=True)
class TorchRecord:
    """One recorded aten op: what it was, where it ran, what it produced and from what."""

    index: int
    op: str
    kind: str
    module_path: str | None
    shape: tuple[int, ...]
    dtype: str
    inputs: tuple[int, ...]
    sources: tuple[int | None, ...] = ()
    """Per tensor argument, the record it flows from through unrecorded ops (views, copies):
    a record index, INPUT for a model input, None for a parameter, buffer or constant."""

    @property
    def key(self) -> str:
        return f"torch:{self.index}"


@dataclass(frozen=True)
class ModuleCall:
    """One call of a submodule, the record that produced its (first tensor) output, and how many tensors it returned
    (a rotary embedding's cos and sin: which ONNX tensor is the first is then not known from shapes alone)."""

    path: str
    type_name: str
    output_record: int | None
    tensors: int = 1


@dataclass(frozen=True)
class Returned:
    """The structure the forward returned (a pytree spec and its leaves), tensors left out.

    Leaf i is a tensor when i is in `tensors` (the leaf is then its dtype's name, "torch.float32");
    its value is the held output `torch:output:i`.
    `capture.returned_value` rebuilds what the forward returned from it.
    """

    spec: Any
    leaves: tuple[Any, ...]
    tensors: frozenset[int]


def is_output_key(key: object) -> bool:
    """Whether a store key is one of the model's final outputs (`torch:output:i`), which every check reads."""
    return str(key).startswith(OUTPUT_PREFIX)


@dataclass
class TorchCapture:
    """Everything one reference forward pass left behind; values live in `store`."""

    records: list[TorchRecord]
    module_calls: list[ModuleCall]
    output_records: list[int | None]
    output_keys: list[str]
    paths_known: bool
    store: TensorStore
    device: str = "cpu"
    consumers: dict[int, list[int]] = field(default_factory=dict)
    recovered_paths: dict[int, str] = field(default_factory=dict)
    """Record index -> module path, read from a TorchScript module's graph (its records carry none)."""
    inputs: list[np.ndarray] = field(default_factory=list)
    """The model's inputs, in order (`value` of `input_keys`; kept beside the store)."""
    decomposed: bool = False
    """Whether attention was recorded op by op (torch_attention), not with its fused kernels."""
    ran_attention: bool = False
    """Whether the model called attention (SDPA, MultiheadAttention) while recorded."""
    notes: tuple[str, ...] = ()
    """What the report should say about this recording (attention that ran fused)."""
    returned: Returned | None = None
    """How the forward returned its outputs (an exporter that reads them is given them: `returned_value`)."""
    dtype: str = "float32"
    """What the module computed in ("float32"; "float16"/"bfloat16" for a benchmark; "float64" where asked)."""

    @property
    def input_keys(self) -> list[str]:
        return [f"{INPUT_PREFIX}{i}" for i in range(len(self.inputs))]

    def __post_init__(self) -> None:
        for record in self.records:
            for parent in record.inputs:
                self.consumers.setdefault(parent, []).append(record.index)

    def value(self, key: str) -> np.ndarray:
        """A recorded value (or a derived one already computed into the store), on the host.

        A derived value not computed yet is the pairing's to compute (`Pairing.value`): the
        capture alone does not know how, and says so with a KeyError.
        """
        from trtdiff.backends.store import to_host

        return to_host(self.native(key))

    def holds(self, key: str) -> bool:
        """Whether `value(key)` is at hand: a model input, or a value in the store (not dropped, not streamed)."""
        return key.startswith(INPUT_PREFIX) or key in self.store

    def native(self, key: str) -> Any:
        """A value as it is held: a numpy array, or a torch tensor on the GPU the reference ran on."""
        if key.startswith(INPUT_PREFIX):
            return self.inputs[int(key.removeprefix(INPUT_PREFIX))]
        if key not in self.store and key.startswith(DERIVED_PREFIX):
            raise KeyError(
                f"{key}: no derivation here; a derived value is computed by the pairing that derived it (Pairing.value)"
            )
        if key not in self.store and key.startswith(RECORD_PREFIX) and not key.startswith(OUTPUT_PREFIX):
            raise KeyError(f"{key}: not held (dropped once paired, or streamed); record the model again to read it")
        return self.store.get(key)

    def shape_of(self, key: str) -> tuple[int, ...] | None:
        """The shape of value `key`, also of a value no longer held (None for a derived value not computed)."""
        if key in self.store:
            return tuple(self.store.get(key).shape)
        if key.startswith(INPUT_PREFIX):
            return tuple(self.inputs[int(key.removeprefix(INPUT_PREFIX))].shape)
        if key in self.output_keys:  # an output no longer held: the record that made it
            record = self.output_records[self.output_keys.index(key)]
            return self.records[record].shape if record is not None else None
        index = key.removeprefix(RECORD_PREFIX)
        if key.startswith(RECORD_PREFIX) and index.isdigit() and int(index) < len(self.records):
            return self.records[int(index)].shape
        return None

    def retain(self, keys: Iterable[str]) -> None:
        """Drop from the store every recorded value but `keys` and the model's outputs.

        Called once the pairing knows which values it compares: an op no ONNX tensor stands for
        (a convolution before the BatchNorm the exporter folds into it) is not held any longer,
        nor, when the comparison streams the reference, anything it records again. The records
        themselves (what ran, where, from what) and the derived values stay.
        """
        kept = {*keys, *self.output_keys}
        for record in self.records:
            if record.key not in kept:
                self.store.discard(record.key)

    def path_of(self, record: TorchRecord) -> str | None:
        """The module path `record` ran in: from forward hooks, else recovered from a TorchScript graph."""
        return record.module_path if record.module_path is not None else self.recovered_paths.get(record.index)
