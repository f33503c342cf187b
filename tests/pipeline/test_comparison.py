"""trtdiff.pipeline.comparison: one comparison closes every backend it opened, on success and on error."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch
from culprit_models import ConvReluHead
from torch import nn

import trtdiff
from trtdiff.errors import ModelRunError, OptionError
from trtdiff.options import CompareOptions
from trtdiff.pipeline.comparison import Comparison, compare_once

SHAPE = "1x3x8x8"
BACKENDS = ["torch", "onnxruntime", "onnx-reference"]


@pytest.fixture(scope="module")
def net() -> ConvReluHead:
    torch.manual_seed(0)
    return ConvReluHead(flat=True).eval()


def test_a_comparison_closes_every_backend_it_opened(net: ConvReluHead, opened_backends: list) -> None:
    report = trtdiff.compare(net, input_shapes=[SHAPE], opset=13, backends=BACKENDS, culprit=True)
    assert report.passed and report.backends == tuple(BACKENDS)
    names = [b.name for b in opened_backends]
    # the comparison's two, then each pair's candidate on the culprit step's shadow model:
    # torch~onnxruntime, torch~onnx-reference, onnxruntime~onnx-reference
    assert names == ["onnxruntime", "onnx-reference", "onnxruntime", "onnx-reference", "onnx-reference"]
    assert all(b.closed for b in opened_backends)


def test_a_late_option_error_closes_the_backends(net: ConvReluHead, opened_backends: list) -> None:
    with pytest.raises(OptionError) as caught:  # found only once the outputs were compared: no (N, C, H, W) output
        trtdiff.compare(net, input_shapes=[SHAPE], opset=13, backends=BACKENDS, min_miou=0.5)
    assert caught.value.parameter == "min_miou"
    assert len(opened_backends) == 2 and all(b.closed for b in opened_backends)


def test_a_failing_culprit_step_closes_its_backends_and_the_comparisons(
    net: ConvReluHead, opened_backends: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtdiff.analysis import culprits

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the local run failed")

    monkeypatch.setattr(culprits, "_run_local", failing)
    with pytest.raises(RuntimeError, match="the local run failed"):
        trtdiff.compare(net, input_shapes=[SHAPE], opset=13, backends=BACKENDS, culprit=True)
    assert len(opened_backends) == 3  # the comparison's two and the shadow model's ONNX Runtime it failed on
    assert all(b.closed for b in opened_backends)


def test_compare_once_hands_back_the_onnx_model_and_never_simplifies(net: ConvReluHead) -> None:
    options = CompareOptions().with_fields(input_shapes=[SHAPE], opset=13, backends=BACKENDS[:2], simplify=True)
    compared = compare_once(net, options)
    assert isinstance(compared, Comparison) and isinstance(compared.onnx_model, onnx.ModelProto)
    assert compared.report.simplified is None  # simplify is the facade's (trtdiff.compare), not the comparison's
    assert len(compared.onnx_model.graph.node) == len(compared.report.layers) + len(compared.report.not_compared)


def _figures(report: trtdiff.Report) -> list[tuple[str, tuple[int, ...], dict[str, tuple[float, ...]]]]:
    return [
        (
            layer.tensor,
            layer.shape,
            {
                str(p): (m.cosine, m.max_abs, m.mean_abs, m.rel_err, m.nan_ref, m.nan_cand)
                for p, m in layer.pairs.items()
            },
        )
        for layer in report.layers
    ]


@pytest.mark.slow
def test_a_streamed_reference_gives_the_figures_of_a_held_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch recorded again and compared as it runs, the backends' chunks fetched in lockstep (one chunk or
    many), or held whole (a recording lent to a sweep): the same report every way.

    On the CPU: a reference recorded on a GPU is held there (tests/backends/pytorch/test_device.py).
    """
    from tests.culprit_models import transformer_block
    from trtdiff.analysis.engine import StreamedValues
    from trtdiff.pipeline.reference import SharedRecording

    streams: list[int] = []
    original = StreamedValues.stream
    monkeypatch.setattr(StreamedValues, "stream", lambda self, *a: streams.append(1) or original(self, *a))
    model = transformer_block()  # derived values (LayerNorm, GELU) and attention recorded op by op
    kwargs = {"input_shapes": ["1x16x32"], "opset": 17, "backends": BACKENDS, "culprit": False, "torch_device": "cpu"}
    streamed = trtdiff.compare(model, **kwargs)
    chunked = trtdiff.compare(model, chunk_bytes=4096, **kwargs)  # many chunks: the graph runs in segments
    with SharedRecording() as lent:
        held = compare_once(model, CompareOptions().with_fields(**kwargs), shared=lent).report
    assert streamed.passed and chunked.passed and held.passed and streams == [1, 1]  # the lent one held
    assert _figures(streamed) == _figures(chunked) == _figures(held)
    assert streamed.samples[0].outputs == chunked.samples[0].outputs == held.samples[0].outputs


class Counted(nn.Module):
    """A Conv and ReLU that count their forwards (the benchmark runs a copy, which counts its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.forwards = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        return torch.relu(self.conv(x))


@pytest.mark.parametrize(("precision", "forwards"), [("fp32", 3), ("fp16", 2)])
def test_fp16_holds_sample_0s_reference_for_its_layer_check_instead_of_recording_it_twice_more(
    precision: str, forwards: int
) -> None:
    """FP32 streams sample 0 (recorded to pair, the export traced, recorded again while compared). FP16 runs each
    node alone on every paired value in its layer check: those values are held from the first recording (the
    export reads its outputs), where streaming recorded the model twice more for the same values (4 forwards)."""
    torch.manual_seed(0)
    model = Counted().eval()
    report = trtdiff.compare(model, input_shapes=[SHAPE], precision=precision, backends=["torch", "onnxruntime"])
    assert report.passed and model.forwards == forwards


@pytest.mark.slow
def test_culprits_are_named_after_a_streamed_comparison(tmp_path: Path) -> None:
    """The culprit pass reads the reference's values: sample 0 is recorded again for it, and finds the edit."""
    from tests.culprit_models import dilate_first_conv, edited, export, small_cnn

    model = small_cnn()
    source = export(model, "1x3x32x32", tmp_path / "cnn.onnx", 13)

    path, name = edited(source, tmp_path / "edited.onnx", dilate_first_conv)
    report = trtdiff.compare(model, onnx=str(path), input_shapes=["1x3x32x32"], backends=["torch", "onnxruntime"])
    assert not report.passed and report.culprit is not None and report.culprit.onnx_node == name


@pytest.mark.slow
def test_a_model_whose_forward_fails_says_so_though_the_export_runs_first() -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(5, -1)

    with pytest.raises(ModelRunError, match="the model's forward raised RuntimeError"):
        trtdiff.compare(Broken(), input_shapes=[SHAPE], backends=["torch", "onnxruntime"])


def test_another_networks_onnx_file_is_refused_in_one_line_not_given_a_culprit(tmp_path: Path) -> None:
    """compare MODEL --onnx FILE where FILE is another network's export: exit 2 before anything is compared
    (issue 36, item 8), while the model's own export, given the same way, passes."""
    from arch_models import ARCHITECTURES
    from click.testing import CliRunner

    from trtdiff.cli.app import main
    from trtdiff.errors import OnnxFileError

    vit, convnext = ARCHITECTURES["vit"].model(), ARCHITECTURES["convnext"].model()
    own, other = tmp_path / "convnext.onnx", tmp_path / "vit.onnx"
    trtdiff.compare(vit, input_shapes=["1x3x32x32"], save_onnx=str(other), culprit=False)
    assert trtdiff.compare(convnext, input_shapes=["1x3x32x32"], save_onnx=str(own), culprit=False).passed
    assert trtdiff.compare(convnext, onnx=str(own), culprit=False).passed
    with pytest.raises(
        OnnxFileError, match="does not look like an export of this model: 2 of 82 float tensors it computes"
    ):
        trtdiff.compare(convnext, onnx=str(other))
    with pytest.raises(OnnxFileError, match="does not look like an export of this model"):
        trtdiff.compare(convnext, onnx=str(other), precision="fp16")  # a converted graph pairs as its FP32 one does
    assert trtdiff.compare(convnext, onnx=str(own), precision="fp16", culprit=False).passed
    result = CliRunner().invoke(main, ["compare", "arch_models:ConvNeXt", "--onnx", str(other)])
    errors = [line for line in result.stderr.splitlines() if not line.startswith("trtdiff: ")]
    assert result.exit_code == 2 and errors == [
        f"Error: --onnx {other}: does not look like an export of this model: 2 of 82 float tensors it computes pair "
        "with a PyTorch value (an export of it pairs at least half); give the file exported from this model, or "
        "leave the option out and trtdiff exports it"
    ]


def test_a_quantized_export_of_the_model_is_not_taken_for_another_networks_file() -> None:
    """ModelOpt's FP8 file of the LLM-like block holds 46 float8 Q/DQ outputs that pair with nothing: they are not
    counted, and the file is compared (it was refused as another network's: 30 of 76 float tensors paired)."""
    from modelopt_models import llm_block

    fixture = Path(__file__).parents[1] / "fixtures" / "modelopt" / "llm_ts17_fp8.onnx"
    report = trtdiff.compare(llm_block(), onnx=str(fixture), culprit=False)
    assert report.pairing.float_paired >= 30
