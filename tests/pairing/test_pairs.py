"""Pairing PyTorch values with ONNX tensors on the real example, for each exporter and model kind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.pytorch.align import certain_pairs, monotonic, segments
from trtdiff.backends.pytorch.capture import capture
from trtdiff.pairing.pairs import pair
from trtdiff.source.export import export_onnx
from trtdiff.source.loading import from_module
from trtdiff.source.onnx_graph import load_graph, resolve_scope


def _ort_values(path: Path, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    graph = load_graph(path)
    values: dict[str, np.ndarray] = {}
    for chunk in OnnxRuntimeBackend(graph).run(dict(zip(graph.graph_inputs, feeds.values(), strict=True)), names):
        values.update(chunk)
    return values


def _check_all_floats_paired_and_equal(module: nn.Module, path: Path, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    graph = load_graph(path)
    cap = capture(module, feeds)
    result = pair(graph, cap, {n for n, _ in module.named_modules()})
    floats = [t for t in graph.node_outputs if graph.tensor_type(t).is_float and t in graph.data_tensors]
    assert set(floats) <= set(result.pairs), f"unpaired: {sorted(set(floats) - set(result.pairs))}"
    values = _ort_values(path, feeds, list(result.pairs))
    for tensor, torch_pair in result.pairs.items():
        assert np.abs(values[tensor] - cap.value(torch_pair.key)).max() < 1e-5, tensor
    methods: dict[str, int] = {}
    for torch_pair in result.pairs.values():
        methods[torch_pair.method] = methods.get(torch_pair.method, 0) + 1
    return methods


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (("backbone", "stem", "stem.0", "stem.0.0"), "backbone.stem.0.0"),
        (("backbone", "layer1", "relu_1"), "backbone.layer1.relu"),
        (("aspp", "branches.4", "pool"), "aspp.branches.4.pool"),
        (("decoder", "refine", "refine.1", "refine.1.2"), "decoder.refine.1.2"),
        ((), ""),
        (("nosuch",), None),
    ],
)
def test_torchscript_scope_names_resolve_to_module_paths(
    resnet_model: nn.Module, pieces: tuple[str, ...], expected: str | None
) -> None:
    assert resolve_scope(pieces, {n for n, _ in resnet_model.named_modules()}) == expected


def test_torchscript_export_pairs_every_float_tensor_with_bn_folding(
    resnet_model: nn.Module, export_example: Callable[..., Path], example_feeds: dict[str, np.ndarray]
) -> None:
    methods = _check_all_floats_paired_and_equal(resnet_model, export_example(13), example_feeds)
    assert methods["folded"] == 21  # every Conv+BatchNorm pair the exporter folded
    assert methods["op"] >= 25


@pytest.mark.slow
def test_dynamo_export_pairs_every_float_tensor(
    resnet_model: nn.Module, export_example: Callable[..., Path], example_feeds: dict[str, np.ndarray]
) -> None:
    methods = _check_all_floats_paired_and_equal(resnet_model, export_example(18, "dynamo"), example_feeds)
    assert methods["folded"] == 21


@pytest.mark.slow
def test_traced_torchscript_module_pairs_without_module_paths(
    resnet_model: nn.Module, export_example: Callable[..., Path], example_feeds: dict[str, np.ndarray]
) -> None:
    traced = torch.jit.trace(resnet_model, torch.from_numpy(example_feeds["x"]))
    captured = capture(traced, example_feeds)
    assert not captured.paths_known  # no forward hooks: the paths are read from the graph instead
    assert captured.recovered_paths and set(captured.recovered_paths.values()) < {n for n, _ in traced.named_modules()}
    _check_all_floats_paired_and_equal(traced, export_example(13), example_feeds)


@pytest.mark.slow
def test_traced_torchscript_module_without_recovered_paths_pairs_by_kind_and_alignment(
    resnet_model: nn.Module, export_example: Callable[..., Path], example_feeds: dict[str, np.ndarray]
) -> None:
    traced = torch.jit.trace(resnet_model, torch.from_numpy(example_feeds["x"]))
    graph = load_graph(export_example(13))
    captured = capture(traced, example_feeds)
    captured.recovered_paths = {}  # as for a graph whose paths cannot be read
    result = pair(graph, captured, {n for n, _ in traced.named_modules()})
    floats = [t for t in graph.node_outputs if graph.tensor_type(t).is_float and t in graph.data_tensors]
    assert set(floats) <= set(result.pairs)


class _Activations(nn.Module):
    """SiLU and GELU export as several ONNX ops: module outputs pair with the modules, the pieces are derived."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.silu = nn.SiLU()
        self.gelu = nn.GELU()
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gelu(self.silu(self.conv(x))))


def test_decomposed_activations_pair_at_module_outputs_and_derive_their_pieces(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Activations().eval()
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    path = tmp_path / "act.onnx"
    export_onnx(from_module(model), feeds, opset=13, exporter="torchscript", path=path)
    graph = load_graph(path)
    methods = _check_all_floats_paired_and_equal(model, path, feeds)
    # derived: SiLU's Sigmoid; GELU's Div, Erf, Add and first Mul (its last Mul is the module's output)
    assert methods == {"op": 2, "module": 2, "derived": 5}
    result = pair(graph, capture(model, feeds), {n for n, _ in model.named_modules()})
    by_type = {graph.node_of(t).op_type: p.method for t, p in result.pairs.items() if p.method == "derived"}
    assert set(by_type) == {"Sigmoid", "Div", "Erf", "Add", "Mul"}


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("abc", "abc", [(0, 0), (1, 1), (2, 2)]),
        ("cbLcbr", "cbrcbr", [(i, i) for i in range(6)]),  # a swapped op keeps its place
        ("Lr", "rr", [(0, 0), (1, 1)]),  # the same module called twice, one call edited
        ("cbrcbr", "cbcbr", [(0, 0), (1, 1), (3, 2), (4, 3), (5, 4)]),  # a deleted op costs its own pair
        ("r", "rr", []),  # which of two twins was deleted: unknown, so neither
        ("Ar", "rB", []),  # two alignments as good: neither is taken
        ("dEamm", "g", []),  # a decomposed op: no place is certain
        ("", "abc", []),
    ],
)
def test_certain_pairs_are_those_every_best_alignment_makes(left: str, right: str, expected: list) -> None:
    assert certain_pairs(list(left), list(right)) == expected


def test_certain_pairs_respect_what_may_pair() -> None:
    pairable = np.ones((3, 3), dtype=bool)
    pairable[1, 1] = False  # shapes that cannot agree
    assert certain_pairs(list("aXc"), list("aYc"), pairable) == [(0, 0), (2, 2)]
    assert certain_pairs(list("aXc"), list("aYc"), swaps=False) == [(0, 0), (2, 2)]
    assert certain_pairs(list("abc"), list("abc"), max_cells=8) == []


def test_anchors_split_the_free_positions_and_crossing_anchors_are_dropped() -> None:
    assert monotonic([(0, 0), (1, 5), (2, 1), (3, 2), (4, 6)]) == [(0, 0), (2, 1), (3, 2), (4, 6)]
    assert segments([1, 2, 5, 7], [0, 3, 4, 8], [(3, 2), (6, 6)]) == [([1, 2], [0]), ([5], [3, 4]), ([7], [8])]
    assert segments([0, 1], [0, 1], []) == [([0, 1], [0, 1])]
