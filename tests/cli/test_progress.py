"""trtdiff.cli.progress: a bar per step on a terminal, one line per step with its duration in a log, none with --quiet."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from rich.console import Console

from trtdiff.cli.progress import StepLines, progress_display
from trtdiff.options import CompareOptions
from trtdiff.pipeline.progress import SAMPLES, Step, as_step, sample_step, sample_total


def _clock(times: list[float]) -> Iterator[float]:
    yield from times


def test_a_log_gets_one_line_per_step_with_its_duration() -> None:
    out = io.StringIO()
    ticks = _clock([0.0, 1.5, 1.5, 4.0, 4.0, 6.0, 6.0, 11.3])
    lines = StepLines(out, clock=lambda: next(ticks))
    lines("loading the model")
    lines("exporting to ONNX")
    lines(sample_step(0, 3, "a"))
    lines(sample_step(1, 3, "b"))  # the same step: no line of its own
    lines(sample_step(2, 3, "c"))
    lines("running each node alone on the reference's inputs (local error)")
    lines.finish()
    assert out.getvalue().splitlines() == [
        "trtdiff: loading the model (1.5 s)",
        "trtdiff: exporting to ONNX (2.5 s)",
        "trtdiff: samples: 3 of 3 (2.0 s)",
        "trtdiff: running each node alone on the reference's inputs (local error) (5.3 s)",
    ]


def test_a_step_is_its_text_for_callbacks_that_read_text() -> None:
    step = sample_step(2, 24, "img3")
    assert step == "final outputs of sample 3/24 (img3)" and isinstance(step, str)
    assert (step.key, step.done, step.total) == (SAMPLES, 2, 24)
    assert Step("exporting").key == "exporting" and Step("exporting").total is None
    assert sample_total(CompareOptions()) == 1 and sample_total(CompareOptions().with_fields(num_samples=7)) == 7


def test_a_terminal_gets_a_bar_per_step_with_counts_and_time_left() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with progress_display(quiet=False, console=console) as progress:
        assert progress is not None
        progress("loading the model")
        for index in range(4):
            progress(sample_step(index, 4, f"s{index}"))
    shown = out.getvalue()
    assert "loading the model" in shown and "final outputs of sample 4/4 (s3)" in shown
    assert "4/4" in shown and "━" in shown  # the count and the bar


def test_quiet_shows_nothing_and_a_log_gets_lines() -> None:
    with progress_display(quiet=True, console=Console(file=io.StringIO(), force_terminal=True)) as progress:
        assert progress is None
    out = io.StringIO()
    with progress_display(quiet=False, console=Console(file=out, force_terminal=False)) as progress:
        assert progress is not None
        progress("exporting to ONNX")
    assert out.getvalue().startswith("trtdiff: exporting to ONNX (") and out.getvalue().endswith(" s)\n")


def test_a_step_stopped_by_an_error_is_not_written() -> None:
    out = io.StringIO()
    with pytest.raises(ValueError), progress_display(quiet=False, console=Console(file=out)) as progress:
        assert progress is not None
        progress("loading the model")
        raise ValueError("stop")
    assert out.getvalue() == ""


def test_a_sample_named_by_a_file_is_shown_as_text() -> None:
    """Issue 30: an input file's name is a step's text; its markup, line break and ESC are shown, not obeyed."""
    name = "[red]x[/red]\n::add-mask::secret\x1b[31m"
    out = io.StringIO()
    lines = StepLines(out, clock=lambda: 0.0)
    lines(Step(f"reading {name}"))
    lines.finish()
    assert out.getvalue() == "trtdiff: reading [red]x[/red]\\n::add-mask::secret\\x1b[31m (0.0 s)\n"
    out = io.StringIO()
    with progress_display(quiet=False, console=Console(file=out, force_terminal=True, width=200)) as progress:
        assert progress is not None
        progress(sample_step(0, 2, name))
    shown = out.getvalue()
    assert "(\\[red]x" not in shown and "[red]x[/red]\\n::add-mask::secret\\x1b[31m" in shown
    assert "[31m" not in shown.replace("\\x1b[31m", "")


def test_sample_0_is_the_comparisons_own_step_and_later_samples_count_from_the_second() -> None:
    """Issue 40 item 6: "running onnxruntime and comparing every layer (0.0 s)" while its time went to "samples: 1 of
    1 (5.4 s)": sample 0 is compared under the comparison's own step, and only later samples are counted."""
    import trtdiff
    from tests.culprit_models import CNN_SHAPE, small_cnn

    for samples, counted in ((None, []), (3, [1, 2])):
        said: list[str] = []
        trtdiff.compare(small_cnn(), input_shapes=[CNN_SHAPE], num_samples=samples, progress=said.append)
        steps = [as_step(text) for text in said]
        assert [s.done for s in steps if s.key == SAMPLES] == counted
        assert any(s.startswith("running onnxruntime and comparing every layer") for s in steps)
