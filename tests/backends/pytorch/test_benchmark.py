"""The golden (float64) recording and the FP16 benchmark measured against it (backends.pytorch.benchmark)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import trtdiff
from tests.precision_models import SHAPE, Float64Hostile, transformer_block
from trtdiff.analysis.metrics import finite_rel_err
from trtdiff.backends.pytorch.benchmark import benchmark_errors
from trtdiff.backends.pytorch.reference import TorchReference
from trtdiff.backends.store import TensorStore
from trtdiff.source.inputs import make_inputs

FEEDS = make_inputs(["x"], shapes=[SHAPE], seed=0)


def test_the_benchmark_measures_fp16s_error_at_every_op_against_the_float64_golden() -> None:
    model = transformer_block()
    golden = TorchReference(model, dtype="float64")
    with TensorStore() as store:
        recorded = golden.record(FEEDS, store=store)
        assert recorded.dtype == "float64" and recorded.value(recorded.output_keys[0]).dtype == np.float64
        errors, notes = benchmark_errors(golden, recorded, "fp16", finite_rel_err)
    assert not notes
    floats = [r.key for r in recorded.records if r.dtype == "float64"]
    assert set(errors) >= set(floats) and len(floats) == 15  # every op of the block, and its output
    assert all(0 <= e < 5e-3 for e in errors.values()) and max(errors.values()) > 1e-4  # FP16, not float32, rounding
    assert next(model.parameters()).dtype == torch.float32  # the user's module is left as it was


class Inverse(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x @ x.transpose(-1, -2) + torch.eye(x.shape[-1], dtype=x.dtype))


def test_a_model_the_precision_cannot_run_gets_no_figures_and_says_why() -> None:
    """torch.linalg.inv has no bfloat16 kernel; the float16 benchmark on the CPU computes in float32 with
    every value rounded to float16 (RoundedOutputs), so it runs there."""
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 4), dtype=np.float32)}
    golden = TorchReference(Inverse(), dtype="float64")
    with TensorStore() as store:
        recorded = golden.record(feeds, store=store)
        errors, notes = benchmark_errors(golden, recorded, "bf16", finite_rel_err)
        rounded, none = benchmark_errors(golden, recorded, "fp16", finite_rel_err)
    assert errors == {} and len(notes) == 1
    assert notes[0].startswith("bf16: the bfloat16 benchmark of the PyTorch model could not run on cpu")
    assert "judged against bfloat16's rounding alone" in notes[0]
    assert not none and set(rounded) == {r.key for r in recorded.records} | set(recorded.output_keys)
    assert 0 < max(rounded.values()) < 1e-2


def test_a_model_that_cannot_run_in_float64_is_compared_at_fp16_against_its_float32_forward() -> None:
    """The golden is the model in float32 (TorchReference.of): one that runs only in float32 needs no fallback."""
    torch.manual_seed(0)
    report = trtdiff.compare(
        Float64Hostile().eval(), input_shapes=[SHAPE], backends=("torch", "onnx-reference"), precision="fp16"
    )
    assert report.passed, [c.onnx_node for c in report.culprits]
    assert not any("float64" in n for n in report.notes)


def test_a_golden_reference_casts_the_module_once_for_every_recording_derived_from_it() -> None:
    """The float64 copy is made once: the later recordings (streamed, the culprit pass) share it."""
    model = transformer_block()
    golden = TorchReference(model, dtype="float64")
    with TensorStore() as store:
        first = golden.record(FEEDS, store=store)
    again = golden.as_recorded(first)
    assert golden.cast is not None and again.cast is golden.cast and golden.cast is not model
    assert next(golden.cast.parameters()).dtype == torch.float64 and next(model.parameters()).dtype == torch.float32
    assert golden.at("float32").cast is None and golden.at("float32") == TorchReference(model)


class ConvBnStack(nn.Module):
    """Conv-BatchNorm-ReLU x3: on CUDA a float64 golden records native_batch_norm, a float16 run cudnn_batch_norm."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            *(m for i in range(3) for m in (nn.Conv2d(4 if i else 3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch (none here)")
def test_on_a_gpu_every_op_after_a_batch_norm_keeps_its_benchmark_figure() -> None:
    """The float64 golden and the float16 benchmark call different BatchNorm kernels on CUDA (native_batch_norm,
    cudnn_batch_norm): the same kind of op in the same module, so every op after it keeps its figure."""
    model = ConvBnStack().eval()
    feeds = make_inputs(["x"], shapes=["1x3x32x32"], seed=0)
    golden = TorchReference(model, dtype="float64", device="cuda")
    with TensorStore() as store:
        recorded = golden.record(feeds, store=store)
        errors, notes = benchmark_errors(golden, recorded, "fp16", finite_rel_err)
    assert not notes
    floats = [r.key for r in recorded.records if r.dtype == "float64"]
    assert len(floats) == 9 and set(errors) >= set(floats)
