"""trtdiff.backends.pytorch.attention: attention recorded op by op, so the softmax inside it is paired and named.

In eval mode nn.MultiheadAttention and F.scaled_dot_product_attention run fused kernels; the
recording turns them off (checked against a plain forward, with a fallback and a note), and a
fused kernel that still runs is recorded through its decomposition on its own inputs. End to
end: an ONNX file whose attention Softmax was swapped for a Sigmoid names that node, from
eager modules (SDPA and nn.MultiheadAttention) and from TorchScript archives (SDPA; the
MultiheadAttention fast path traced into the graph).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from arch_models import ARCHITECTURES
from culprit_models import edited, export, softmax_to_sigmoid
from torch import nn

import trtdiff
from trtdiff.backends.pytorch.attention import output_gap, script_attention
from trtdiff.backends.pytorch.capture import TorchCapture, capture, run_outputs
from trtdiff.report import BackendPair
from trtdiff.source.inputs import make_inputs

ORT = BackendPair("torch", "onnxruntime")
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]


def _feeds(name: str) -> dict[str, np.ndarray]:
    return make_inputs(["x"], shapes=[ARCHITECTURES[name].shape], seed=0)


def _ops_in(captured: TorchCapture, path: str) -> list[str]:
    return [r.op.removeprefix("aten.").split(".")[0] for r in captured.records if captured.path_of(r) == path]


def _sdp_flags() -> tuple[bool, ...]:
    cuda = torch.backends.cuda
    flags = (cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(), cuda.math_sdp_enabled())
    return (*flags, torch.backends.mha.get_fastpath_enabled())


def test_sdpa_is_recorded_op_by_op_and_the_flags_come_back() -> None:
    model, before = ARCHITECTURES["vit"].model(), _sdp_flags()
    captured = capture(model, _feeds("vit"))
    assert _sdp_flags() == before
    assert _ops_in(captured, "blocks.0.attn") == ["permute", "mul", "mul", "bmm", "_safe_softmax", "bmm"]
    assert not any("flash" in r.op for r in captured.records)
    assert captured.decomposed and captured.ran_attention and captured.notes == ()
    plain = run_outputs(model, list(_feeds("vit").values()))
    assert output_gap([captured.value(k) for k in captured.output_keys], plain) < 1e-6


def test_the_multihead_attention_fast_path_is_off_while_recording() -> None:
    captured = capture(ARCHITECTURES["mha"].model(), _feeds("mha"))
    inside = ["addmm", "mul", "mul", "bmm", "_safe_softmax", "bmm", "permute", "addmm"]
    assert _ops_in(captured, "attn") == [*inside, "module:MultiheadAttention"]  # its output: a transposed view
    assert captured.notes == () and torch.backends.mha.get_fastpath_enabled()


class _Counted(nn.Module):
    """Counts its forward passes."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.inner(x)


def test_the_outputs_are_checked_against_a_plain_forward_only_when_attention_ran() -> None:
    cnn = _Counted(ARCHITECTURES["mobilenetv3"].model())
    assert not capture(cnn, _feeds("mobilenetv3")).ran_attention and cnn.calls == 1
    vit = _Counted(ARCHITECTURES["vit"].model())
    assert capture(vit, _feeds("vit")).ran_attention and vit.calls == 2


class _Sdpa(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(x, x, x)


def test_half_precision_attention_that_the_math_path_moves_is_recorded_fused_with_notes() -> None:
    """In float16 SDPA's math implementation and the CPU flash kernel differ by 3e-4: more than float tolerance.

    The reference is then recorded with the fused kernel (the model's own outputs), whose
    decomposition cannot stand in for it either: two notes say so.
    """
    feeds = {"x": (np.random.default_rng(0).standard_normal((1, 2, 64, 16)) * 3).astype(np.float16)}
    model = _Sdpa().eval()
    captured = capture(model, feeds)
    assert not captured.decomposed and [r.op for r in captured.records] == [
        "aten._scaled_dot_product_flash_attention_for_cpu.default"
    ]
    fallback, fused = captured.notes
    assert fallback.startswith("attention recorded with its fused kernels") and "of their size" in fallback
    assert fused.startswith("attention ran fused in the model itself (aten._scaled_dot_product_flash_attention")
    np.testing.assert_array_equal(captured.value(captured.output_keys[0]), run_outputs(model, [feeds["x"]])[0])


class _FailsDecomposed(nn.Module):
    """Raises on the decomposed path, as SDPA's math implementation does where its score matrix does not fit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.backends.mha.get_fastpath_enabled():
            raise RuntimeError("DefaultCPUAllocator: not enough memory")
        return F.scaled_dot_product_attention(x, x, x)


def test_a_forward_that_fails_on_the_decomposed_path_is_recorded_with_the_fused_kernels() -> None:
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 8, 4)).astype(np.float32)}
    captured = capture(_FailsDecomposed(), feeds)
    assert not captured.decomposed and captured.notes == (
        "attention recorded with its fused kernels: recorded op by op (MultiheadAttention fast path off, SDPA's "
        "math implementation), the forward raised RuntimeError: DefaultCPUAllocator: not enough memory",
    )
    assert "_safe_softmax" in _ops_in(captured, "")  # the kernel itself, through its decomposition


def test_a_fused_kernel_that_still_runs_is_recorded_through_its_decomposition() -> None:
    model = ARCHITECTURES["vit"].model()
    captured = capture(model, _feeds("vit"), attention="fused")
    assert not captured.decomposed and captured.notes == ()
    assert _ops_in(captured, "blocks.1.attn") == ["permute", "mul", "mul", "bmm", "_safe_softmax", "bmm"]
    plain = run_outputs(model, list(_feeds("vit").values()))  # the model went on with the kernel's own output
    np.testing.assert_array_equal(captured.value(captured.output_keys[0]), plain[0])


class _PaddedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 2, batch_first=True)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]


def test_a_fused_kernel_without_a_decomposition_is_named_in_a_note() -> None:
    torch.manual_seed(0)
    model = _PaddedAttention().eval()
    padding = np.zeros((2, 8), bool)
    padding[1, 6:] = True
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8, 32)).astype(np.float32), "padding": padding}
    fused = capture(model, feeds, attention="fused")  # the fast path, with a mask its decomposition does not cover
    assert fused.notes == (
        "attention ran fused in `attn` (aten._native_multi_head_attention) and its decomposition could not stand "
        "in for it: the ops inside it are not paired, so an error inside is named at the nearest recorded node",
    )
    assert "_safe_softmax" not in _ops_in(fused, "attn")
    recorded = capture(model, feeds)  # the fast path off: every op is recorded
    assert recorded.notes == () and "_safe_softmax" in _ops_in(recorded, "attn")


@pytest.mark.parametrize(
    ("recorded", "plain", "gap"),
    [
        ([np.ones(3)], [np.ones(3)], 0.0),
        ([np.array([1.0, 2.0])], [np.array([1.0, 2.5])], 0.2),
        ([np.ones(3)], [np.ones(4)], float("inf")),
        ([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])], 0.0),
        ([np.array([np.nan, 1.0])], [np.array([0.0, 1.0])], float("inf")),
        ([np.array([1, 2])], [np.array([1, 3])], float("inf")),
        ([np.ones(2)], [np.ones(2), np.ones(2)], float("inf")),
    ],
)
def test_output_gap(recorded: list[np.ndarray], plain: list[np.ndarray], gap: float) -> None:
    assert output_gap(recorded, plain) == pytest.approx(gap)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attention")


def _archive(name: str, path: Path, *, no_grad: bool) -> Path:
    """The architecture traced and saved; under no_grad nn.MultiheadAttention's fast path is traced into the graph."""
    example = torch.from_numpy(_feeds(name)["x"])
    with torch.no_grad() if no_grad else torch.enable_grad():
        traced = torch.jit.trace(ARCHITECTURES[name].model(), (example,), check_trace=False)
    torch.jit.save(traced, str(path))
    return path


def test_script_attention_lists_the_attention_nodes_of_an_archive(folder: Path) -> None:
    vit = torch.jit.load(str(_archive("vit", folder / "vit-nodes.pt", no_grad=False)))
    assert script_attention(vit) == [
        ("scaled_dot_product_attention", "blocks.0.attn"),
        ("scaled_dot_product_attention", "blocks.1.attn"),
    ]
    mha = torch.jit.load(str(_archive("mha", folder / "mha-nodes.pt", no_grad=True)))
    assert script_attention(mha) == [("_native_multi_head_attention", "attn")]


ATTENTION_MODULE = {"vit": "blocks.0.attn", "mha": "attn"}  # where the first Softmax runs
CASES = [
    pytest.param("vit", "module", id="vit-sdpa-module"),
    pytest.param("mha", "module", id="multihead-module"),
    pytest.param("vit", "archive", id="vit-sdpa-archive"),
    pytest.param("mha", "fused-archive", id="multihead-fast-path-archive"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "given"), CASES)
def test_a_softmax_turned_sigmoid_is_the_culprit(name: str, given: str, folder: Path) -> None:
    arch = ARCHITECTURES[name]
    source = export(arch.model(), arch.shape, folder / f"{name}.onnx", 17)
    path, softmax = edited(source, folder / f"{name}-sigmoid.onnx", softmax_to_sigmoid)
    model: nn.Module | Path = arch.model()
    if given != "module":
        model = _archive(name, folder / f"{name}-{given}.pt", no_grad=given == "fused-archive")
    clean = trtdiff.compare(model, onnx=source, input_shapes=[arch.shape])
    assert clean.passed and not any("attention" in note for note in clean.notes)
    report = trtdiff.compare(model, onnx=path, input_shapes=[arch.shape])
    assert [c.onnx_node for c in report.culprits] == [softmax]
    culprit = report.culprits[0]
    assert (culprit.op_type, culprit.subgraph, culprit.verdict) == ("Sigmoid", (softmax,), "export")
    layer = next(layer for layer in report.layers if layer.onnx_node == softmax)
    assert (layer.torch_op, layer.module) == ("aten._safe_softmax.default", ATTENTION_MODULE[name])
    assert report.pairing.float_paired == report.pairing.float_tensors
