"""trtdiff.source.factories: `pkg.mod:factory` imported from the current directory, and state_dicts loaded strictly."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from trtdiff.errors import ModelLoadError
from trtdiff.source.factories import (
    FACTORY_RE,
    build_with_state_dict,
    call_factory,
    cwd_on_path,
    few,
    is_exported_program,
)

_counter = itertools.count()

MODEL_SOURCE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 1)
        self.head = nn.Conv2d(width, 2, 1)

    def forward(self, x):
        return self.head(self.conv(x))


def build():
    return Net()


class Holder:
    @staticmethod
    def make():
        return Net(width=3)


instance = Net()
number = 3


def broken():
    raise ValueError("no weights here\\nsecond line")


def not_a_model():
    return {"conv": 1}


def scripted():
    return torch.jit.script(Net())
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """write(source) -> the name of a fresh module holding it, importable from the current directory."""
    monkeypatch.chdir(tmp_path)
    written: list[str] = []

    def write(source: str) -> str:
        name = f"trtdiff_test_models_{next(_counter)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_the_factory_spec_pattern() -> None:
    for spec in ("pkg.mod:build", "mod:Class", "a.b.c:Outer.make", "_m:_f"):
        assert FACTORY_RE.match(spec), spec
    for spec in ("mod", "mod:", ":f", "pkg/mod.py:f", "mod:f()", "1mod:f", "mod::f", "C:\\models\\m.pt"):
        assert not FACTORY_RE.match(spec), spec


def test_a_factory_function_is_called(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    model = call_factory(f"{name}:build", label="MODEL")
    assert isinstance(model, nn.Module) and type(model).__name__ == "Net"
    assert model.conv.out_channels == 4


def test_a_class_a_nested_attribute_and_an_instance(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    assert type(call_factory(f"{name}:Net", label="MODEL")).__name__ == "Net"
    assert call_factory(f"{name}:Holder.make", label="MODEL").conv.out_channels == 3
    module = sys.modules[name]
    assert call_factory(f"{name}:instance", label="MODEL") is module.instance  # a module object is used as is


def test_the_current_directory_is_on_the_path_only_for_the_import(
    workdir: Callable[[str], str], tmp_path: Path
) -> None:
    name = workdir(MODEL_SOURCE)
    assert str(tmp_path) not in sys.path
    call_factory(f"{name}:build", label="MODEL")
    assert str(tmp_path) not in sys.path
    with cwd_on_path():
        assert sys.path[0] == str(tmp_path)
    assert str(tmp_path) not in sys.path


def test_a_package_module_is_imported(workdir: Callable[[str], str], tmp_path: Path) -> None:
    package = workdir("")  # a fresh top-level name, reused as a package folder
    (tmp_path / f"{package}.py").unlink()
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "models.py").write_text(MODEL_SOURCE)
    try:
        assert type(call_factory(f"{package}.models:build", label="MODEL")).__name__ == "Net"
    finally:
        sys.modules.pop(f"{package}.models", None)


def _load_error(spec: str, label: str = "MODEL") -> str:
    with pytest.raises(ModelLoadError) as caught:
        call_factory(spec, label=label)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{label}: ")
    return text


def test_a_malformed_spec_is_refused() -> None:
    assert "not of the form pkg.module:ClassOrFunction" in _load_error("models/net:build")


def test_a_missing_module_names_the_folder(workdir: Callable[[str], str], tmp_path: Path) -> None:
    text = _load_error("trtdiff_no_such_module:build")
    assert f"no module named 'trtdiff_no_such_module' importable from {tmp_path}" in text
    text = _load_error("trtdiff_no_such_pkg.models:build")
    assert "no module named 'trtdiff_no_such_pkg'" in text


def test_a_missing_import_inside_the_module_is_told_apart(workdir: Callable[[str], str]) -> None:
    name = workdir("import trtdiff_not_installed_dependency\n")
    text = _load_error(f"{name}:build")
    assert f"importing {name} failed (ModuleNotFoundError: No module named 'trtdiff_not_installed_dependency')" in text


def test_a_module_that_raises_on_import(workdir: Callable[[str], str]) -> None:
    name = workdir("raise RuntimeError('boom at import')\n")
    assert f"importing {name} raised RuntimeError: boom at import; fix the module" in _load_error(f"{name}:build")


def test_a_missing_attribute(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    assert f"{name} has no attribute 'biuld'" in _load_error(f"{name}:biuld")
    assert "has no attribute 'Holder.missing'" in _load_error(f"{name}:Holder.missing")


def test_a_factory_that_raises_or_returns_something_else(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    assert "calling broken() raised ValueError: no weights here;" in _load_error(f"{name}:broken")
    assert "not_a_model() returned an object of type dict, not an nn.Module" in _load_error(f"{name}:not_a_model")
    assert f"{name}.number is an object of type int, not a class or function" in _load_error(f"{name}:number")


def _state_dict(width: int = 4) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {
        "conv.weight": torch.randn(width, 3, 1, 1),
        "conv.bias": torch.randn(width),
        "head.weight": torch.randn(2, width, 1, 1),
        "head.bias": torch.randn(2),
    }


def test_a_state_dict_is_loaded_into_the_class(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    weights = _state_dict()
    model = build_with_state_dict("w.pt", f"{name}:Net", weights)
    for key, value in weights.items():
        assert torch.equal(model.state_dict()[key], value), key


def test_a_data_parallel_prefix_is_stripped(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    weights = _state_dict()
    model = build_with_state_dict("w.pt", f"{name}:build", {f"module.{k}": v for k, v in weights.items()})
    assert torch.equal(model.head.bias, weights["head.bias"])


def test_missing_and_unexpected_keys_are_named(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    weights = _state_dict()
    del weights["head.bias"]
    weights["extra.weight"] = torch.zeros(1)
    with pytest.raises(ModelLoadError) as caught:
        build_with_state_dict("w.pt", f"{name}:Net", weights)
    text = str(caught.value)
    assert text.startswith(f"w.pt: the state_dict does not fit model_class {name}:Net (")
    assert "missing keys head.bias; unexpected keys extra.weight" in text
    assert "check that model_class names the class" in text


def test_shape_mismatches_are_named(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    with pytest.raises(ModelLoadError, match=r"size mismatch for conv.weight.*check the class's constructor"):
        build_with_state_dict("w.pt", f"{name}:Net", _state_dict(width=5))


def test_a_scripted_module_cannot_take_a_state_dict(workdir: Callable[[str], str]) -> None:
    name = workdir(MODEL_SOURCE)
    with pytest.raises(ModelLoadError, match=r"built an object of type RecursiveScriptModule, not an eager nn\.Module"):
        build_with_state_dict("w.pt", f"{name}:scripted", _state_dict())


def test_few_keys() -> None:
    assert few(["a"]) == "a"
    assert few(["a", "b", "c"]) == "a, b, c"
    assert few(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert few(["a", "b", "c"], n=1) == "a and 2 more"


def test_is_exported_program() -> None:
    assert not is_exported_program(nn.Linear(1, 1))
    assert not is_exported_program({"state_dict": {}})
