"""`--capture stats`: every layer by statistics, the region around the first suspicious one in full, the same verdicts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
import torch
from click.testing import CliRunner
from torch import nn

import trtdiff
from tests.cli_output import without_progress
from tests.culprit_models import (
    BLOCK_SHAPE,
    CNN_SHAPE,
    conv_scaled,
    dilate_first_conv,
    edited,
    export,
    layernorm_epsilon,
    node,
    resize_asymmetric,
    scale_initializer,
    second_relu_leaky,
    small_cnn,
    softmax_to_sigmoid,
    transformer_block,
)
from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.report import Report

pytestmark = pytest.mark.slow

BACKENDS = ["torch", "onnxruntime", "onnx-reference"]


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[nn.Module, str]]:
    return {"cnn": (small_cnn(), CNN_SHAPE), "block": (transformer_block(), BLOCK_SHAPE)}


@pytest.fixture(scope="module")
def sources(models: dict[str, tuple[nn.Module, str]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("coarse")
    return {
        "cnn": export(*models["cnn"], folder / "cnn13.onnx", 13),
        "block": export(*models["block"], folder / "block17.onnx", 17),
    }


def _both(model: nn.Module, path: Path, shape: str, **fields: object) -> tuple[Report, Report]:
    """The same comparison in full and by statistics."""
    common = dict(onnx=str(path), input_shapes=[shape], backends=BACKENDS, torch_device="cpu", **fields)
    return trtdiff.compare(model, **common), trtdiff.compare(model, capture="stats", **common)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["cnn", "block"])
def test_a_clean_model_passes_by_statistics_as_it_passes_in_full(
    name: str, models: dict[str, tuple[nn.Module, str]], sources: dict[str, Path]
) -> None:
    model, shape = models[name]
    full, stats = _both(model, sources[name], shape)
    assert full.passed and stats.passed
    assert [x.tensor for x in stats.layers] == [x.tensor for x in full.layers]
    for layer in stats.layers:  # the outputs are compared in full, every other layer by statistics alone
        assert all(m.statistics != layer.is_output for m in layer.pairs.values()), layer.tensor
    assert stats.from_statistics == len(stats.layers) - len(stats.outputs) > 0
    assert any("no layer was suspicious" in note for note in stats.notes)
    for layer, theirs in zip(stats.layers, full.layers, strict=True):  # bounds: never past the full figures
        for pair, bound in layer.pairs.items():
            if bound.statistics and bound.rel_err is not None:
                assert bound.rel_err <= theirs.pairs[pair].rel_err + 1e-12  # type: ignore[operator]


EDITS: dict[str, tuple[str, Callable[[onnx.ModelProto], str]]] = {
    "resize-asymmetric": ("cnn", resize_asymmetric),
    "conv-weight-x1.03": ("cnn", conv_scaled),
    "second-relu-call-leaky": ("cnn", second_relu_leaky),
    "first-conv-dilated": ("cnn", dilate_first_conv),
    "layernorm-epsilon-0.1": ("block", layernorm_epsilon),
    "softmax-to-sigmoid": ("block", softmax_to_sigmoid),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_node_is_named_by_statistics_as_in_full(
    case: str, models: dict[str, tuple[nn.Module, str]], sources: dict[str, Path], tmp_path: Path
) -> None:
    name, edit = EDITS[case]
    model, shape = models[name]
    path, node = edited(sources[name], tmp_path / f"{case}.onnx", edit)
    full, stats = _both(model, path, shape)
    assert not full.passed and not stats.passed
    assert [(c.onnx_node, c.verdict) for c in stats.culprits] == [(c.onnx_node, c.verdict) for c in full.culprits]
    assert stats.culprit is not None and stats.culprit.onnx_node == node
    assert stats.first_divergence is not None and full.first_divergence is not None
    assert stats.first_divergence.tensor == full.first_divergence.tensor
    culprit_layer = next(x for x in stats.layers if x.onnx_node == node)
    assert not any(m.statistics for m in culprit_layer.pairs.values())  # compared in full, local error with it
    assert culprit_layer.local is not None
    assert any("were compared in full" in note for note in stats.notes)


def test_deeplab_at_opset_10_gets_both_resize_culprits_with_most_layers_from_statistics() -> None:
    """The seed's model: the region around the first suspicious layer and the outputs hold both culprits."""
    from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet

    model = deeplabv3plus_resnet()
    common = dict(input_shapes=["1x3x64x64"], opset=10, backends=["torch", "onnxruntime"], torch_device="cpu")
    full = trtdiff.compare(model, **common)  # type: ignore[arg-type]
    stats = trtdiff.compare(model, capture="stats", **common)  # type: ignore[arg-type]
    assert (
        [c.onnx_node for c in stats.culprits] == [c.onnx_node for c in full.culprits] == ["/decoder/Resize", "/Resize"]
    )
    assert [a.miou_recovered for a in stats.attribution] == [a.miou_recovered for a in full.attribution]
    assert stats.from_statistics > len(stats.layers) // 2


def test_the_first_recording_keeps_what_fits_and_the_outputs_writing_nothing_to_disk(
    models: dict[str, tuple[nn.Module, str]], sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a limit far below the recording, the statistics pass spills nothing and still names the edit."""
    from trtdiff.backends.store import TensorStore

    model, shape = models["cnn"]
    path, node = edited(sources["cnn"], tmp_path / "conv.onnx", conv_scaled)
    stores: list[TensorStore] = []
    make = TensorStore.__init__

    def noting(self: TensorStore, *args: object, **kwargs: object) -> None:
        make(self, *args, **kwargs)  # type: ignore[arg-type]
        stores.append(self)

    monkeypatch.setattr(TensorStore, "__init__", noting)
    report = trtdiff.compare(
        model, onnx=str(path), input_shapes=[shape], backends=BACKENDS, capture="stats", memory_bytes="16KB"
    )
    assert report.culprit is not None and report.culprit.onnx_node == node
    first = next(store for store in stores if store.beyond is not None)  # the summarizing recording's
    assert first.dropped > 0 and first._files_written == 0


def test_capture_is_checked_and_named_on_the_command_line() -> None:
    with pytest.raises(OptionError) as caught:
        trtdiff.compare(small_cnn(), input_shapes=[CNN_SHAPE], capture="sample")
    assert caught.value.parameter == "capture"
    result = CliRunner().invoke(main, ["compare", "tests.culprit_models:small_cnn", "--capture", "sample"])
    assert result.exit_code == 2 and "--capture" in without_progress(result.stderr)


def test_a_reference_recorded_on_a_gpu_is_summed_up_there_and_names_the_same_culprit(
    models: dict[str, tuple[nn.Module, str]], sources: dict[str, Path], tmp_path: Path
) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU visible to torch (none here)")
    model, shape = models["cnn"]
    path, node = edited(sources["cnn"], tmp_path / "conv.onnx", conv_scaled)
    common = dict(onnx=str(path), input_shapes=[shape], backends=BACKENDS, torch_device="cuda")
    full = trtdiff.compare(model, **common)  # type: ignore[arg-type]
    stats = trtdiff.compare(model, capture="stats", **common)  # type: ignore[arg-type]
    assert [(c.onnx_node, c.pair) for c in stats.culprits] == [(c.onnx_node, c.pair) for c in full.culprits]
    assert stats.culprit is not None and stats.culprit.onnx_node == node
    clean = trtdiff.compare(
        model, onnx=str(sources["cnn"]), input_shapes=[shape], backends=BACKENDS, torch_device="cuda", capture="stats"
    )
    assert clean.passed


def test_onnx_backends_alone_are_compared_by_statistics(sources: dict[str, Path]) -> None:
    report = trtdiff.compare(str(sources["cnn"]), backends=["onnxruntime", "onnx-reference"], capture="stats")
    assert report.passed and report.backends == ("onnxruntime", "onnx-reference")
    assert report.from_statistics == len(report.layers) - len(report.outputs) > 0


def test_layers_passed_on_statistics_alone_are_screened_never_ok_in_every_format(
    models: dict[str, tuple[nn.Module, str]], sources: dict[str, Path], tmp_path: Path
) -> None:
    """Statistics can miss a fault between the sampled positions (issue 36, item 9): a layer they pass is
    "screened" in the terminal, the checks, Markdown, JUnit, HTML and Model Explorer; the exit code stays 0."""
    from trtdiff.render.explorer import SCREENED, overlays

    out = {name: tmp_path / f"r.{name}" for name in ("json", "md", "xml", "html")}
    flags = ["--json", out["json"], "--markdown", out["md"], "--junit", out["xml"], "--html", out["html"]]
    args = ["compare", "tests.culprit_models:small_cnn", "--onnx", sources["cnn"], "--input-shape", CNN_SHAPE]
    result = CliRunner().invoke(
        main, [*map(str, args), "--capture", "stats", "--torch-device", "cpu", *map(str, flags)]
    )
    assert result.exit_code == 0, result.output
    report = Report.from_json(out["json"].read_text())
    screened = [layer for layer in report.layers if not layer.is_output]
    assert screened and list(report.screened) == screened
    (check,) = [c for c in report.checks if c.scope == "layers"]
    assert check.passed and check.screened == len(screened)
    rows = [line for line in without_progress(result.stdout).splitlines() if line[:3].strip().isdigit()]
    assert len(rows) == len(report.layers)
    for row, layer in zip(rows, report.layers, strict=True):
        assert row.rstrip().endswith("ok" if layer.is_output else "screened"), row
    lines = " ".join(result.stdout.split())
    assert f"PASS: no compared tensor diverges (torch~onnxruntime): {len(report.outputs)} agree" in lines
    assert f"{len(screened)} only screened by statistics" in lines
    assert "| 🔎 | `layers/torch~onnxruntime` |" in out["md"].read_text()
    assert "layers diverge" in out["xml"].read_text() and "<system-out>screened: 0 of" in out["xml"].read_text()
    assert 'class="mark screened">SCREENED' in out["html"].read_text()
    statuses = overlays(report)[0].results
    assert {statuses[layer.onnx_node].value for layer in screened} == {float(SCREENED)}


class _DeepHead(nn.Module):
    """Twelve Conv+ReLU, then a classifier head: pooling, Flatten (not paired) and Linear, far from the first Conv."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            *(m for i in range(12) for m in (nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1), nn.ReLU()))
        )
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.convs(x)), 1))


@pytest.mark.parametrize("limit", [1 << 30, 1 << 20, 1 << 18])
def test_the_culprit_pass_of_a_statistics_region_reads_what_it_kept_at_every_limit(tmp_path: Path, limit: int) -> None:
    """The region's recording keeps what the culprit pass of the final Linear reads: the pooled value before the
    unpaired Flatten (issue 39, item 1: a KeyError, exit 3, under a limit the first recording did not fit in)."""
    torch.manual_seed(0)
    model = _DeepHead().eval()
    source = export(model, "1x3x32x32", tmp_path / "deep.onnx", 17)

    def first_conv_scaled(onnx_model: onnx.ModelProto) -> str:
        target = node(onnx_model, "Conv", "/convs/convs.2/")
        scale_initializer(onnx_model, target.input[1], 1.03)
        return target.name

    path, name = edited(source, tmp_path / "edited.onnx", first_conv_scaled)
    report = trtdiff.compare(
        model, onnx=str(path), input_shapes=["1x3x32x32"], capture="stats", memory_bytes=limit, torch_device="cpu"
    )
    assert not report.passed and report.culprit is not None and report.culprit.onnx_node == name
