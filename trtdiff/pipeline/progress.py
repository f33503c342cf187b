"""What a comparison says as it goes: step descriptions that also carry which step and how far.

The library's `progress` callback takes one argument, a short description of the step that
starts ("exporting to ONNX"). A `Step` is that description (a `str`, so a callback written
for text keeps working) with a stable `key` naming the step and, for steps that count,
`done` of `total` (sample 3 of 24: done 2, total 24). The command line draws a progress bar
per step from these; the library draws nothing and imports no display library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtdiff.options import CompareOptions

Progress = Callable[[str], None]
SAMPLES = "samples"


class Step(str):
    """A step's description with its `key` and, for a counted step, `done` items of `total` (None: unknown)."""

    key: str
    done: int | None
    total: int | None

    def __new__(cls, text: str, key: str | None = None, done: int | None = None, total: int | None = None) -> Step:
        step = super().__new__(cls, text)
        step.key = key or text
        step.done = done
        step.total = total
        return step


def as_step(text: str) -> Step:
    """`text` as a Step (a plain description is a step of its own, keyed by its text)."""
    return text if isinstance(text, Step) else Step(text)


def sample_step(index: int, total: int | None, name: str) -> Step:
    """The step of sample `index` (from 0) of `total`: "final outputs of sample 3/24 (img3)"."""
    count = f"/{total}" if total else ""
    return Step(f"final outputs of sample {index + 1}{count} ({name})", SAMPLES, index, total)


def sample_total(options: CompareOptions) -> int | None:
    """How many samples the comparison runs: the random samples asked for, or the files of the inputs folder."""
    gate = options.gate
    if gate.num_samples is not None:
        return gate.num_samples
    if gate.inputs_dir is None:
        return 1
    from trtdiff.source.datasets import list_inputs

    try:
        return len(list_inputs(gate.inputs_dir))
    except Exception:  # noqa: BLE001 - a folder that cannot be listed is reported by the comparison itself
        return None
