"""The CLI: exit codes, one-line errors, JSON output, and that --help needs no heavy imports."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from cli_output import without_progress
from click.testing import CliRunner
from torch import nn

import trtdiff
from trtdiff.cli.app import main
from trtdiff.report import Report

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x64x64"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _one_error_line(stderr: str) -> str:
    lines = [line for line in without_progress(stderr).splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in stderr
    return lines[0]


@pytest.mark.slow
def test_divergence_exits_1_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code, stdout, _ = _run("compare", FACTORY, "--opset", "10", "--input-shape", SHAPE, "--json", str(out))
    assert code == 1
    assert "FIRST DIVERGENCE" in stdout and "/decoder/Resize" in stdout
    report = Report.from_json(out.read_text())
    assert not report.passed and report.first_divergence.onnx_node == "/decoder/Resize"
    data = json.loads(out.read_text())
    assert data["opset"] == 10 and data["backends"] == ["torch", "onnxruntime"]


@pytest.mark.slow
def test_agreement_exits_0_and_output_fits_80_columns_without_colour(tmp_path: Path) -> None:
    code, stdout, _ = _run("compare", FACTORY, "--opset", "13", "--input-shape", SHAPE, "--all")
    assert code == 0 and "PASS" in stdout
    assert "\x1b[" not in stdout
    assert max(len(line) for line in stdout.splitlines()) <= 80


def test_loose_thresholds_turn_the_opset10_divergence_into_a_pass() -> None:
    code, _, _ = _run(
        "compare", FACTORY, "--opset", "10", "--input-shape", SHAPE, "--min-cosine", "0.99", "--rtol", "0.5"
    )
    assert code == 0


def test_json_never_overwrites_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    precious = tmp_path / "notes.json"
    precious.write_text('{"mine": true}')
    code, _, stderr = _run("compare", FACTORY, "--input-shape", SHAPE, "--json", str(precious))
    assert code == 2 and "not a trtdiff report" in _one_error_line(stderr)
    assert precious.read_text() == '{"mine": true}'


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model is broken")


def build_raising() -> nn.Module:
    return _Raises()


class _ReturnsNone(nn.Module):
    def forward(self, x: torch.Tensor) -> None:
        x.add(1)


def build_returning_none() -> nn.Module:
    return _ReturnsNone()


class _OutOfMemory(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise MemoryError("Unable to allocate 93.1 GiB for an array")


def build_out_of_memory() -> nn.Module:
    return _OutOfMemory()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("compare", "missing.pt", "--input-shape", SHAPE), "no such file"),
        (("compare", FACTORY, "--input-shape", "1x3xfoo"), "--input-shape"),
        (("compare", FACTORY, "--input-shape", "1x4x64x64"), "forward raised"),
        (("compare", FACTORY), "--input-shape"),
        (("compare", FACTORY, "--input-shape", SHAPE, "--backends", "torch,foo"), "unknown backend"),
        (("compare", FACTORY, "--input-shape", SHAPE, "--min-cosine", "2"), "--min-cosine"),
        (("compare", FACTORY, "--input-shape", SHAPE, "--memory-limit", "lots"), "--memory-limit"),
        (("compare", "tests.cli.test_app:build_raising", "--input-shape", SHAPE), "this model is broken"),
        (
            ("compare", "tests.cli.test_app:build_returning_none", "--input-shape", SHAPE),
            "tests.cli.test_app:build_returning_none: the model's forward returned no tensor",
        ),
        (
            ("compare", "tests.cli.test_app:build_returning_none", "--input-shape", SHAPE, "--backends", "onnxruntime"),
            "tests.cli.test_app:build_returning_none: the torchscript exporter wrote an ONNX graph trtdiff cannot use",
        ),
        (
            ("compare", "tests.cli.test_app:build_out_of_memory", "--input-shape", SHAPE),
            "PyTorch ran out of memory running the model (Unable to allocate 93.1 GiB for an array); give "
            "--input-shape a smaller shape",
        ),
        (("compare", FACTORY, "--input-shape", "1x3x1000000x1000000"), "of memory is available here"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], expected: str) -> None:
    code, _, stderr = _run(*args)
    assert code == 2
    assert expected in _one_error_line(stderr)


def test_corrupt_model_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    code, _, stderr = _run("compare", str(bad), "--input-shape", SHAPE)
    assert code == 2 and str(bad) in _one_error_line(stderr)


def test_corrupt_onnx_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    code, _, stderr = _run("compare", FACTORY, "--input-shape", SHAPE, "--onnx", str(bad))
    assert code == 2 and "model.onnx" in _one_error_line(stderr)


def test_debug_shows_the_traceback() -> None:
    result = CliRunner().invoke(main, ["compare", "missing.pt", "--input-shape", SHAPE, "--debug"])
    assert result.exit_code == 2 and "Traceback" in result.stderr


@pytest.mark.slow
def test_torchscript_archive_from_the_command_line(tmp_path: Path, resnet_model: nn.Module) -> None:
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.trace(resnet_model, torch.zeros(1, 3, 64, 64)), str(path))
    code, stdout, _ = _run("compare", str(path), "--opset", "10", "--input-shape", SHAPE)
    assert code == 1 and "/decoder/Resize" in stdout


def test_given_onnx_file_from_the_command_line(export_example: Callable[..., Path]) -> None:
    code, stdout, _ = _run("compare", FACTORY, "--input-shape", SHAPE, "--onnx", str(export_example(13)))
    assert code == 0 and "exporter given" in stdout


def test_version_names_tensorrt_and_the_gpu() -> None:
    import importlib.metadata
    import importlib.util
    import platform

    code, stdout, _ = _run("--version")
    lines = stdout.splitlines()
    assert code == 0 and lines[0] == f"trtdiff {trtdiff.__version__} (Python {platform.python_version()})"
    try:
        rtx = importlib.metadata.version("tensorrt-rtx-cu13-bindings")
    except importlib.metadata.PackageNotFoundError:
        rtx = None
    if rtx is not None and importlib.util.find_spec("tensorrt") is None:
        assert lines[1] == f"TensorRT: tensorrt-rtx {rtx} (module tensorrt_rtx_bindings)"
    if not torch.cuda.is_available():
        assert lines[2] == "GPU: none visible to torch"
        assert lines[3].startswith("cannot run engines: ") and "CUDA" in lines[3]
    else:
        assert lines[2].startswith(f"GPU: {torch.cuda.get_device_name(0)}")


def test_help_does_not_import_torch_or_tensorrt() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from trtdiff.cli.app import main;"
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output;"
        "r = CliRunner().invoke(main, ['compare', '--help']); assert r.exit_code == 0, r.output;"
        "r = CliRunner().invoke(main, ['build', '--help']); assert r.exit_code == 0, r.output;"
        "heavy = [m for m in ('torch', 'onnxruntime', 'tensorrt', 'tensorrt_rtx', 'tensorrt_rtx_bindings') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class _Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_a_torchscript_interpreter_failure_shows_its_cause(tmp_path: Path) -> None:
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(_Scripted().eval()), str(path))
    code, _, stderr = _run("compare", str(path), "--input-shape", "1x8")
    line = _one_error_line(stderr)
    assert code == 2 and "Expected 3D (unbatched) or 4D (batched) input to conv2d" in line
    assert "TorchScript interpreter" not in line and line.startswith(f"Error: {path}: the model's forward raised")


class _Slow(nn.Module):
    """Hundreds of convolutions: long enough to be interrupted while PyTorch is being recorded.

    7x7 kernels: seconds of work per forward on 2 cores, with small outputs to spill, so the
    signal lands while trtdiff still runs even when the test notices the recording late.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(32, 32, 7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(400):
            x = self.conv(x)
        return x


@pytest.mark.slow
def test_ctrl_c_while_recording_a_torchscript_archive_exits_130_and_leaves_nothing(tmp_path: Path) -> None:
    import os
    import signal
    import time

    path = tmp_path / "slow.pt"
    torch.jit.save(torch.jit.script(_Slow().eval()), str(path))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    # A store of 1 KB spills the first recorded op to a trtdiff-store-* folder (in the process's own
    # temporary folder, trtdiff-*): recording has begun. --culprit holds the reference (the culprit pass
    # reads it): a streamed one drops what does not fit instead of spilling it.
    args = ["compare", str(path), "--input-shape", "1x32x64x64", "--memory-limit", "1KB", "--culprit"]
    process = subprocess.Popen(
        [sys.executable, "-m", "trtdiff", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not list(scratch.glob("*/trtdiff-store-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    os.kill(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert without_progress(stderr).strip() == "Interrupted." and "Traceback" not in stderr
    assert not stdout.strip()
    assert not list(scratch.glob("trtdiff-*"))


def build_small() -> nn.Module:
    torch.manual_seed(0)
    return _Scripted().eval()


def test_paths_that_are_not_utf8_are_written_and_named_as_the_shell_shows_them(tmp_path: Path) -> None:
    import os

    folder = os.fsencode(tmp_path)
    missing, saved = (os.fsdecode(folder + name) for name in (b"/gone\xff.pt", b"/model\xfd.onnx"))
    code, _, stderr = _run("compare", missing, "--input-shape", SHAPE)
    assert code == 2 and "gone\\xff.pt: no such file" in _one_error_line(stderr)
    # The TorchScript exporter's C++ writes only to UTF-8 paths: the file is written beside and moved.
    code, stdout, _ = _run(
        "compare", "tests.cli.test_app:build_small", "--input-shape", "1x3x8x8", "--save-onnx", saved
    )
    assert code == 0, stdout
    assert [p.name for p in tmp_path.iterdir()] == [os.fsdecode(b"model\xfd.onnx")]
    with open(saved, "rb") as file:
        assert [i.name for i in onnx.load(file).graph.input] == ["x"]


def test_help_is_true_one_spelling_for_sizes_and_no_sweep_where_it_is_refused() -> None:
    for command in ("run", "build", "inspect"):
        code, stdout, _ = _run(command, "--help")
        assert code == 0 and "sweep" not in stdout.lower() and "N[,N...]" not in stdout, command
    code, stdout, _ = _run("compare", "--help")
    assert code == 0 and "a sweep" in stdout and "--sweep-precision" in stdout
    assert "--size HxW" in stdout and "H,W" not in stdout  # as --input-shape writes 1x3x512x512
    refused = CliRunner().invoke(main, ["build", FACTORY, "--input-shape", SHAPE, "--opset", "13,17"])
    assert refused.exit_code == 2 and "--opset 13,17: one value here; sweeps are for compare" in refused.stderr


# Non-finite values: NaN/Inf outputs fail the gate, and the report names where they first appear.

NONFINITE = "tests.nonfinite_models"


def test_nan_outputs_exit_1_and_name_the_first_nan_tensor(tmp_path: Path) -> None:
    from tests.nonfinite_models import IMAGE_SHAPE

    out = tmp_path / "report.json"
    code, stdout, _ = _run(
        "compare", f"{NONFINITE}:nan_in_the_middle", "--input-shape", IMAGE_SHAPE, "--json", str(out)
    )
    assert code == 1, stdout
    report = Report.from_json(out.read_text())
    finite = next(c for c in report.checks if c.id == "outputs/finite/torch~onnxruntime")
    assert not finite.passed and finite.worst == 2 * 2 * 8 * 8  # both sides, every element
    assert [(e.backend, e.onnx_node, e.op_type, e.module) for e in report.non_finite] == [
        ("torch", "/root/Sqrt", "Sqrt", "root"),
        ("onnxruntime", "/root/Sqrt", "Sqrt", "root"),
    ]
    assert report.non_finite[0].nan == 4 * 8 * 8 and report.non_finite[0].inf == 0
    assert "NON-FINITE" in stdout and "/root/Sqrt" in stdout
    assert "FAIL" in stdout and "outputs/finite/torch~onnxruntime" in stdout


def test_figures_over_outputs_with_no_finite_value_are_n_a_in_every_format(tmp_path: Path) -> None:
    from tests.nonfinite_models import IMAGE_SHAPE

    out, md, xml = tmp_path / "report.json", tmp_path / "r.md", tmp_path / "r.xml"
    files = ("--json", str(out), "--markdown", str(md), "--junit", str(xml))
    code, stdout, _ = _run("compare", f"{NONFINITE}:nan_in_the_middle", "--input-shape", IMAGE_SHAPE, *files)
    assert code == 1, stdout
    data = json.loads(out.read_text())
    output = next(layer for layer in data["layers"] if layer["is_output"])["pairs"]["torch~onnxruntime"]
    assert [output[k] for k in ("cosine", "max_abs", "mean_abs", "rel_err")] == [None] * 4  # JSON null
    checks = {c.id: c for c in Report.from_json(out.read_text()).checks}
    for threshold, metric in (("min-cosine", "cosine"), ("rtol", "rel_err")):
        check = checks[f"outputs/{threshold}/torch~onnxruntime"]
        assert not check.passed and check.worst is None and check.failing_samples == ("input",)
        assert f"worst {metric} n/a (input)" in " ".join(stdout.split())
    assert "worst cosine 1" not in stdout and "worst rel_err 0" not in stdout
    assert "| ❌ | `outputs/min-cosine/torch~onnxruntime` | n/a |" in md.read_text()
    assert "worst cosine n/a (input)" in xml.read_text() and "worst rel_err n/a (input)" in xml.read_text()
    if importlib.util.find_spec("matplotlib") is not None:
        page = tmp_path / "r.html"
        assert _run("report", str(out), "--html", str(page))[0] == 1
        assert "n/a" in page.read_text()


def test_a_correct_model_with_a_minus_inf_mask_passes(tmp_path: Path) -> None:
    from tests.nonfinite_models import SEQUENCE_SHAPE

    out = tmp_path / "report.json"
    code, stdout, _ = _run(
        "compare", f"{NONFINITE}:masked_attention", "--input-shape", SEQUENCE_SHAPE, "--json", str(out)
    )
    assert code == 0, stdout
    report = Report.from_json(out.read_text())
    masked = [layer for layer in report.layers if any(m.inf_ref for m in layer.pairs.values())]
    assert masked and all(not layer.diverged for layer in masked)  # -inf at the same positions in both backends
    (pairs,) = {tuple(layer.pairs) for layer in masked}
    assert all(layer.pairs[pairs[0]].inf_ref == layer.pairs[pairs[0]].inf_cand == 15 for layer in masked)
    assert report.non_finite == () and all(c.passed for c in report.checks)


def test_a_minus_inf_mask_upstream_is_not_named(tmp_path: Path) -> None:
    from tests.nonfinite_models import SEQUENCE_SHAPE, mask_then_root

    report = trtdiff.compare(mask_then_root(), input_shapes=[SEQUENCE_SHAPE])
    assert any(m.inf_ref for layer in report.layers for m in layer.pairs.values())  # the mask is compared
    assert {(e.onnx_node, e.module) for e in report.non_finite} == {("/root/Sqrt", "root")}


def test_allow_nonfinite_passes_identical_positions_and_fails_differing_ones() -> None:
    from tests.nonfinite_models import SEQUENCE_SHAPE

    same = ("compare", f"{NONFINITE}:log_of_input", "--input-shape", SEQUENCE_SHAPE, "-q")
    assert _run(*same)[0] == 1
    code, stdout, _ = _run(*same, "--allow-nonfinite")
    assert code == 0 and "NaN/Inf allowed, at the same positions." in " ".join(stdout.split()), stdout
    # PyTorch's MaxPool propagates NaN, ONNX Runtime's skips it: the NaN sit at different positions.
    moved = ("compare", f"{NONFINITE}:log_then_max_pool", "--input-shape", "1x2x4x4", "--allow-nonfinite")
    code, stdout, _ = _run(*moved)
    assert code == 1 and "outputs/finite/torch~onnxruntime" in stdout and "FIRST DIVERGENCE: /MaxPool" in stdout


def test_nan_in_one_backend_only_names_that_backend(tmp_path: Path) -> None:
    # Each 2x2 window ends with its one positive value: PyTorch's max pool of the logs is NaN, ONNX Runtime's
    # finite (its 2-D max pool keeps a NaN only when the window's last value is one; onnxruntime 1.32).
    x = np.array([[[[-1.0, -2.0, -3.0, -4.0], [-5.0, 6.0, -7.0, 8.0]]]], dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "report.json"
    code, stdout, _ = _run(
        "compare", f"{NONFINITE}:log_then_max_pool", "--input", str(tmp_path / "x.npy"), "--json", str(out)
    )
    assert code == 1
    report = Report.from_json(out.read_text())
    assert [(e.backend, e.onnx_node, e.nan, e.inf) for e in report.non_finite] == [("torch", "/Log", 6, 0)]
    assert "the outputs of torch hold NaN/Inf; they first appear at /Log" in " ".join(stdout.split())


def test_an_input_file_of_nan_only_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.full((1, 6, 8), np.nan, dtype=np.float32))
    code, _, stderr = _run("compare", f"{NONFINITE}:masked_attention", "--input", str(path))
    assert code == 2
    assert _one_error_line(stderr) == (
        f"Error: --input {path}: holds no finite value (48 NaN of 48); every output would be NaN/Inf: "
        "check how the file was written"
    )
    named = tmp_path / "both.npz"
    np.savez(named, x=np.ones((1, 6, 8), np.float32), y=np.array([np.inf, -np.inf], np.float32))
    code, _, stderr = _run("compare", f"{NONFINITE}:masked_attention", "--input", str(named))
    assert code == 2 and "y holds no finite value (2 Inf of 2)" in _one_error_line(stderr)


def test_an_inputs_folder_file_of_inf_only_exits_2_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "inputs"
    folder.mkdir()
    np.save(folder / "a.npy", np.ones((1, 6, 8), np.float32))
    np.save(folder / "b.npy", np.full((1, 6, 8), np.inf, np.float32))
    code, _, stderr = _run("compare", f"{NONFINITE}:masked_attention", "--inputs", str(folder))
    assert code == 2
    assert _one_error_line(stderr) == (
        f"Error: --inputs {folder / 'b.npy'}: holds no finite value (48 Inf of 48); every output would be NaN/Inf: "
        "check how the file was written"
    )


def test_a_partly_nan_input_is_noted(tmp_path: Path) -> None:
    x = np.ones((1, 6, 8), np.float32)
    x[0, 2, 3] = np.nan
    np.save(tmp_path / "x.npy", x)
    report = trtdiff.compare(f"{NONFINITE}:masked_attention", input_files=[str(tmp_path / "x.npy")])
    assert "input 'x' of sample input holds 1 NaN of 48 values; outputs computed from them may be NaN/Inf too" in (
        report.notes
    )
    assert not report.passed and {e.backend for e in report.non_finite} == {"torch", "onnxruntime"}


def test_python_dash_m_trtdiff_is_the_command() -> None:
    result = subprocess.run([sys.executable, "-m", "trtdiff", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Usage: python -m trtdiff" in result.stdout and "compare" in result.stdout


def test_an_opset_no_exporter_writes_is_refused_before_loading_with_the_archives_range(tmp_path: Path) -> None:
    """--opset 99 is refused before any work (the model file need not even exist), and the advice says what a
    TorchScript archive can take, since the dynamo range does not apply to one."""
    code, _, stderr = _run("compare", str(tmp_path / "model.pt"), "--input-shape", SHAPE, "--opset", "99")
    line = _one_error_line(stderr)
    assert code == 2 and line.startswith("Error: --opset 99: no exporter writes it (TorchScript: opsets 7-20")
    assert "7-20 for a TorchScript archive" in line


def test_a_mistyped_command_names_the_closest_command_and_every_command() -> None:
    commands = "build, compare, demo, inspect, report, repro, run, view"
    code, _, stderr = _run("comapre", "model.onnx")
    assert code == 2
    assert stderr == (
        f"Error: no command 'comapre'. Did you mean 'compare'? The commands are {commands} "
        "(trtdiff --help says what each does)\n"
    )
    code, _, stderr = _run("frobnicate")
    assert code == 2
    assert (
        stderr == f"Error: no command 'frobnicate'. The commands are {commands} (trtdiff --help says what each does)\n"
    )


def test_an_unknown_flag_names_the_command_however_trtdiff_was_started() -> None:
    result = CliRunner().invoke(main, ["compare", "--bogus", "m.onnx"], prog_name="python -m trtdiff")
    assert result.exit_code == 2
    assert result.stderr == "Error: No such option '--bogus'. (trtdiff compare --help lists the options)\n"


def test_inspect_says_what_it_checks_in_plain_words() -> None:
    code, stdout, _ = _run("--help")
    assert code == 0 and "inspect  Check MODEL's ONNX file for known export pitfalls that change..." in stdout
    code, stdout, _ = _run("inspect", "--help")
    assert code == 0 and "thread" not in stdout and "suspects" not in stdout
    assert "Check MODEL's ONNX file for known export pitfalls that change numbers, each with its fix." in " ".join(
        stdout.split()
    )


def test_a_mistyped_backend_gets_the_closest_name() -> None:
    """Issue 40, item 7: options and commands said "did you mean"; a backend's name did not."""
    code, _, stderr = _run("compare", FACTORY, "--input-shape", SHAPE, "--backends", "torch,openvno")
    assert code == 2 and _one_error_line(stderr) == (
        "Error: --backends torch,openvno: unknown backend 'openvno' (did you mean 'openvino'?); choose from torch, "
        "onnxruntime, onnx-reference, tensorrt, openvino"
    )
    code, _, stderr = _run("compare", FACTORY, "--input-shape", SHAPE, "--backends", "torch,foo")
    assert code == 2 and "unknown backend 'foo'; choose from" in _one_error_line(stderr)


def test_an_onnx_file_alone_says_which_backends_it_needs(tmp_path: Path) -> None:
    """Issue 40, item 7: `trtdiff compare model.onnx` alone named only --onnx with the PyTorch model."""
    from trtdiff.backends.tensorrt import probe

    if probe().can_run:
        pytest.skip("TensorRT runs here: ONNX Runtime and TensorRT compare the file by default")
    path = tmp_path / "model.onnx"
    torch.onnx.export(nn.Linear(4, 2).eval(), (torch.zeros(1, 4),), str(path), dynamo=False)
    code, _, stderr = _run("compare", str(path), "--no-config")
    assert code == 2 and _one_error_line(stderr) == (
        "Error: MODEL is an ONNX file, which PyTorch cannot run, and only onnxruntime can run here: compare ONNX "
        "backends alone with --backends onnxruntime,onnx-reference, or give the PyTorch model as MODEL with --onnx FILE"
    )
    code, _, stderr = _run("compare", str(path), "--no-config", "--backends", "onnxruntime")
    assert code == 2 and "MODEL is an ONNX file" not in stderr, "the backends were given: the error is theirs"
