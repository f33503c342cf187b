"""trtdiff.cli.view: where no browser can open, `trtdiff view` says so and how to reach the page."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import trtdiff
from trtdiff.cli.view import no_display

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({}, "linux", True),
        ({"DISPLAY": ":0"}, "linux", False),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"BROWSER": "firefox"}, "freebsd14", False),
        ({"DISPLAY": ""}, "linux", True),
        ({}, "darwin", False),
        ({}, "win32", False),
    ],
)
def test_no_display_is_linux_without_a_display_or_a_browser_named(
    environ: dict[str, str], platform: str, expected: bool
) -> None:
    assert no_display(environ, platform) is expected


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("model_explorer") is None or importlib.util.find_spec("model_explorer_onnx") is None,
    reason="needs Model Explorer (pip install -e '.[test]')",
)
def test_view_without_a_display_says_no_browser_opens_and_serves(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    onnx_path = tmp_path / "m.onnx"
    report = trtdiff.compare(
        model, input_shapes=("1x3x16x16",), backends=("torch", "onnxruntime"), save_onnx=str(onnx_path)
    )
    report_path = tmp_path / "r.json"
    report.write_json(report_path)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "trtdiff.cli.app", "view", str(report_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any("http://" in line for line in seen):
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                break
            seen.append(line)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    text = "".join(seen)
    assert "no display here, so no browser opens" in text and "ssh -L" in text
    assert "http://" in text  # the address a user opens themselves
