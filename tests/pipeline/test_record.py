"""`trtdiff run --save` records a backend; `compare --load` replays it with the same pairing."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import trtdiff
from trtdiff.cli.app import main
from trtdiff.errors import InputError, OptionError
from trtdiff.pipeline.record import run

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x64x64"


@pytest.mark.slow
def test_recorded_onnxruntime_compares_like_a_live_one(tmp_path: Path) -> None:
    onnx_file, recording = tmp_path / "m.onnx", tmp_path / "ort.npz"
    result = CliRunner().invoke(
        main,
        [
            "run",
            FACTORY,
            "--backend",
            "onnxruntime",
            "--save",
            str(recording),
            "--input-shape",
            SHAPE,
            "--opset",
            "10",
            "--save-onnx",
            str(onnx_file),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "recorded" in result.stdout and "--load onnxruntime=" in result.stdout
    replayed = trtdiff.compare(FACTORY, onnx=onnx_file, recordings={"onnxruntime": recording})
    live = trtdiff.compare(FACTORY, onnx=onnx_file, input_shapes=[SHAPE])
    assert replayed.first_divergence == live.first_divergence
    assert [layer.tensor for layer in replayed.layers] == [layer.tensor for layer in live.layers]
    assert "recorded in ort.npz" in replayed.environment["onnxruntime"]


def test_a_recording_of_another_onnx_file_is_refused(tmp_path: Path, export_example) -> None:
    recording = tmp_path / "ort.npz"
    run(FACTORY, backend="onnxruntime", save=recording, input_shapes=[SHAPE], opset=10)
    with pytest.raises(InputError, match="different ONNX file"):
        trtdiff.compare(FACTORY, onnx=export_example(13), recordings={"onnxruntime": recording})
    with pytest.raises(InputError, match="records backend 'onnxruntime'"):
        trtdiff.compare(FACTORY, onnx=export_example(13), recordings={"tensorrt": recording})


def test_run_refuses_torch_and_existing_files(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="only ONNX backends"):
        run(FACTORY, backend="torch", save=tmp_path / "t.npz", input_shapes=[SHAPE])
    existing = tmp_path / "e.npz"
    existing.write_bytes(b"mine")
    with pytest.raises(OptionError, match="exists"):
        run(FACTORY, backend="onnxruntime", save=existing, input_shapes=[SHAPE])
    assert existing.read_bytes() == b"mine"


def test_load_of_a_missing_or_bad_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"nope")
    for path in (tmp_path / "missing.npz", bad):
        result = CliRunner().invoke(main, ["compare", FACTORY, "--load", f"onnxruntime={path}"])
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
