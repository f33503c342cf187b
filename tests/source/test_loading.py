"""load_model on real files of each format torch and ONNX write, and on factory specs."""

from __future__ import annotations

import argparse
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import trtdiff
from trtdiff.errors import BackendError, ModelLoadError, OptionError
from trtdiff.source.loading import LoadedModel, load_model

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:DeprecationWarning")

TINY_MODULE = """
import torch
from torch import nn

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, image, scale=None):
        return torch.relu(self.bn(self.conv(image)))

def build():
    torch.manual_seed(0)
    return Tiny()

def broken():
    raise ValueError("boom")

def not_a_module():
    return 42

INSTANCE = Tiny()
"""


class TwoInputs(nn.Module):
    """Two tensor inputs, so input names are worth checking."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.conv(image) * mask


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()


def check_same_output(loaded: LoadedModel, reference: nn.Module, *inputs: torch.Tensor) -> None:
    assert loaded.module is not None
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(*inputs), reference(*inputs))


@pytest.fixture
def image() -> torch.Tensor:
    return torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def models_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of tiny models in a fresh current directory; unique name so imports never collide."""
    name = "tinymodels_" + re.sub(r"\W", "_", tmp_path.name)
    (tmp_path / f"{name}.py").write_text(TINY_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # for the test's own imports of the same module
    return name


def test_torchscript(tmp_path: Path, image: torch.Tensor) -> None:
    model = TwoInputs().eval()
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(model), str(path))
    loaded = load_model(str(path))
    assert loaded.kind == "torchscript" and loaded.source == str(path)
    assert loaded.input_names == ("image", "mask")
    assert not loaded.module.training
    mask = torch.ones(1, 4, 8, 8)
    check_same_output(loaded, model, image, mask)


def test_exported_program(tmp_path: Path, image: torch.Tensor) -> None:
    model = TwoInputs().eval()
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (image, torch.ones(1, 4, 8, 8))), str(path))
    loaded = load_model(str(path))
    assert loaded.kind == "exported_program" and loaded.exported_program is not None
    assert loaded.input_names == ("image", "mask")
    check_same_output(loaded, model, image, torch.full((1, 4, 8, 8), 2.0))


def test_exported_program_detected_by_content_not_extension(tmp_path: Path, image: torch.Tensor) -> None:
    model = tiny()
    path = tmp_path / "model.pt"
    torch.export.save(torch.export.export(model, (image,)), str(path))
    assert load_model(str(path)).kind == "exported_program"


def test_exported_program_in_training_mode_is_refused(tmp_path: Path, image: torch.Tensor) -> None:
    path = tmp_path / "train.pt2"
    torch.export.save(torch.export.export(tiny().train(), (image,)), str(path))
    with pytest.raises(ModelLoadError, match=r"training mode.*model\.eval\(\)"):
        load_model(str(path))


@pytest.mark.parametrize("zip_format", [True, False])
def test_pickled_module_needs_trust(tmp_path: Path, image: torch.Tensor, zip_format: bool) -> None:
    model = tiny()
    path = tmp_path / "model.pt"
    torch.save(model, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(ModelLoadError, match="pass trust if you trust it") as info:
        load_model(str(path))
    assert "pickled" in str(info.value) and "\n" not in str(info.value)
    loaded = load_model(str(path), trust=True)
    assert loaded.kind == "eager" and loaded.input_names == ("input",)
    check_same_output(loaded, model, image)


def test_trusted_module_put_in_eval_mode(tmp_path: Path, image: torch.Tensor) -> None:
    model = tiny().train()
    torch.save(model, tmp_path / "model.pt")
    loaded = load_model(str(tmp_path / "model.pt"), trust=True)
    assert not loaded.module.training
    check_same_output(loaded, model.eval(), image)


def test_state_dict_needs_model_class(tmp_path: Path, models_module: str) -> None:
    torch.save(tiny().state_dict(), tmp_path / "weights.pt")
    with pytest.raises(ModelLoadError, match=r"pass model_class pkg\.mod:Class"):
        load_model("weights.pt")


@pytest.mark.parametrize("wrap", ["none", "state_dict", "model_state_dict", "legacy"])
def test_state_dict_with_model_class(tmp_path: Path, models_module: str, image: torch.Tensor, wrap: str) -> None:
    from importlib import import_module

    reference = import_module(models_module).build().eval()
    nn.init.normal_(reference.conv.weight)  # differs from what the class builds by itself
    weights = reference.state_dict()
    if wrap == "legacy":
        torch.save(weights, "weights.pt", _use_new_zipfile_serialization=False)
    else:
        torch.save(weights if wrap == "none" else {wrap: weights, "epoch": 3}, "weights.pt")
    loaded = load_model("weights.pt", model_class=f"{models_module}:Tiny")
    assert loaded.kind == "eager" and loaded.input_names == ("image",)
    assert not loaded.module.training
    check_same_output(loaded, reference, image)


def test_state_dict_wrong_keys(tmp_path: Path, models_module: str) -> None:
    torch.save(tiny().state_dict(), "weights.pt")  # keys 0.weight, 1.running_mean, ...
    with pytest.raises(ModelLoadError, match=r"missing keys bn\..*unexpected keys 0\.") as info:
        load_model("weights.pt", model_class=f"{models_module}:Tiny")
    assert "\n" not in str(info.value)


def test_state_dict_wrong_shape(tmp_path: Path, models_module: str) -> None:
    from importlib import import_module

    weights = import_module(models_module).build().state_dict()
    weights["conv.weight"] = torch.zeros(4, 3, 5, 5)
    torch.save(weights, "weights.pt")
    with pytest.raises(ModelLoadError, match=r"size mismatch for conv\.weight"):
        load_model("weights.pt", model_class=f"{models_module}:Tiny")


def test_checkpoint_with_other_objects_needs_trust(tmp_path: Path, models_module: str) -> None:
    from importlib import import_module

    weights = import_module(models_module).build().state_dict()
    torch.save({"state_dict": weights, "args": argparse.Namespace(lr=0.1)}, "ckpt.pt")
    with pytest.raises(ModelLoadError, match=r"argparse\.Namespace.*pass trust"):
        load_model("ckpt.pt", model_class=f"{models_module}:Tiny")
    assert load_model("ckpt.pt", model_class=f"{models_module}:Tiny", trust=True).kind == "eager"


def test_model_class_with_full_model_is_refused(tmp_path: Path, models_module: str) -> None:
    torch.jit.save(torch.jit.script(tiny()), "model.pt")
    with pytest.raises(OptionError, match="drop model_class"):
        load_model("model.pt", model_class=f"{models_module}:Tiny")


@pytest.mark.parametrize("attr", ["build", "Tiny", "INSTANCE"])
def test_factory_spec(models_module: str, image: torch.Tensor, attr: str) -> None:
    loaded = load_model(f"{models_module}:{attr}")
    assert loaded.kind == "eager" and loaded.input_names == ("image",)
    assert not loaded.module.training
    assert loaded.module(image).shape == (1, 4, 8, 8)


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("broken", r"broken\(\) raised ValueError: boom"),
        ("not_a_module", "not an nn.Module"),
        ("missing", "has no attribute 'missing'"),
    ],
)
def test_factory_errors(models_module: str, attr: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_model(f"{models_module}:{attr}")


def test_factory_module_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match="no module named 'no_such_pkg_xyz'"):
        load_model("no_such_pkg_xyz.models:build")


def test_factory_module_raising_on_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "raises_on_import_mod.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match=r"importing raises_on_import_mod failed.*no_such_dependency_xyz"):
        load_model("raises_on_import_mod:build")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model\.pt: no such file; give a path to a TorchScript"):
        load_model("model.pt")
    with pytest.raises(ModelLoadError, match="is a directory"):
        load_model(str(tmp_path))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"hello, not a model", "not a format trtdiff knows"),
        (b"PK\x03\x04truncated", "truncated or corrupt zip"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=message):
        load_model(str(path))


def test_truncated_torch_save(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    torch.jit.save(torch.jit.script(tiny()), str(good))
    data = good.read_bytes()
    (tmp_path / "bad.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        load_model(str(tmp_path / "bad.pt"))


def test_foreign_zip(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "model.pt", "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(ModelLoadError, match="not one that torch"):
        load_model(str(tmp_path / "model.pt"))


def write_onnx(path: Path) -> None:
    """Relu(x) + w: one real input and one initializer that is also listed as an input."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "w"], ["y"])],
        "tiny",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_onnx(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    write_onnx(path)
    loaded = load_model(str(path))
    assert loaded.kind == "onnx" and loaded.module is None
    assert loaded.onnx_path == path and loaded.input_names == ("x",)
    (tmp_path / "renamed.bin").write_bytes(path.read_bytes())
    assert load_model(str(tmp_path / "renamed.bin")).kind == "onnx"


def test_corrupt_onnx(tmp_path: Path) -> None:
    good = tmp_path / "good.onnx"
    write_onnx(good)
    data = good.read_bytes()
    (tmp_path / "bad.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"bad\.onnx: not a readable ONNX file"):
        load_model(str(tmp_path / "bad.onnx"))


def test_invalid_onnx(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    write_onnx(path)
    model = onnx.load(str(path))
    model.graph.node[0].op_type = "NoSuchOp"
    onnx.save(model, str(path))
    # The checker's finding is a note; refusing is ONNX Runtime's call, with its reason and the node.
    loaded = load_model(str(path))
    assert len(loaded.notes) == 1 and "ONNX checker" in loaded.notes[0]
    with pytest.raises(BackendError, match="NoSuchOp"):
        trtdiff.compare(str(path), backends=["onnxruntime", "onnx-reference"])


def test_loaded_outputs_are_finite(tmp_path: Path, image: torch.Tensor) -> None:
    """A loaded module is callable in eval mode on a fresh input, not only the one it was saved with."""
    torch.jit.save(torch.jit.script(tiny()), str(tmp_path / "m.pt"))
    out = load_model(str(tmp_path / "m.pt")).module(torch.randn(2, 3, 16, 16))
    assert out.shape == (2, 4, 16, 16) and np.isfinite(out.detach().numpy()).all()


def test_from_module(image: torch.Tensor) -> None:
    from trtdiff.source.loading import from_module

    model = tiny().train()
    loaded = from_module(model)
    assert loaded.kind == "eager" and not model.training and loaded.input_names == ("input",)
    program = from_module(torch.export.export(tiny(), (image,)))
    assert program.kind == "exported_program" and program.input_names == ("input",)
    with pytest.raises(ModelLoadError, match="not a model"):
        from_module(42)


def _not_utf8(folder: Path, name: bytes) -> Path:
    """A path whose name holds a byte that is not UTF-8, as the command line hands it over."""
    import os

    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


def test_paths_that_are_not_utf8_are_read_as_they_are(tmp_path: Path, image: torch.Tensor) -> None:
    from trtdiff.source.loading import utf8_path

    model = tiny()
    archive, program, weights, onnx_file = (
        _not_utf8(tmp_path, name) for name in (b"m\xff.pt", b"m\xfe.pt2", b"w\xfd.pt", b"m\xfc.onnx")
    )
    assert not utf8_path(archive) and utf8_path(tmp_path / "model.pt")
    with archive.open("wb") as file:  # torch's C++ writers take only UTF-8 paths: hand them a file
        torch.jit.save(torch.jit.trace(model, image), file)
    with program.open("wb") as file:
        torch.export.save(torch.export.export(model, (image,)), file)
    torch.save(model, str(weights))
    write_onnx(onnx_file)
    for path in (archive, program):
        check_same_output(load_model(str(path)), model, image)
    check_same_output(load_model(str(weights), trust=True), model, image)
    loaded = load_model(str(onnx_file))
    assert loaded.kind == "onnx" and loaded.notes == ()  # the checker reads it too: no false finding
