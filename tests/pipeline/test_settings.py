"""One set of run settings: derived from the options once, in prepare, and what every consumer is handed.

The PyTorch side is one `TorchReference` (module, device, TF32, memory limit) whose `record`
every recording of a comparison goes through; TensorRT's engine settings are one
`engine_settings(options)` (its TensorRT part, TF32, the shapes fed), carried in `Prepared`.
No other module re-packs TF32 into engine settings or calls the capture machinery itself.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import torch
from culprit_models import ConvReluHead

import trtdiff
from trtdiff.backends.pytorch.capture import TorchCapture, capture
from trtdiff.backends.pytorch.reference import TorchReference
from trtdiff.backends.store import TensorStore
from trtdiff.backends.tensorrt.rewritten import rewritten_settings
from trtdiff.backends.tensorrt.settings import engine_settings
from trtdiff.options import BackendOptions, BuildSettings, CompareOptions
from trtdiff.pipeline.memory import store_bytes
from trtdiff.pipeline.prepare import prepare
from trtdiff.pipeline.reference import FirstRecording, SharedRecording
from trtdiff.source.onnx_graph import load_graph

SHAPE = "1x3x8x8"
PACKAGE = Path(trtdiff.__file__).parent


@pytest.fixture(scope="module")
def net() -> ConvReluHead:
    torch.manual_seed(0)
    return ConvReluHead().eval()


def _options(**fields: object) -> CompareOptions:
    return CompareOptions().with_fields(input_shapes=[SHAPE], opset=13, **fields)


def test_prepare_derives_one_reference_and_one_engine_setting_from_the_options(net: ConvReluHead) -> None:
    options = _options(
        backends=["torch", "onnxruntime"],
        torch_device="cpu",
        tf32=True,
        memory_bytes="3MB",
        precision="fp16",
        workspace_bytes="64MB",
        mark_budget_bytes="2MB",
    )
    with prepare(net, options) as prepared:
        reference = prepared.reference
        assert reference == TorchReference(net, "cpu", True, cast_inputs=True)  # FP16: the golden, float32
        assert reference.module is net and reference.attention == "auto"
        assert prepared.engine == engine_settings(options.runtime, prepared.feeds)
        engine = prepared.engine
        assert (engine.tf32, engine.precision, engine.workspace_bytes) == (True, "fp16", 64 << 20)
        assert engine.mark_budget_bytes == 2 << 20 and engine.input_shapes == (("x", (1, 3, 8, 8)),)
        assert options.runtime.tensorrt.tf32 is False  # the options themselves are not rewritten
        assert prepared.capture is None  # no recording step asked for: nothing recorded


def test_no_reference_without_torch_or_a_module(net: ConvReluHead, tmp_path: Path) -> None:
    with prepare(net, _options(backends=["onnxruntime"], save_onnx=str(tmp_path / "m.onnx"))) as prepared:
        assert prepared.reference is None and prepared.engine.input_shapes == (("x", (1, 3, 8, 8)),)
    with prepare(str(tmp_path / "m.onnx"), CompareOptions().with_fields(backends=["torch", "onnxruntime"])) as given:
        assert given.reference is None and given.engine == engine_settings(BackendOptions(), given.feeds)


def test_the_first_recording_is_made_by_the_reference(net: ConvReluHead) -> None:
    """prepare hands its one reference to the recording step; the step records with it, into a store of the
    budget's share of the memory limit (half of it: pipeline.memory)."""
    seen: list[TorchReference] = []
    options = _options(backends=["torch", "onnxruntime"], memory_bytes=2, culprit=True)

    with ExitStack() as stack:
        first = FirstRecording(options, stack)

        def record(reference: TorchReference, feeds: Mapping[str, np.ndarray]) -> TorchCapture:
            seen.append(reference)
            return first.record(reference, feeds)

        with prepare(net, options, record=record) as prepared:
            assert seen == [prepared.reference] and seen[0] is prepared.reference
            assert prepared.capture is not None and prepared.capture.store.memory_bytes == store_bytes(2) == 1
            assert prepared.capture.store.spilled == len(prepared.capture.store) > 0  # held for the culprit pass


def test_record_returns_what_capture_returns_with_the_same_settings(net: ConvReluHead) -> None:
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8), dtype=np.float32)}
    reference = TorchReference.of(net, BackendOptions(torch_device="cpu", memory_bytes=1 << 20))
    recorded = reference.record(feeds, store=TensorStore(1 << 20))
    direct = capture(net, feeds, device="cpu", tf32=False, store=TensorStore(1 << 20))
    assert [r.key for r in recorded.records] == [r.key for r in direct.records] == ["torch:0", "torch:1", "torch:2"]
    for key in [*recorded.output_keys, *(r.key for r in recorded.records)]:
        np.testing.assert_array_equal(recorded.value(key), direct.value(key))
    assert recorded.store.memory_bytes == 1 << 20 and recorded.device == "cpu"  # the store it was given
    kept = reference.as_recorded(recorded).record(feeds, keep={"torch:1"}, visit=lambda key, value: None)
    assert "torch:1" in kept.store and len(kept.store) == 1  # per call: which values to keep, who sees them
    assert reference.as_recorded(recorded).attention == ("decomposed" if recorded.decomposed else "fused")


def test_a_shared_recording_is_lent_only_to_a_reference_that_records_alike(net: ConvReluHead) -> None:
    feeds = {"x": np.ones((1, 3, 8, 8), np.float32)}
    plain = TorchReference(net, "cpu", False)
    with SharedRecording() as shared:
        first = shared.record(plain, feeds, 1 << 20)
        assert shared.record(TorchReference(net, "cpu", False), feeds, 1 << 20) is first
        other = shared.record(TorchReference(net, "cpu", True), feeds, 1 << 20)  # TF32: recorded anew
        assert other is not first and len(first.store) == 0 and len(other.store) > 0
    assert len(other.store) == 0  # closed with the sweep


def test_the_culprit_step_builds_with_the_comparisons_engine_settings(tmp_path: Path, net: ConvReluHead) -> None:
    """A rewritten model's engine takes the comparison's settings (not the options re-read), its outputs and shapes."""
    path = tmp_path / "m.onnx"
    with prepare(net, _options(backends=["onnxruntime"], save_onnx=str(path), tf32=True)) as prepared:
        engine = prepared.engine
    graph = load_graph(path)
    feeds = {"x": np.zeros((2, 3, 8, 8), np.float32)}
    settings = rewritten_settings(graph, feeds, BackendOptions(), engine)
    assert settings.tf32 and settings.outputs == "none" and settings.input_shapes == (("x", (2, 3, 8, 8)),)
    assert rewritten_settings(graph, feeds, BackendOptions(tf32=True)) == settings  # derived alike without one


# Where the run settings may be spelled out: the two constructors and the capture machinery itself.
_SETTINGS_MODULES = {
    "trtdiff/backends/tensorrt/settings.py",
    "trtdiff/backends/pytorch/reference.py",
    "trtdiff/backends/pytorch/capture.py",
}
_RECORDING_PACKAGES = ("trtdiff/pipeline/", "trtdiff/analysis/", "trtdiff/hypotheses/")


def settings_restated(package: Path) -> list[str]:
    """Places under `package` that re-pack TF32 into engine settings or record PyTorch without the reference.

    A call with a `tf32=` keyword to `replace(...)`/`dataclasses.replace(...)`/`BuildSettings(...)`
    anywhere; a call of `capture(...)` (or an import of it) in the pipeline, analysis and hypotheses.
    """
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        if name in _SETTINGS_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in {"replace", "BuildSettings"} and any(k.arg == "tf32" for k in node.keywords):
                    found.append(f"{name}:{node.lineno} {called}(tf32=...)")
                if called == "capture" and name.startswith(_RECORDING_PACKAGES):
                    found.append(f"{name}:{node.lineno} capture(...)")
            elif isinstance(node, ast.ImportFrom) and name.startswith(_RECORDING_PACKAGES):
                if node.module == "trtdiff.backends.pytorch.capture" and any(a.name == "capture" for a in node.names):
                    found.append(f"{name}:{node.lineno} imports capture")
    return found


def test_no_module_restates_the_run_settings() -> None:
    assert settings_restated(PACKAGE) == []


def test_the_settings_check_sees_a_restatement(tmp_path: Path) -> None:
    """The check can fail: the shapes it looks for, as the code had them before the settings were derived once."""
    package = tmp_path / "trtdiff"
    (package / "pipeline").mkdir(parents=True)
    (package / "pipeline" / "build.py").write_text(
        "import dataclasses\nsettings = dataclasses.replace(runtime.tensorrt, tf32=runtime.tf32)\n"
    )
    (package / "pipeline" / "comparison.py").write_text(
        "from trtdiff.backends.pytorch.capture import capture\nrecorded = capture(module, feeds, tf32=runtime.tf32)\n"
    )
    assert settings_restated(package) == [
        "trtdiff/pipeline/build.py:2 replace(tf32=...)",
        "trtdiff/pipeline/comparison.py:1 imports capture",
        "trtdiff/pipeline/comparison.py:2 capture(...)",
    ]


def test_build_settings_declare_tf32_as_filled_in() -> None:
    """BuildSettings.tf32 is no option of its own: engine_settings fills it from BackendOptions.tf32."""
    assert engine_settings(BackendOptions(tf32=True)).tf32 is True
    assert engine_settings(BackendOptions(tensorrt=BuildSettings(tf32=True))).tf32 is False


def test_build_settings_take_the_precision_of_the_backends() -> None:
    """BuildSettings.precision is filled in as TF32 is, from BackendOptions.precision (bf16 too: refused later)."""
    assert engine_settings(BackendOptions(precision="fp16")).precision == "fp16"
    assert engine_settings(BackendOptions(precision="bf16")).precision == "bf16"
    assert engine_settings(BackendOptions(tensorrt=BuildSettings(precision="fp16"))).precision == "fp32"
