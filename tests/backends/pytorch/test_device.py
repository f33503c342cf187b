"""The PyTorch reference on CUDA (TF32 off unless asked); skipped cleanly where no GPU is visible."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import trtdiff
from trtdiff.errors import OptionError
from trtdiff.report import BackendPair, Thresholds

SHAPE = "1x3x64x64"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch (none here)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when no GPU is visible")
def test_cuda_reference_without_a_gpu_is_a_clear_error(resnet_model: nn.Module) -> None:
    with pytest.raises(OptionError, match="no CUDA GPU"):
        trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=13, torch_device="cuda")


@needs_cuda
def test_cuda_fp32_reference_agrees_with_onnxruntime_cpu(resnet_model: nn.Module) -> None:
    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=13, torch_device="cuda")
    assert report.passed and report.environment["torch_device"] == "cuda" and "gpu" in report.environment
    assert report.pairing.paired_with_torch == report.pairing.float_tensors
    assert next(resnet_model.parameters()).device.type == "cpu"  # moved back after the pass


@needs_cuda
def test_tf32_reference_is_looser_than_fp32(resnet_model: nn.Module) -> None:
    def worst(tf32: bool) -> float:
        report = trtdiff.compare(
            resnet_model,
            input_shapes=[SHAPE],
            opset=13,
            torch_device="cuda",
            tf32=tf32,
            thresholds=Thresholds(min_cosine=0.0, rtol=1.0),
        )
        return max(layer.pairs[BackendPair("torch", "onnxruntime")].rel_err for layer in report.layers)

    assert worst(tf32=True) > 10 * worst(tf32=False)


def test_auto_is_the_gpu_when_torch_sees_one_else_the_cpu() -> None:
    from trtdiff.backends.pytorch.capture import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"


def test_the_report_names_the_device_auto_chose(resnet_model: nn.Module) -> None:
    report = trtdiff.compare(resnet_model, input_shapes=["1x3x32x32"], opset=13, backends=["torch", "onnxruntime"])
    assert report.passed
    assert report.environment["torch_device"] == ("cuda" if torch.cuda.is_available() else "cpu")


@needs_cuda
def test_gpu_reference_is_compared_on_the_gpu_and_matches_the_cpu_figures(
    resnet_model: nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held on the GPU (never recorded again), compared in one chunk or several, gives the CPU reference's figures."""
    from trtdiff.analysis.engine import StreamedValues

    kwargs = {"input_shapes": [SHAPE], "opset": 13, "backends": ["torch", "onnxruntime"]}
    cpu = trtdiff.compare(resnet_model, torch_device="cpu", **kwargs)
    monkeypatch.setattr(StreamedValues, "stream", lambda *_: pytest.fail("a GPU reference is held, not streamed"))
    for chunk in (1 << 30, 1 << 16):
        gpu = trtdiff.compare(resnet_model, torch_device="cuda", chunk_bytes=chunk, **kwargs)
        assert gpu.passed and [layer.tensor for layer in gpu.layers] == [layer.tensor for layer in cpu.layers]
        for mine, theirs in zip(gpu.layers, cpu.layers, strict=True):
            pair = BackendPair("torch", "onnxruntime")
            assert mine.pairs[pair].cosine == pytest.approx(theirs.pairs[pair].cosine, abs=1e-5)


def _project_models() -> list[tuple[str, Callable[[], nn.Module], str]]:
    from tests.arch_models import ARCHITECTURES
    from tests.culprit_models import (
        BLOCK_SHAPE,
        CHAIN_SHAPE,
        CNN_SHAPE,
        MLP_SHAPE,
        conv_chain,
        conv_mlp,
        small_cnn,
        transformer_block,
    )
    from trtdiff.cli.demo import EXAMPLES, build_example

    found = [(name, lambda name=name: build_example(name), "1x3x128x128") for name in EXAMPLES]
    found += [(name, a.model, a.shape) for name, a in ARCHITECTURES.items()]
    found += [("small_cnn", small_cnn, CNN_SHAPE), ("transformer_block", transformer_block, BLOCK_SHAPE)]
    found += [("conv_mlp", conv_mlp, MLP_SHAPE), ("conv_chain", conv_chain, CHAIN_SHAPE)]
    return found


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize(("name", "build", "shape"), _project_models(), ids=[m[0] for m in _project_models()])
def test_the_projects_clean_models_stay_clean_with_the_gpu_reference(
    name: str, build: Callable[[], nn.Module], shape: str
) -> None:
    report = trtdiff.compare(build(), input_shapes=[shape], opset=17, backends=["torch", "onnxruntime"])
    assert report.environment["torch_device"] == "cuda"
    assert report.passed, (name, report.first_divergence)
