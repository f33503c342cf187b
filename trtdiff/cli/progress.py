"""Progress on stderr: a bar per step on a terminal, one line per finished step in a CI log, nothing with --quiet.

The library reports each step as it starts (`trtdiff.pipeline.progress.Step`: a description,
a key, and for samples how many of how many); this module turns that into rich's Progress on
a terminal (a row per step with its count, elapsed time and time left) or, without a
terminal, one line per step when it ends, with its duration: "trtdiff: exporting to ONNX (1.4 s)".
A step can name an input file or a sample: its text is shown through `plain`, never as markup.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from trtdiff.cli.interrupt import at_interrupt
from trtdiff.pipeline.progress import Step, as_step
from trtdiff.report.text import plain

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


@contextmanager
def progress_display(quiet: bool, console: Console | None = None) -> Iterator[Callable[[str], None] | None]:
    """The library's progress callback for this run: None with --quiet (nothing is shown)."""
    from rich.console import Console

    console = console or Console(stderr=True)
    if quiet:
        yield None
        return
    if not console.is_terminal:
        lines = StepLines(console.file)
        yield lines  # on an error the step it stopped is not written: the error's one line says what happened
        lines.finish()
        return
    bars = StepBars(console)
    with bars.progress, at_interrupt(bars.progress.stop):  # a Ctrl-C leaves the terminal as it found it
        try:
            yield bars
        finally:
            bars.finish()


class StepLines:
    """One line per step, written when the step ends (the next one starts, or the run ends), with its duration."""

    def __init__(self, out: IO[str], clock: Callable[[], float] = time.perf_counter) -> None:
        self.out = out
        self.clock = clock
        self.current: Step | None = None
        self.first: Step | None = None
        self.started = 0.0

    def __call__(self, text: str) -> None:
        step = as_step(text)
        if self.current is not None and step.key == self.current.key:
            self.current = step  # the next sample of a counted step: one line for all of them
            return
        self.finish()
        self.current, self.first, self.started = step, step, self.clock()

    def finish(self) -> None:
        """Write the line of the step that runs now, if any."""
        if self.current is None or self.first is None:
            return
        seconds = self.clock() - self.started
        self.out.write(f"trtdiff: {plain(_line(self.first, self.current))} ({seconds:.1f} s)\n")
        self.out.flush()
        self.current = self.first = None


def _line(first: Step, last: Step) -> str:
    if last.total is None and last.done is None:
        return str(first)
    done = (last.done or 0) + 1
    return f"{first.key}: {done} of {last.total}" if last.total else f"{first.key}: {done}"


class StepBars:
    """rich's Progress with a row per step: description, bar, count, elapsed time, time left."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress: Progress = Progress(
            SpinnerColumn(finished_text="[green]✓"),
            TextColumn("{task.description}", markup=False),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self.task: TaskID | None = None
        self.key: str | None = None

    def __call__(self, text: str) -> None:
        step = as_step(text)
        if self.task is not None and step.key == self.key:
            self._update(self.task, step)
            return
        self.finish()
        self.key = step.key
        self.task = self.progress.add_task(plain(str(step)), total=step.total, count=_count(step))
        self._update(self.task, step)

    def _update(self, task: TaskID, step: Step) -> None:
        fields: dict[str, Any] = {"count": _count(step), "description": plain(str(step))}
        if step.done is not None:
            fields["completed"] = step.done
        self.progress.update(task, **fields)

    def finish(self) -> None:
        """Mark the step that runs now as done (its bar full, its time stopped)."""
        if self.task is None:
            return
        total = self.progress.tasks[-1].total
        self.progress.update(self.task, total=total or 1, completed=total or 1, count=_final_count(self.progress))
        self.progress.stop_task(self.task)
        self.task = self.key = None


def _count(step: Step) -> str:
    if step.total:
        return f"{(step.done or 0)}/{step.total}"
    return ""


def _final_count(progress: Progress) -> str:
    task = progress.tasks[-1]
    return f"{int(task.total)}/{int(task.total)}" if task.total and task.fields.get("count") else ""
