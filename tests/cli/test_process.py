"""The `trtdiff` command as a process (trtdiff.cli.main): its exit status, its files, and an exit without teardown."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

TEARDOWN_PROBE = """
import atexit, sys
import trtdiff.cli

class Probe:
    def __del__(self):
        print("torn down", flush=True)

probe = Probe()  # a module global: freed when the interpreter tears its modules down, not before
atexit.register(print, "exit handler ran")
sys.argv = ["trtdiff", *sys.argv[1:]]
trtdiff.cli.main()
"""


def _relu(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    # IR version 8: every ONNX Runtime reads it (1.30 refuses the default of onnx 1.23, 14)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(path))
    return path


def _trtdiff(
    *arguments: str, cwd: Path, prefix: tuple[str, ...] = ("-m", "trtdiff")
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *prefix, *arguments], cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )


def test_a_compare_writes_every_report_and_exits_with_its_status(tmp_path: Path) -> None:
    _relu(tmp_path / "m.onnx")
    done = _trtdiff(
        "compare", "m.onnx", "--backends", "onnxruntime,onnx-reference", "--json", "r.json", "--markdown", "r.md",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.startswith("### trtdiff: ✅ PASS") and markdown.rstrip().endswith("</sub>")  # written whole
    assert "PASS" in done.stdout  # stdout flushed before the process ended


def test_bad_input_still_exits_2_with_one_line(tmp_path: Path) -> None:
    done = _trtdiff("compare", "missing.onnx", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: missing.onnx") and len(done.stderr.strip().splitlines()) == 1


def test_exit_handlers_run_but_the_interpreter_is_not_torn_down(tmp_path: Path) -> None:
    done = _trtdiff("--help", cwd=tmp_path, prefix=("-c", TEARDOWN_PROBE))
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "exit handler ran" in done.stdout
    assert "torn down" not in done.stdout
    plain = subprocess.run(  # the probe sees a teardown where there is one
        [sys.executable, "-c", TEARDOWN_PROBE.replace("trtdiff.cli.main()", "sys.exit(0)")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "torn down" in plain.stdout


def test_under_a_profiler_the_interpreter_exits_normally_and_the_profile_is_written(tmp_path: Path) -> None:
    done = _trtdiff("--help", cwd=tmp_path, prefix=("-m", "cProfile", "-o", "p.out", "-m", "trtdiff"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p.out").stat().st_size > 0


# Exits that never lie: a reader that leaves early, closed descriptors and Ctrl-C change no verdict and leave no file.

ROOT = Path(__file__).resolve().parents[2]


def _nan(path: Path) -> Path:
    """sqrt(-|x|): NaN in every backend, so the finite-outputs check fails (exit 1)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Neg", ["a"], ["b"], name="neg"),
        helper.make_node("Sqrt", ["b"], ["y"], name="sqrt"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def _env(scratch: Path | None = None) -> dict[str, str]:
    """This checkout first on the path (the factories below are imported by the process), TMPDIR where asked."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if scratch is not None:
        env["TMPDIR"] = str(scratch)
    return env


def _shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`line` in bash, with `trtdiff` standing for this Python's `python -m trtdiff`."""
    line = line.replace("trtdiff ", f"{shlex.quote(sys.executable)} -m trtdiff ", 1)
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=180, check=False
    )


def small_cnn() -> Any:
    """A factory for the processes below: a convolution, exported by the TorchScript exporter."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()


def test_a_reader_that_leaves_after_one_line_costs_no_report_and_no_verdict(tmp_path: Path) -> None:
    _relu(tmp_path / "m.onnx")
    _nan(tmp_path / "nan.onnx")
    backends = "--backends onnxruntime,onnx-reference"
    for model, status in (("m.onnx", 0), ("nan.onnx", 1)):
        for name in ("a.json", "a.xml"):
            (tmp_path / name).unlink(missing_ok=True)
        done = _shell(
            f"trtdiff compare {model} {backends} --json a.json --junit a.xml | head -1; echo status ${{PIPESTATUS[0]}}",
            cwd=tmp_path,
        )
        first, last = done.stdout.splitlines()
        assert first == f"trtdiff {model}  (inputs: x 1x4)" and last == f"status {status}", done.stderr
        assert json.loads((tmp_path / "a.json").read_text())["passed"] is (status == 0)
        assert (tmp_path / "a.xml").read_text().rstrip().endswith("</testsuites>")
        assert "Error" not in done.stderr and "Traceback" not in done.stderr


def test_closed_stderr_or_stdout_change_neither_the_output_nor_the_verdict(tmp_path: Path) -> None:
    model = "tests.cli.test_process:small_cnn"
    done = _shell(f"trtdiff compare {model} --input-shape 1x3x8x8 --json a.json 2>&-", cwd=tmp_path)
    assert done.returncode == 0 and "PASS: all" in done.stdout  # the exporter's silencing kept stdout whole
    assert json.loads((tmp_path / "a.json").read_text())["passed"] is True
    (tmp_path / "a.json").unlink()
    done = _shell(f"trtdiff compare {model} --input-shape 1x3x8x8 --json a.json >&-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "a.json").read_text())["passed"] is True
    _nan(tmp_path / "nan.onnx")
    done = _shell("trtdiff compare nan.onnx --backends onnxruntime,onnx-reference 2>&- >&-", cwd=tmp_path)
    assert done.returncode == 1


def test_the_library_with_stderr_closed_keeps_stdout_where_it_was(tmp_path: Path) -> None:
    script = (
        "import os, trtdiff; os.close(2);"
        "report = trtdiff.compare('tests.cli.test_process:small_cnn', input_shapes=['1x3x8x8']);"
        "print('passed', report.passed, flush=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180
    )
    assert done.stdout == "passed True\n", done.stderr


def heavy() -> Any:
    """A factory for the Ctrl-C test: 120 convolutions, seconds of recording, export and ONNX Runtime on 2 cores."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Conv2d(16, 16, 3, padding=1) for _ in range(120)]).eval()


INTERRUPT_PROBE = """
import ctypes, os, signal, sys, tempfile, threading
from pathlib import Path
from trtdiff import outputs
from trtdiff.cli.interrupt import ending_on_interrupt, writing

with ending_on_interrupt():
    Path(tempfile.gettempdir(), "spilled.npy").write_bytes(b"x")
    case, sent = sys.argv[1], getattr(signal, sys.argv[2])
    if case == "writing":  # the report is finished before the process ends
        with writing():
            os.kill(os.getpid(), sent)
            with open("report.txt", "w") as report:
                report.writelines(f"{i}\\n" for i in range(10000))
    elif case == "unfinished":  # a file written as the run goes is removed, the file at its name is kept
        with outputs.replacing("kept.npz") as partial:
            partial.write_bytes(b"PK")
            os.kill(os.getpid(), sent)
            sum(range(10**6))
    else:  # stuck in native code: Python cannot run a handler in the main thread
        signal.pthread_sigmask(signal.SIG_BLOCK, {sent})
        sleep = ctypes.CDLL(None).sleep
        threading.Timer(0.3, print, ["stuck"], {"flush": True}).start()  # said from inside the sleep
        sleep(60)
    print("not interrupted")
"""


def _probe(case: str, cwd: Path, scratch: Path, sent: str = "SIGINT") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", INTERRUPT_PROBE, case, sent],
        cwd=cwd,
        env=_env(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_an_interrupt_while_a_report_is_written_ends_the_process_once_it_is_whole(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    stdout, stderr = _probe("writing", tmp_path, scratch).communicate(timeout=60)
    assert stderr == "Interrupted.\n" and stdout == ""
    assert (tmp_path / "report.txt").read_text().splitlines()[-1] == "9999"
    assert not list(scratch.iterdir())


def test_an_interrupt_removes_a_file_the_run_was_writing_and_keeps_one_it_had_not_touched(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (tmp_path / "kept.npz").write_bytes(b"the user's")
    process = _probe("unfinished", tmp_path, scratch)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and stderr == "Interrupted.\n" and stdout == ""
    assert [p.name for p in tmp_path.iterdir() if p.name != "tmp"] == ["kept.npz"]
    assert (tmp_path / "kept.npz").read_bytes() == b"the user's"
    assert not list(scratch.iterdir())


def test_a_second_ctrl_c_ends_a_process_stuck_in_native_code(tmp_path: Path) -> None:
    import signal
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = _probe("stuck", tmp_path, scratch)
    assert process.stdout is not None and process.stdout.readline() == "stuck\n"
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert process.poll() is None, process.communicate()  # the first one waits for the main thread, which waits in C
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130 and stderr == "Interrupted.\n" and time.monotonic() - started < 5
    assert not list(scratch.iterdir())


def test_sigterm_ends_as_ctrl_c_does_with_exit_143(tmp_path: Path) -> None:
    """SIGTERM is what CI cancellation and `timeout` send: before, it ended the process at once, leaving the
    temporary folder (spilled activations) behind, and a report half-written."""
    for case in ("writing", "unfinished"):
        scratch = tmp_path / case / "tmp"
        scratch.mkdir(parents=True)
        (tmp_path / case / "kept.npz").write_bytes(b"the user's")
        process = _probe(case, tmp_path / case, scratch, "SIGTERM")
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 143 and stderr == "Terminated.\n" and stdout == "", (case, stderr)
        assert not list(scratch.iterdir()) and (tmp_path / case / "kept.npz").read_bytes() == b"the user's"
    assert (tmp_path / "writing" / "report.txt").read_text().splitlines()[-1] == "9999"
    assert sorted(p.name for p in (tmp_path / "unfinished").iterdir()) == ["kept.npz", "tmp"]


def test_one_sigterm_ends_a_process_stuck_in_native_code(tmp_path: Path) -> None:
    """A sender of SIGTERM waits a few seconds, then kills: the watcher thread ends the process when the main
    thread, stuck in native code, has not within a second."""
    import signal
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = _probe("stuck", tmp_path, scratch, "SIGTERM")
    assert process.stdout is not None and process.stdout.readline() == "stuck\n"
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 143 and stderr == "Terminated.\n" and time.monotonic() - started < 5
    assert not list(scratch.iterdir())


def test_sigterm_during_a_compare_removes_the_spilled_values(tmp_path: Path) -> None:
    """The issue's case: `timeout` stops a compare that spilled the reference's values to .npy files (81 MB in
    one run); they, and every other temporary file, are removed."""
    import signal
    import time

    from cli_output import without_progress

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    args = ["compare", "tests.cli.test_process:heavy", "--input-shape", "1x16x96x96", "--memory-limit", "1KB"]
    process = subprocess.Popen(
        [sys.executable, "-m", "trtdiff", *args, "--culprit"],
        cwd=tmp_path,
        env=_env(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not list(scratch.rglob("*.npy")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None and list(scratch.rglob("*.npy")), process.communicate()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 143 and not stdout, stderr
    assert without_progress(stderr).endswith("Terminated.\n") and "Traceback" not in stderr, stderr
    assert not list(scratch.iterdir())


@pytest.mark.slow
def test_ctrl_c_under_load_exits_130_at_every_moment_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGINT from 5% to 80% of the way through a real compare (timed once, uninterrupted, first), while another
    process loads the CPU: never an abort (134), nor a traceback. Fractions, not seconds: the same moments
    (importing, loading, exporting, recording, comparing) however fast the machine and trtdiff are."""
    import signal
    import time

    from cli_output import without_progress

    args = ["compare", "tests.cli.test_process:heavy", "--input-shape", "1x16x96x96", "--memory-limit", "1KB"]
    loader = subprocess.Popen([sys.executable, "-c", "while True: pass"])

    def start(scratch: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "trtdiff", *args],
            cwd=tmp_path,
            env=_env(scratch),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    try:
        (tmp_path / "timed").mkdir()
        started = time.monotonic()
        whole = start(tmp_path / "timed")
        whole.communicate(timeout=300)
        total = time.monotonic() - started
        assert whole.returncode == 0 and total > 2.0, total
        for fraction in (0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8):
            for attempt in range(3):  # a run that ends before its moment (the load eased) times the next one
                offset = fraction * total
                scratch = tmp_path / f"tmp{fraction}-{attempt}"
                scratch.mkdir()
                started = time.monotonic()
                process = start(scratch)
                while not list(scratch.iterdir()) and process.poll() is None:  # its handler is in place
                    time.sleep(0.01)
                time.sleep(max(0.0, started + offset - time.monotonic()))
                if process.poll() is None:
                    break
                assert process.returncode == 0, (offset, process.communicate())
                total = min(total, time.monotonic() - started)
            assert process.poll() is None, (offset, process.communicate())
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=60)
            assert process.returncode == 130, (offset, stderr)
            assert without_progress(stderr) == "Interrupted.\n" and not stdout, (offset, stderr)
            assert not list(scratch.iterdir()), offset
    finally:
        loader.kill()
        loader.wait()


@pytest.mark.slow
def test_quiet_prints_the_verdict_lines_only_with_an_fp16_archive(tmp_path: Path) -> None:
    """Issue 40, item 9: -q with --precision fp16 on a TorchScript archive printed torch's UserWarning on the
    .grad of a non-leaf tensor (casting the archive to float64 and float16)."""
    from tests.culprit_models import save_archive
    from tests.precision_models import SHAPE, overflow

    save_archive(overflow(), SHAPE, tmp_path / "model.pt")
    done = _trtdiff(
        "compare", "model.pt", "--no-config", "--input-shape", SHAPE, "--precision", "fp16", "-q",
        "--backends", "torch,onnxruntime,onnx-reference", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr == "", "no warning, no progress"
    assert done.stdout.startswith("FAIL: ") and "Warning" not in done.stdout and "CULPRIT: /Mul_1" in done.stdout
