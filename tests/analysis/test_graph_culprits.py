"""Culprits where the ONNX graph is not one PyTorch op per node (tests/graph_models.py).

A reflect Pad, a Round before an int64 Cast, an ArgMax, a GroupNorm written as
InstanceNormalization + Mul + Add: each hand edit must be named at its own node (or, inside a
decomposition, at the node that produces the region's output, with the region's nodes listed),
and each clean twin must pass. Integer tensors are paired where PyTorch computed them and
compared exactly; the local error feeds the reference's integers, so an integer-path fault is
named where it starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from culprit_models import edited as edited_copy
from graph_models import CASES, Case, export_case

import trtdiff
from trtdiff.render.terminal import pairing_line
from trtdiff.report import BackendPair, Report

ORT = BackendPair("torch", "onnxruntime")
FLAT = [case for case in CASES if not case.scripted]  # the If cases are another item of the issue


def _compare(case: Case, path: Path) -> Report:
    torch.manual_seed(0)
    model = case.build().eval()
    return trtdiff.compare(model, onnx=str(path), input_shapes=(case.shape,), backends=("torch", "onnxruntime"))


def _describe(report: Report) -> str:
    return "\n".join(
        f"{layer.onnx_node} {layer.pairing} diverged={layer.pairs[ORT].diverged} "
        f"local={layer.local[ORT].diverged if layer.local else None}"
        for layer in report.layers
    )


@pytest.mark.parametrize("case", FLAT, ids=[case.name for case in FLAT])
def test_the_edit_is_the_culprit_and_the_clean_twin_passes(case: Case, tmp_path: Path) -> None:
    clean = export_case(case, tmp_path)
    assert _compare(case, clean).passed
    path, expected = edited_copy(clean, tmp_path / f"{case.name}-edit.onnx", case.edit)
    report = _compare(case, path)
    assert not report.passed
    assert [c.onnx_node for c in report.culprits] == [expected], _describe(report)
    if case.name.startswith("groupnorm"):  # the composite as a whole: its output node, its region listed
        (culprit,) = report.culprits
        assert culprit.subgraph[0] == expected and any("InstanceNormalization" in n for n in culprit.subgraph)


def test_integer_tensors_are_paired_and_compared_exactly(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "argmax")
    path, node = edited_copy(export_case(case, tmp_path), tmp_path / "argmin.onnx", case.edit)
    report = _compare(case, path)
    layer = next(layer for layer in report.layers if layer.onnx_node == node)
    assert layer.dtype == "int64" and layer.torch_op == "aten.argmax.default"
    assert layer.pairs[ORT].diverged and (layer.pairs[ORT].mismatches or 0) > 0
    after = [other for other in report.layers if other.index > layer.index]
    assert after and all(other.local is not None and not other.local[ORT].diverged for other in after)


def test_a_truncating_cast_is_named_and_the_cast_after_it_is_fed_the_reference(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "cast-truncates")
    path, node = edited_copy(export_case(case, tmp_path), tmp_path / "trunc.onnx", case.edit)
    report = _compare(case, path)
    casts = [layer for layer in report.layers if layer.op_type == "Cast"]
    assert [layer.dtype for layer in casts] == ["int64", "float32"], _describe(report)
    assert casts[0].onnx_node == node and casts[0].local is not None and casts[0].local[ORT].diverged
    assert casts[1].local is not None and not casts[1].local[ORT].diverged


def test_the_pairing_counts_pairs_made_on_structure_alone(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "groupnorm")
    summary = _compare(case, export_case(case, tmp_path)).pairing
    assert summary.float_paired == 8 and summary.by_method.get("derived") == 4
    assert summary.structure_only == 4  # the Conv, ReLU, head and the GroupNorm module's output
    assert "(4 derived, 1 module, 3 op; 4 on structure alone)" in pairing_line(summary, 0)
