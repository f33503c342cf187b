"""trtdiff.source.export on a tiny eager model: each exporter, the opset read back, and the errors."""

from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from trtdiff.backends.pytorch.capture import capture, returned_value
from trtdiff.backends.store import TensorStore
from trtdiff.errors import ExportError, OptionError
from trtdiff.source.export import (
    DYNAMO_NATIVE_OPSET,
    TORCHSCRIPT_MAX_OPSET,
    ExportResult,
    choose_exporter,
    export_onnx,
    reads_returned,
)
from trtdiff.source.loading import LoadedModel, from_module


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x)) * 2.0


@pytest.fixture(scope="module")
def tiny() -> nn.Module:
    torch.manual_seed(0)
    return _Tiny().eval()


@pytest.fixture(scope="module")
def loaded(tiny: nn.Module) -> LoadedModel:
    return from_module(tiny)


@pytest.fixture(scope="module")
def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)}


@pytest.fixture(scope="module")
def traced(tiny: nn.Module, feeds: dict[str, np.ndarray]) -> LoadedModel:
    return from_module(torch.jit.trace(tiny, torch.from_numpy(feeds["x"])))


def _ort_output(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _expected(tiny: nn.Module, feeds: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return tiny(torch.from_numpy(feeds["x"])).numpy()


def test_torchscript_export_at_opset_13(
    tiny: nn.Module, loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "ts13.onnx"
    result = export_onnx(loaded, feeds, opset=13, exporter="torchscript", path=path)
    assert result == ExportResult(path=path, exporter="torchscript", opset=13)
    model = onnx.load(str(path))
    assert [(e.domain, e.version) for e in model.opset_import if e.domain in ("", "ai.onnx")] == [("", 13)]
    assert [i.name for i in model.graph.input] == ["x"]
    np.testing.assert_allclose(_ort_output(path, feeds), _expected(tiny, feeds), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_dynamo_export_at_opset_18(
    tiny: nn.Module, loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    path = tmp_path / "dyn18.onnx"
    result = export_onnx(loaded, feeds, opset=18, exporter="dynamo", path=path)
    assert result == ExportResult(path=path, exporter="dynamo", opset=18)
    model = onnx.load(str(path))
    assert {e.version for e in model.opset_import if e.domain in ("", "ai.onnx")} == {18}
    assert [i.name for i in model.graph.input] == ["x"]
    np.testing.assert_allclose(_ort_output(path, feeds), _expected(tiny, feeds), rtol=1e-5, atol=1e-6)


def test_auto_export_below_18_uses_torchscript(
    loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    result = export_onnx(loaded, feeds, opset=11, exporter="auto", path=tmp_path / "auto11.onnx")
    assert (result.exporter, result.opset) == ("torchscript", 11)


@pytest.mark.parametrize(
    ("opset", "expected"),
    [(7, "torchscript"), (13, "torchscript"), (17, "torchscript"), (18, "dynamo"), (21, "dynamo")],
)
def test_choose_exporter_auto_for_an_eager_model(loaded: LoadedModel, opset: int, expected: str) -> None:
    assert loaded.kind == "eager"
    assert choose_exporter("auto", opset, loaded) == expected


@pytest.mark.parametrize("opset", [13, 18, 20])
def test_choose_exporter_auto_for_torchscript_is_always_torchscript(traced: LoadedModel, opset: int) -> None:
    assert traced.kind == "torchscript"
    assert choose_exporter("auto", opset, traced) == "torchscript"


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("opset", [13, 18])
def test_choose_exporter_keeps_an_explicit_choice(loaded: LoadedModel, exporter: str, opset: int) -> None:
    assert choose_exporter(exporter, opset, loaded) == exporter


def test_choose_exporter_rejects_an_unknown_exporter(loaded: LoadedModel) -> None:
    with pytest.raises(OptionError, match="tensorflow"):
        choose_exporter("tensorflow", 13, loaded)


@pytest.mark.slow
def test_dynamo_exporter_below_its_native_opset_is_refused_before_exporting(
    loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    # torch 2.13's dynamo exporter, asked for 13, fails to convert down and silently writes 18: one rule
    # (trtdiff.options.exporters) refuses that choice here, in the options and in a sweep alike.
    with pytest.raises(OptionError) as caught:
        export_onnx(loaded, feeds, opset=13, exporter="dynamo", path=tmp_path / "dyn13.onnx")
    assert f"writes opsets from {DYNAMO_NATIVE_OPSET}" in str(caught.value) and "torchscript or auto" in str(
        caught.value
    )
    assert not (tmp_path / "dyn13.onnx").exists()


@pytest.mark.parametrize("opset", [0, -1])
def test_torchscript_exporter_cannot_write_a_non_opset(
    loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path, opset: int
) -> None:
    with pytest.raises(OptionError, match=rf"opset {opset}: no exporter writes it \(TorchScript: opsets 7-20"):
        export_onnx(loaded, feeds, opset=opset, exporter="torchscript", path=tmp_path / "ts.onnx")


def test_torchscript_exporter_below_its_first_opset_is_refused(
    loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    with pytest.raises((OptionError, ExportError), match=r"\b5\b"):
        export_onnx(loaded, feeds, opset=5, exporter="torchscript", path=tmp_path / "ts5.onnx")


def test_torchscript_exporter_above_its_last_opset_is_refused(
    loaded: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    opset = TORCHSCRIPT_MAX_OPSET + 1
    path = tmp_path / "ts_too_new.onnx"
    with pytest.raises(OptionError, match=str(opset)):
        export_onnx(loaded, feeds, opset=opset, exporter="torchscript", path=path)
    assert not path.exists()


def test_torchscript_archive_cannot_use_the_dynamo_exporter(
    traced: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    with pytest.raises(OptionError, match="dynamo"):
        export_onnx(traced, feeds, opset=DYNAMO_NATIVE_OPSET, exporter="dynamo", path=tmp_path / "x.onnx")


@pytest.mark.slow
def test_export_of_a_model_that_fails_raises_export_error(feeds: dict[str, np.ndarray], tmp_path: Path) -> None:
    class _Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(7, -1)  # 50 elements do not split into 7 rows

    with pytest.raises(ExportError, match="torchscript"):
        export_onnx(from_module(_Broken()), feeds, opset=13, exporter="torchscript", path=tmp_path / "b.onnx")


class _RmsNorm(nn.Module):
    """The TorchScript exporter has no rms_norm; the dynamo exporter has."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.rms_norm(x, (x.shape[-1],))


class _DataDependent(nn.Module):
    """torch.export cannot branch on a value; tracing (the TorchScript exporter) can."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


class _Eigh(nn.Module):
    """Neither exporter has an ONNX form of eigh."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigh(x @ x.transpose(-1, -2))[0]


def _export_error(model: nn.Module, opset: int, exporter: str, path: Path) -> str:
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)}
    with pytest.raises(ExportError) as caught:
        export_onnx(from_module(model), feeds, opset=opset, exporter=exporter, path=path)
    assert not path.exists()
    return caught.value.render(lambda name: f"--{name}")


@pytest.mark.slow
def test_advice_after_a_failed_export_was_tried_and_works(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    message = _export_error(_RmsNorm(), 17, "torchscript", tmp_path / "rms.onnx")
    assert message == (
        "the torchscript exporter has no ONNX form of aten::rms_norm at opset 17; --exporter dynamo at --opset 18 "
        "exports it"
    )
    feeds = {"x": np.ones((1, 2, 4, 4), np.float32)}
    export_onnx(from_module(_RmsNorm()), feeds, opset=18, exporter="dynamo", path=tmp_path / "rms18.onnx")
    message = _export_error(_DataDependent(), 18, "dynamo", tmp_path / "dd.onnx")
    assert message.startswith("ONNX export with the dynamo exporter at opset 18 failed: Could not guard on data-")
    branch = inspect.getsourcelines(_DataDependent.forward)[1] + 1  # the user's line that torch.export refused
    assert message.endswith(f"(at test_export.py:{branch}); --exporter torchscript at --opset 18 exports it")
    captured = capfd.readouterr()  # the exporters print graphs and banners from C++: none reach the terminal
    assert captured.out == "" and captured.err == ""


@pytest.mark.slow
def test_advice_never_loops_between_exporters(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    for exporter, opset, other in (("torchscript", 17, "dynamo"), ("dynamo", 18, "torchscript")):
        message = _export_error(_Eigh(), opset, exporter, tmp_path / "eigh.onnx")
        assert "\n" not in message and "exports it" not in message
        assert f"the {other} exporter at opset 18 fails too (no ONNX form of aten" in message
        assert message.endswith("change that part of the model")
    captured = capfd.readouterr()
    assert "Torch IR graph" not in captured.out + captured.err


def test_out_of_range_opsets_name_the_range_each_exporter_writes(
    loaded: LoadedModel, traced: LoadedModel, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    newest = onnx.defs.onnx_opset_version()
    cases = [
        (
            loaded,
            99,
            "auto",
            f"no exporter writes it (TorchScript: opsets 7-20, dynamo: 18-{newest})",
        ),
        (loaded, 21, "torchscript", f"writes opsets 7-20; use exporter dynamo (opsets 18-{newest})"),
        (traced, 99, "auto", "a TorchScript archive is exported by the TorchScript exporter, which writes opsets 7-20"),
        (traced, 18, "dynamo", "the dynamo exporter cannot read a TorchScript archive; use exporter torchscript"),
    ]
    for model, opset, exporter, expected in cases:
        with pytest.raises(OptionError) as caught:
            export_onnx(model, feeds, opset=opset, exporter=exporter, path=tmp_path / "x.onnx")
        assert expected in str(caught.value)
        if model is traced:
            assert "use exporter dynamo" not in str(caught.value)


class _Nested(nn.Module):
    """Returns a tuple holding a list, and a bfloat16 tensor: what an exporter must see as it was."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        y = self.conv(x)
        return y, [y.relu(), y * 2], (y * 3).to(torch.bfloat16)


class _Convolutions(TorchDispatchMode):
    """Counts the convolutions run while it is on (an archive's forward runs one)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.overloadpacket in (torch.ops.aten.convolution, torch.ops.aten._convolution):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _scripted_nested() -> LoadedModel:
    torch.manual_seed(0)
    return from_module(torch.jit.script(_Nested().eval()))


@pytest.mark.parametrize("spilled", [False, True])
def test_an_archive_is_exported_from_its_recording_without_running_it_again(
    feeds: dict[str, np.ndarray], tmp_path: Path, spilled: bool
) -> None:
    loaded = _scripted_nested()
    assert loaded.module is not None and reads_returned(loaded, "torchscript")
    with TensorStore(0 if spilled else 1 << 30) as store:
        recorded = capture(loaded.module, feeds, store=store)
        assert store.spilled == (len(recorded.records) + 4 if spilled else 0)
        with _Convolutions() as ran:
            export_onnx(
                loaded,
                feeds,
                opset=13,
                exporter="torchscript",
                path=tmp_path / "given.onnx",
                returned=partial(returned_value, recorded),
            )
    assert ran.count == 0
    with _Convolutions() as ran:  # a fresh archive, as a user exports it: the exporter runs it
        export_onnx(_scripted_nested(), feeds, opset=13, exporter="torchscript", path=tmp_path / "ran.onnx")
    assert ran.count > 0
    assert _unnamed(tmp_path / "given.onnx") == _unnamed(tmp_path / "ran.onnx")


def _unnamed(path: Path) -> bytes:
    """The ONNX file without node names: whether a scripted archive's nodes are named with their module scope
    ("/conv/Conv", or "/Conv") depends on what its graph executor did before, not on trtdiff."""
    model = onnx.load(str(path))
    for node in model.graph.node:
        node.name = ""
    return model.SerializeToString()


def test_only_an_archive_with_the_torchscript_exporter_reads_what_was_returned(
    loaded: LoadedModel, traced: LoadedModel
) -> None:
    assert reads_returned(traced, "torchscript")
    assert not reads_returned(traced, "dynamo")
    assert not reads_returned(loaded, "torchscript")  # an eager model is traced: that run is the export's own


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own exporter, called as a user would
def test_while_an_archive_hands_over_its_outputs_another_model_exports_as_usual(
    feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """The hand-over is for the archive it names: another model's export (another thread's) runs its own forward."""
    from trtdiff.source.export import _outputs_given

    first, other = _scripted_nested(), _scripted_nested()
    args = (torch.from_numpy(feeds["x"]),)
    with _outputs_given(first.module, lambda: pytest.fail("the other model was given the first one's outputs")):
        with _Convolutions() as ran:
            torch.onnx.export(
                other.module, args, str(tmp_path / "other.onnx"), opset_version=13, input_names=["x"], dynamo=False
            )
    assert ran.count > 0
    export_onnx(_scripted_nested(), feeds, opset=13, exporter="torchscript", path=tmp_path / "plain.onnx")
    assert _unnamed(tmp_path / "other.onnx") == _unnamed(tmp_path / "plain.onnx")
