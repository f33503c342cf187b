"""trtdiff.compare end to end on the example: opset behaviour and hand-mutated ONNX files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from torch import nn

import trtdiff
from trtdiff.errors import BackendError, InputError, OptionError
from trtdiff.report import BackendPair, Report

SHAPE = "1x3x64x64"
ORT = BackendPair("torch", "onnxruntime")


@pytest.fixture(scope="module")
def report_at() -> Callable[[int], Report]:
    cache: dict[int, Report] = {}

    def run(opset: int, model: nn.Module | None = None) -> Report:
        if opset not in cache:
            from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet

            cache[opset] = trtdiff.compare(model or deeplabv3plus_resnet(), input_shapes=[SHAPE], opset=opset)
        return cache[opset]

    return run


def test_opset10_is_pinned_to_the_decoder_resize(report_at: Callable[[int], Report]) -> None:
    report = report_at(10)
    assert not report.passed and report.opset == 10 and report.exporter == "torchscript"
    first = report.first_divergence
    assert first is not None
    assert (first.onnx_node, first.op_type, first.module, str(first.pair)) == (
        "/decoder/Resize",
        "Resize",
        "decoder",
        "torch~onnxruntime",
    )
    assert first.suspects[0] == "/decoder/Resize"
    # The ASPP pooling Resize upsamples a 1x1 map, where every coordinate mode agrees.
    aspp = next(layer for layer in report.layers if layer.onnx_node == "/aspp/branches.4/Resize")
    assert not aspp.diverged
    output = report.outputs[0].pairs[ORT]
    assert output.diverged and 0.99 < output.cosine < 0.9999 and output.max_abs > 1e-3


@pytest.mark.parametrize("opset", [11, 13])
def test_opsets_with_coordinate_modes_agree(report_at: Callable[[int], Report], opset: int) -> None:
    report = report_at(opset)
    assert report.passed and report.first_divergence is None and report.opset == opset
    assert report.pairing.paired_with_torch == report.pairing.float_tensors == len(report.layers)
    assert max(layer.pairs[ORT].max_abs for layer in report.layers) < 1e-5


def _mutated(source: Path, tmp_path: Path, mutate: Callable[[onnx.ModelProto], None]) -> Path:
    model = onnx.load(str(source))
    mutate(model)
    path = tmp_path / "mutated.onnx"
    onnx.save(model, str(path))
    return path


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def _set_attribute(node: onnx.NodeProto, name: str, value: object) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)])


def test_resize_with_changed_coordinate_mode_is_pinned(
    resnet_model: nn.Module, export_example: Callable[..., Path], tmp_path: Path
) -> None:
    path = _mutated(
        export_example(13),
        tmp_path,
        lambda m: _set_attribute(_node(m, "/decoder/Resize"), "coordinate_transformation_mode", "asymmetric"),
    )
    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], onnx=path)
    assert report.exporter == "given" and report.first_divergence is not None
    assert report.first_divergence.onnx_node == "/decoder/Resize"


def test_conv_with_scaled_weights_is_pinned(
    resnet_model: nn.Module, export_example: Callable[..., Path], tmp_path: Path
) -> None:
    def scale(model: onnx.ModelProto) -> None:
        weight_name = _node(model, "/backbone/layer3/conv1/Conv").input[1]
        init = next(i for i in model.graph.initializer if i.name == weight_name)
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.03), weight_name))

    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], onnx=_mutated(export_example(13), tmp_path, scale))
    first = report.first_divergence
    assert first is not None and first.onnx_node == "/backbone/layer3/conv1/Conv" and first.op_type == "Conv"
    assert first.cosine > 0.9999  # a pure scale error: only the magnitude rule catches it


def test_swapped_activation_is_pinned(
    resnet_model: nn.Module, export_example: Callable[..., Path], tmp_path: Path
) -> None:
    def swap(model: onnx.ModelProto) -> None:
        node = _node(model, "/backbone/layer2/relu/Relu")  # ReLU module called twice in the block
        node.op_type = "LeakyRelu"
        node.attribute.append(helper.make_attribute("alpha", 0.2))

    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], onnx=_mutated(export_example(13), tmp_path, swap))
    first = report.first_divergence
    assert first is not None and first.onnx_node == "/backbone/layer2/relu/Relu" and first.op_type == "LeakyRelu"


def test_op_onnxruntime_lacks_is_a_backend_error(
    resnet_model: nn.Module, export_example: Callable[..., Path], tmp_path: Path
) -> None:
    def unknown(model: onnx.ModelProto) -> None:
        node = _node(model, "/backbone/layer1/Add")
        node.domain = "com.example"
        node.op_type = "FancyAdd"
        model.opset_import.append(helper.make_opsetid("com.example", 1))

    with pytest.raises(BackendError, match="FancyAdd") as info:
        trtdiff.compare(resnet_model, input_shapes=[SHAPE], onnx=_mutated(export_example(13), tmp_path, unknown))
    assert "/backbone/layer1/Add" in str(info.value) and "\n" not in str(info.value)


def test_given_onnx_with_other_input_shape_is_refused(
    resnet_model: nn.Module, export_example: Callable[..., Path]
) -> None:
    with pytest.raises(InputError, match="expects 1x3x64x64"):
        trtdiff.compare(resnet_model, input_shapes=["1x3x32x32"], onnx=export_example(13))


@pytest.mark.slow
def test_dynamo_exporter_writes_the_opset_asked_for_or_fails(resnet_model: nn.Module) -> None:
    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=18, exporter="auto")
    assert report.exporter == "dynamo" and report.opset == 18 and report.passed
    # Below 18 the dynamo exporter's conversion can silently write 18: refused before any work, never compared.
    with pytest.raises(OptionError, match="the dynamo exporter writes opsets from 18"):
        trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=13, exporter="dynamo")


def test_save_onnx_keeps_the_file_and_never_overwrites(resnet_model: nn.Module, tmp_path: Path) -> None:
    target = tmp_path / "kept.onnx"
    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=13, save_onnx=target)
    assert target.is_file() and report.onnx_path == str(target)
    with pytest.raises(OptionError, match="exists"):
        trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=13, save_onnx=target)


@pytest.mark.slow
def test_chunked_runs_and_spilled_reference_give_the_same_report(
    resnet_model: nn.Module, report_at: Callable[[int], Report]
) -> None:
    # culprit=True holds the reference (the culprit pass reads it), spilled past the limit; a streamed one is
    # dropped past it instead (tests/pipeline/test_memory_limit.py)
    small = trtdiff.compare(
        resnet_model, input_shapes=[SHAPE], opset=10, chunk_bytes=200_000, memory_bytes=100_000, culprit=True
    )
    assert any("spilled" in note for note in small.notes)
    reference = report_at(10)
    assert [layer.tensor for layer in small.layers] == [layer.tensor for layer in reference.layers]
    assert small.first_divergence == reference.first_divergence


class _TwoInOut(nn.Module):
    """Two inputs, a dict of two outputs, one of them an integer argmax."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3, padding=1)
        self.mask = nn.Conv2d(1, 4, 1)

    def forward(self, image, mask):
        fused = self.image(image) + self.mask(mask)
        return {"logits": fused, "labels": fused.argmax(dim=1)}


def test_several_inputs_and_dict_outputs(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(0)
    model = _TwoInOut().eval()
    report = trtdiff.compare(model, input_shapes=["mask:1x1x8x8", "image:1x3x8x8"], opset=13)
    assert report.passed and report.inputs == {"image": (1, 3, 8, 8), "mask": (1, 1, 8, 8)}
    outputs = {layer.op_type: layer for layer in report.outputs}
    assert set(outputs) == {"Add", "ArgMax"}
    assert outputs["ArgMax"].pairs[ORT].mismatches == 0
    files = tmp_path / "inputs.npz"
    np.savez(files, image=np.ones((1, 3, 8, 8), np.float32), mask=np.zeros((1, 1, 8, 8), np.float32))
    assert trtdiff.compare(model, input_files=[files], opset=13).passed


@pytest.mark.parametrize(
    "step",
    [
        "running PyTorch",
        "exporting to ONNX",
        "preparing backends",
        "running onnxruntime",
        "running each node alone",
        "injecting the reference",
    ],
)
@pytest.mark.slow
def test_an_interrupt_at_any_step_leaves_no_temporary_files(
    resnet_model: nn.Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[str] = []

    def interrupt(text: str) -> None:
        seen.append(text)
        if text.startswith(step):
            raise KeyboardInterrupt

    # opset 10 diverges, so the culprit and attribution steps run; a 1 KB store spills to disk.
    with pytest.raises(KeyboardInterrupt):
        trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=10, memory_bytes=1024, progress=interrupt)
    assert seen[-1].startswith(step)
    assert not list(tmp_path.glob("trtdiff-*"))  # torch may leave its own caches there


def test_the_facade_names_every_library_call(tmp_path: Path) -> None:
    from trtdiff import api
    from trtdiff.hypotheses.inspect import inspect_model
    from trtdiff.hypotheses.sweep import sweep
    from trtdiff.pipeline.build import build
    from trtdiff.pipeline.record import run

    assert (trtdiff.compare, trtdiff.build, trtdiff.run) == (api.compare, build, run)
    assert (trtdiff.inspect_model, trtdiff.sweep) == (inspect_model, sweep)
    with pytest.raises(AttributeError, match="no attribute 'comapre'"):
        trtdiff.comapre  # noqa: B018
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    inspection = trtdiff.inspect_model(path)
    assert inspection.opset == 13 and inspection.exporter == "given"
    recording = trtdiff.run(path, backend="onnxruntime", save=tmp_path / "ort.npz")
    assert recording.backend == "onnxruntime" and recording.tensors == 1
