"""Pairing survives hand edits: one edited ONNX node costs at most its own pair, from modules and archives.

The example is exported once with trtdiff's exporter; edits swap one Relu for a LeakyRelu
(alpha 0.1) or delete one. The PyTorch side is the eager module, or the same model traced and
saved as a TorchScript archive (loaded by trtdiff from the path), whose module paths are read
from its graph.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from torch import nn

import trtdiff
from trtdiff.backends.pytorch.capture import TorchCapture, capture
from trtdiff.pairing.pairs import Pairing, pair
from trtdiff.source.onnx_graph import load_graph

SHAPE = "1x3x64x64"
FIRST_RELU = "/backbone/layer2/relu/Relu"  # backbone.layer2.relu, first call
SECOND_RELU = "/backbone/layer2/relu_1/Relu"  # the same module, second call
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
EDITED = [FIRST_RELU, SECOND_RELU, "/backbone/stem/stem.0/stem.0.2/Relu", "/aspp/project/project.2/Relu"]


@pytest.fixture(scope="module")
def archive(resnet_model: nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("archive") / "deeplab.pt"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(resnet_model, torch.zeros(1, 3, 64, 64)), str(path))
    return path


@pytest.fixture(scope="module")
def models(resnet_model: nn.Module, archive: Path) -> dict[str, nn.Module | Path]:
    return {"eager": resnet_model, "archive": archive}


@pytest.fixture(scope="module")
def captures(
    resnet_model: nn.Module, archive: Path, example_feeds: dict[str, np.ndarray]
) -> dict[str, tuple[TorchCapture, set[str]]]:
    loaded = torch.jit.load(str(archive))
    return {
        kind: (capture(module, example_feeds), {name for name, _ in module.named_modules()})
        for kind, module in (("eager", resnet_model), ("archive", loaded))
    }


def _edit(source: Path, folder: Path, name: str, how: str) -> Path:
    model = onnx.load(str(source))
    node = next(n for n in model.graph.node if n.name == name)
    if how == "leaky":
        node.op_type = "LeakyRelu"
        node.attribute.append(helper.make_attribute("alpha", 0.1))
    else:  # delete: the Relu's consumers read its input instead
        model.graph.node.remove(node)
        for other in model.graph.node:
            other.input[:] = [node.input[0] if t == node.output[0] else t for t in other.input]
    path = folder / f"{how}_{name.strip('/').replace('/', '_')}.onnx"
    onnx.save(model, str(path))
    return path


def _floats(path: Path) -> list[str]:
    graph = load_graph(path)
    return [t for t in graph.node_outputs if graph.tensor_type(t).is_float and t in graph.data_tensors]


def _pair(path: Path, captured: tuple[TorchCapture, set[str]]) -> Pairing:
    return pair(load_graph(path), *captured)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["eager", "archive"])
@pytest.mark.parametrize("name", EDITED)
def test_a_swapped_relu_leaves_every_other_pair_as_it_was(
    export_example: Callable[..., Path],
    captures: dict[str, tuple[TorchCapture, set[str]]],
    tmp_path: Path,
    kind: str,
    name: str,
) -> None:
    clean = _pair(export_example(13), captures[kind])
    path = _edit(export_example(13), tmp_path, name, "leaky")
    result = _pair(path, captures[kind])
    edited_output = f"{name}_output_0"
    floats = _floats(path)
    assert set(floats) - set(result.pairs) <= {edited_output}
    changed = [t for t in floats if t != edited_output and result.pairs[t].key != clean.pairs[t].key]
    assert changed == []
    # The edited node keeps its place: same PyTorch value, paired though its kind changed.
    assert result.pairs[edited_output].key == clean.pairs[edited_output].key
    assert result.pairs[edited_output].method == "scope"


@pytest.mark.parametrize("kind", ["eager", "archive"])
@pytest.mark.parametrize("name", [FIRST_RELU, SECOND_RELU])
def test_a_deleted_relu_costs_only_its_own_pair(
    export_example: Callable[..., Path],
    captures: dict[str, tuple[TorchCapture, set[str]]],
    tmp_path: Path,
    kind: str,
    name: str,
) -> None:
    clean = _pair(export_example(13), captures[kind])
    path = _edit(export_example(13), tmp_path, name, "delete")
    result = _pair(path, captures[kind])
    floats = _floats(path)
    assert set(floats) <= set(result.pairs)
    assert [t for t in floats if result.pairs[t].key != clean.pairs[t].key] == []
    assert clean.pairs[f"{name}_output_0"].key not in {p.key for p in result.pairs.values()}


@pytest.mark.parametrize("kind", ["eager", "archive"])
def test_the_other_call_of_a_module_called_twice_stays_paired(
    export_example: Callable[..., Path],
    captures: dict[str, tuple[TorchCapture, set[str]]],
    tmp_path: Path,
    kind: str,
) -> None:
    clean = _pair(export_example(13), captures[kind])
    for edited, other in ((FIRST_RELU, SECOND_RELU), (SECOND_RELU, FIRST_RELU)):
        result = _pair(_edit(export_example(13), tmp_path, edited, "leaky"), captures[kind])
        kept = result.pairs[f"{other}_output_0"]
        assert kept.key == clean.pairs[f"{other}_output_0"].key and kept.method == "op"
        assert kept.module_path == "backbone.layer2.relu"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["eager", "archive"])
def test_the_first_divergence_is_the_edited_node(
    models: dict[str, nn.Module | Path], export_example: Callable[..., Path], tmp_path: Path, kind: str
) -> None:
    for name in (FIRST_RELU, SECOND_RELU):
        path = _edit(export_example(13), tmp_path, name, "leaky")
        report = trtdiff.compare(models[kind], onnx=path, input_shapes=[SHAPE])
        assert report.first_divergence is not None and report.first_divergence.onnx_node == name
        assert report.first_divergence.op_type == "LeakyRelu"
        assert report.pairing.paired_with_torch == report.pairing.float_tensors == 51
        assert sum(layer.pairing is not None for layer in report.layers) == 51


@pytest.mark.parametrize("kind", ["eager", "archive"])
def test_clean_exports_pair_every_float_tensor(
    models: dict[str, nn.Module | Path], export_example: Callable[..., Path], kind: str
) -> None:
    report = trtdiff.compare(models[kind], onnx=export_example(13), input_shapes=[SHAPE])
    assert report.passed
    assert report.pairing.paired_with_torch == report.pairing.float_tensors == 51
    assert report.pairing.by_method == {"folded": 21, "op": 30}


def test_an_archive_gets_the_module_paths_of_its_eager_module(
    captures: dict[str, tuple[TorchCapture, set[str]]],
) -> None:
    eager, archive = captures["eager"][0], captures["archive"][0]
    assert not archive.paths_known and {r.module_path for r in archive.records} == {None}
    assert [r.kind for r in archive.records] == [r.kind for r in eager.records]
    assert [archive.path_of(r) for r in archive.records] == [eager.path_of(r) for r in eager.records]
    assert len(archive.recovered_paths) == len(archive.records) == 72


class _Branchy(nn.Module):
    """Control flow around a computing op: the order of ops is the data's, not the graph's."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if bool(y.sum() > 0):
            y = torch.relu(y)
        return y


def test_a_scripted_module_with_control_flow_falls_back_to_kinds_alone() -> None:
    scripted = torch.jit.script(_Branchy().eval())
    feeds = {"x": np.ones((1, 3, 8, 8), np.float32)}
    captured = capture(scripted, feeds)
    assert captured.recovered_paths == {} and captured.records[0].kind == "conv"


class _UpDown(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.act = nn.ReLU()
        self.up = nn.ConvTranspose2d(4, 3, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.act(self.down(x)))


def test_a_traced_conv_transpose_pairs_by_kind(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _UpDown().eval()
    archive = tmp_path / "updown.pt"
    torch.jit.save(torch.jit.trace(model, torch.zeros(1, 3, 8, 8)), str(archive))
    report = trtdiff.compare(archive, input_shapes=["1x3x8x8"], opset=13)
    assert report.passed and report.pairing.paired_with_torch == report.pairing.float_tensors == 3
    assert {layer.op_type: layer.module for layer in report.layers} == {
        "Conv": "down",
        "Relu": "act",
        "ConvTranspose": "up",
    }
