"""Pairing in reduced precision: an FP16 comparison pairs what the FP32 one pairs (issue 38).

An FP16 comparison records the PyTorch reference in float64 after the export, and pairs it with
the converted graph, whose Casts the converter inserted at the FP32 boundary and around the ops
it keeps in FP32. Real models must pass there as they do in FP32, each tensor paired with the
value it stands for.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from arch_models import ARCHITECTURES

import trtdiff
from trtdiff.backends.pytorch.capture import capture
from trtdiff.source.export import export_onnx
from trtdiff.source.inputs import make_inputs
from trtdiff.source.loading import load_model

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def resnet18_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torchvision's resnet18, traced and saved as users ship it (random BatchNorm statistics)."""
    arch = ARCHITECTURES["resnet18"]
    example = torch.from_numpy(make_inputs(["x"], shapes=[arch.shape], seed=0)["x"])
    path = tmp_path_factory.mktemp("resnet18") / "resnet18.pt"
    torch.jit.save(torch.jit.trace(arch.model(), (example,)), str(path))
    return path


def test_an_archive_keeps_its_module_paths_once_exported(resnet18_archive: Path, tmp_path: Path) -> None:
    """The TorchScript exporter inlines the archive's forward in place, for every copy of it (the float64 golden)."""
    loaded = load_model(str(resnet18_archive))
    assert loaded.module is not None
    golden = copy.deepcopy(loaded.module).to(torch.float64)
    feeds = make_inputs(["x"], shapes=[ARCHITECTURES["resnet18"].shape], seed=0)
    before = capture(loaded.module, feeds)
    export_onnx(loaded, feeds, opset=17, exporter="torchscript", path=tmp_path / "resnet18.onnx")
    after = capture(golden, feeds, dtype="float64")
    kinds = [record.kind for record in after.records]
    assert kinds == [record.kind for record in before.records] and len(kinds) == 68
    paths = [after.path_of(record) for record in after.records]
    walked = [before.path_of(record) for record in before.records]
    # the exporter's scope of a module's second call (BasicBlock's relu) is its parent's, as its ONNX node names say
    assert all(a == b or (k == "relu" and b == f"{a}.relu") for a, b, k in zip(paths, walked, kinds, strict=True))
    weighted = [i for i, kind in enumerate(kinds) if kind in ("conv", "batch_norm")]
    assert [paths[i] for i in weighted] == [walked[i] for i in weighted]
    assert paths[:3] == ["conv1", "bn1", "relu"] and "layer2.0.downsample.1" in paths


def test_a_resnet18_archive_passes_at_fp16_with_each_conv_paired_with_its_batchnorm(resnet18_archive: Path) -> None:
    """Its downsample Conv runs after conv2 and is written before it: they were paired the wrong way round."""
    report = trtdiff.compare(
        resnet18_archive, input_shapes=[ARCHITECTURES["resnet18"].shape], precision="fp16", culprit=True
    )
    assert report.passed and not report.culprits, [c.onnx_node for c in report.culprits]
    cosines = {layer.onnx_node: [m.cosine for m in layer.pairs.values()] for layer in report.layers}
    for conv in ("/layer2/0/downsample/0/Conv", "/layer2/0/conv2/Conv"):  # each against its own BatchNorm's value
        assert all(cosine is not None and cosine > 0.9999 for cosine in cosines[conv]), (conv, cosines[conv])


def test_a_unet_resblock_pairs_every_float_tensor_at_fp32_and_fp16() -> None:
    """GroupNorm (Reshape, InstanceNormalization, Reshape, Mul, Add) and SiLU (Sigmoid, Mul), twice: at FP16 the
    pieces were computed in float16 and compared with the float64 golden to 1e-4, and none was kept (8 of 21)."""
    arch = ARCHITECTURES["resblock"]
    model = arch.model()
    for precision, count in (("fp32", 17), ("fp16", 19)):  # FP16: onnxruntime's converter adds two Casts
        report = trtdiff.compare(model, input_shapes=[arch.shape], precision=precision, culprit=True)
        assert report.passed and not report.culprits, precision
        assert report.pairing.float_paired == report.pairing.float_tensors == count, (precision, report.pairing)
    methods = {layer.onnx_node: layer.pairing for layer in report.layers}
    assert methods["/norm1/InstanceNormalization"] == methods["/nonlinearity/Sigmoid"] == "derived"
    casts = [layer for layer in report.layers if layer.op_type == "Cast"]  # the converter's: x to FP16, out to FP32
    assert len(casts) == 2 and all(layer.pairing in ("derived", "output") for layer in casts)
