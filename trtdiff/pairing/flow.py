"""Pairs made by kind and order alone, checked against the data flow on both sides.

Where module paths are unknown (a scripted archive whose graph cannot be walked, an
ExportedProgram), ONNX nodes and recorded ops of one kind pair in order. The orders can
disagree: torchvision's BasicBlock runs its downsample Conv after conv2, the exporter writes it
before, and with every shape equal the two would trade partners and both be reported wrong on a
correct model. Each such pair is checked where both sides say what it reads: the records that
the ONNX node's inputs are paired with (through reshapes and casts, which PyTorch does not
record) against the record's own sources, paired ones only. Pairs whose inputs disagree are
paired again among themselves, kind by kind, by what they read, when that makes exactly one
partner for each; otherwise they are left unpaired, never compared with another op's value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from trtdiff.backends.pytorch.records import INPUT

if TYPE_CHECKING:
    from trtdiff.backends.pytorch.records import TorchCapture, TorchRecord
    from trtdiff.source.onnx_graph import GraphInfo

_PASSING = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "Identity", "Dropout"})
"""ONNX ops that pass a value on without computing (PyTorch records none of them)."""

Reads = tuple[int, ...]
"""What a value is computed from: the record indices (INPUT for a model input) of its data inputs, sorted."""


def regrouped(
    graph: GraphInfo,
    capture: TorchCapture,
    made: Mapping[str, TorchRecord],
    partner: Mapping[str, int],
    kind_of: Callable[[str], str],
    from_inputs: Sequence[bool],
) -> dict[str, TorchRecord | None]:
    """The pairs of `made` (ONNX tensor -> the record it was paired with by order) that the data flow corrects.

    `partner` holds every pair made so far (ONNX tensor -> record index), `kind_of` the kind an
    ONNX tensor was paired as, `from_inputs` which records are computed from the model's inputs
    (kinds.computed_from_inputs). Returns tensor -> its new record, or None to leave it unpaired;
    pairs that agree with the data flow, or that it cannot judge, are not in it.
    """
    paired = set(partner.values())
    conflicts: dict[str, list[str]] = defaultdict(list)
    reads: dict[str, Reads] = {}
    for tensor, record in made.items():
        onnx_reads = _onnx_reads(graph, tensor, partner)
        torch_reads = _torch_reads(capture, record, paired, from_inputs)
        if onnx_reads is not None and torch_reads is not None and onnx_reads != torch_reads:
            conflicts[kind_of(tensor)].append(tensor)
            reads[tensor] = onnx_reads
    found: dict[str, TorchRecord | None] = {}
    for tensors in conflicts.values():
        records = [made[t] for t in tensors]
        by_reads: dict[Reads | None, list[TorchRecord]] = defaultdict(list)
        for record in records:
            by_reads[_torch_reads(capture, record, paired, from_inputs)].append(record)
        chosen = {t: by_reads.get(reads[t], []) for t in tensors}
        unique = all(len(c) == 1 for c in chosen.values())
        if unique and len({c[0].index for c in chosen.values()}) == len(tensors):
            found.update({t: c[0] for t, c in chosen.items()})
        else:
            found.update(dict.fromkeys(tensors))
    return found


def _onnx_reads(graph: GraphInfo, tensor: str, partner: Mapping[str, int]) -> Reads | None:
    """The records the node producing `tensor` reads, through ops that pass values on; None where one has none."""
    node = graph.node_of(tensor)
    if node is None:
        return None
    found: list[int] = []
    for name in (t for t in node.inputs if t in graph.data_tensors):
        while name not in partner and name not in graph.graph_inputs:
            producer = graph.node_of(name)
            data = [t for t in producer.inputs if t in graph.data_tensors] if producer is not None else []
            if producer is None or producer.op_type not in _PASSING or len(data) != 1:
                return None
            name = data[0]
        found.append(partner[name] if name in partner else INPUT)
    return tuple(sorted(found)) if found else None


def _torch_reads(
    capture: TorchCapture, record: TorchRecord, paired: set[int], from_inputs: Sequence[bool]
) -> Reads | None:
    """The paired records (or INPUT) `record` reads (its Conv's, for a BatchNorm folded into it); None where one
    is unpaired."""
    if record.kind == "batch_norm" and record.inputs and record.inputs[0] not in paired:
        record = capture.records[record.inputs[0]]  # the Conv the BatchNorm folded into reads the data
    found = [s for s in record.sources if s is not None and (s == INPUT or from_inputs[s])]
    if not found or any(s != INPUT and s not in paired for s in found):
        return None
    return tuple(sorted(found))
