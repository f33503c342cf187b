"""trtdiff.cli.demo: the embedded examples, and the demo's story (Resize diverges below opset 11, agrees from 11)."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from trtdiff.cli.demo import EXAMPLES, build_example, run_demo


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_are_seeded_modules_in_eval_mode(name: str) -> None:
    first, second = build_example(name), build_example(name)
    assert isinstance(first, torch.nn.Module)
    assert not any(module.training for module in first.modules())
    assert first.state_dict().keys() == second.state_dict().keys()
    assert all(torch.equal(first.state_dict()[k], second.state_dict()[k]) for k in first.state_dict())


@pytest.mark.slow
def test_run_demo_sweeps_names_the_culprits_and_what_inspect_says() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, color_system=None)
    assert run_demo("resnet", "1x3x32x32", [10, 13], console) is True
    text = buffer.getvalue()
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()[:3] in ("10 ", "13 ")}
    assert rows["10"][1:3] == ["torchscript", "FAIL"] and "/decoder/Resize" in rows["10"]
    assert rows["13"][1:4] == ["torchscript", "PASS", "-"]
    assert "CULPRIT: /decoder/Resize (Resize, module decoder) on torch~onnxruntime" in text
    assert "CULPRIT 2: /Resize (Resize, the model itself)" in text
    assert "inspect ERROR resize-no-coordinate-mode: /decoder/Resize" in text
    assert "re-export at opset 11 or higher (opset 11)" in text  # the library names parameters
    assert "As expected" in text and "did not show what it should" not in text
    assert "\x1b[" not in text  # no colour codes in a plain file console
