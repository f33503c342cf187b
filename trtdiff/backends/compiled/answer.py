"""Did marking change the answer? The plain model's final outputs against the marked model's, and a bisection.

Shared by the compiled runtimes (TensorRT engines, OpenVINO compiled models); written first for TensorRT.

Marking tensors can change what TensorRT builds (fusion, memory reuse, precision), and so the
numbers (NVIDIA/TensorRT #3258, #4338, #4400, #4804). The comparison therefore runs the plain
engine (the one that ships) beside the marked one and compares their final outputs on every
run of every sample (`AnswerCheck`); the figures are kept raw and judged against the
comparison's thresholds at the end (`verdict`). Where they differ, `minimal_marks` finds the
marks whose marking changes the answer: each step rebuilds with half of the candidates
marked (one build per half tested), keeping a half that still changes it, and where neither
half alone does (two marks acting together) it narrows each half with the other one marked,
delta-debugging style. The step that builds and runs an engine is the `changes` callable, so
the search itself is plain Python (tested on the CPU with a stand-in comparator). How two
outputs are compared is handed in (`OutputComparison`: analysis.metrics.compare_tensors, given
by the pipeline), so the backend stage imports nothing from the analysis above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.report import MarkingCheck, PairMetrics, Thresholds, number

if TYPE_CHECKING:
    from trtdiff.backends.base import OutputComparison

# Raw figures: nothing is judged while they are collected.
_RAW = Thresholds(min_cosine=-1.0, rtol=float("inf"))
MAX_BISECT_BUILDS = 64


@dataclass
class AnswerCheck:
    """The worst difference between the plain and the marked engine's outputs, per output, over every run.

    `compare` computes the figures of one output pair (analysis.metrics.compare_tensors).
    """

    compare: OutputComparison
    samples: int = 0
    runs: int = 0
    worst: dict[str, PairMetrics] = field(default_factory=dict)
    witness: dict[str, np.ndarray] | None = None  # the feeds of the sample that differed most
    witness_plain: dict[str, np.ndarray] | None = None  # the plain engine's outputs on it
    _witness_rel: float = -1.0
    _sample_seen: bool = False

    def new_sample(self) -> None:
        self.samples += 1
        self._sample_seen = True

    def add(
        self, feeds: Mapping[str, np.ndarray], plain: Mapping[str, np.ndarray], marked: Mapping[str, np.ndarray]
    ) -> None:
        """One run's final outputs of both engines (numpy, by ONNX name)."""
        if not self._sample_seen:
            self.new_sample()
        self.runs += 1
        largest = -1.0
        for name in plain:
            if name not in marked:
                continue
            metrics = self.compare(plain[name], marked[name], _RAW)
            previous = self.worst.get(name)
            if previous is None or _size(metrics) > _size(previous):
                self.worst[name] = metrics
            largest = max(largest, _size(metrics))
        if largest > 0 and largest > self._witness_rel:
            self._witness_rel = largest
            self.witness = {k: np.array(v, copy=True) for k, v in feeds.items()}
            self.witness_plain = {k: np.array(v, copy=True) for k, v in plain.items()}

    def differs(self) -> bool:
        """Whether any output differed at all (bitwise, or in NaN/Inf counts)."""
        return any(_size(m) > 0 for m in self.worst.values())

    def changed(self, thresholds: Thresholds) -> bool:
        """Whether any output differed beyond the thresholds."""
        return any(breaks(m, thresholds) for m in self.worst.values())

    def verdict(self, thresholds: Thresholds) -> MarkingCheck:
        """The check as the report states it (no bisection: see `minimal_marks`)."""
        if not self.runs:
            return MarkingCheck(status="not run", reason="no sample ran both engines")
        name, metrics = max(self.worst.items(), key=lambda item: _size(item[1]))
        return MarkingCheck(
            status="changed" if self.changed(thresholds) else "same",
            samples=self.samples,
            runs=self.runs,
            worst_output=name,
            cosine=metrics.cosine,
            max_abs=metrics.max_abs,
            rel_err=metrics.rel_err,
        )


def breaks(metrics: PairMetrics, thresholds: Thresholds) -> bool:
    """Whether raw figures break `thresholds` (the same rules as analysis.metrics.compare_tensors)."""
    if metrics.shape_mismatch or metrics.mismatches:
        return True
    if metrics.nan_cand != metrics.nan_ref or metrics.inf_cand != metrics.inf_ref:
        return True
    if metrics.cosine is None or metrics.rel_err is None or metrics.max_abs is None:  # no finite values to hold them
        return True
    if metrics.cosine < thresholds.min_cosine or metrics.rel_err > thresholds.rtol:
        return True
    return thresholds.max_abs is not None and metrics.max_abs > thresholds.max_abs


def _size(metrics: PairMetrics) -> float:
    """How different two outputs are, for ranking: relative error, then 1 - cosine; infinite for a shape/NaN change."""
    if metrics.shape_mismatch or metrics.nan_cand != metrics.nan_ref or metrics.inf_cand != metrics.inf_ref:
        return float("inf")
    rel_err, cosine = number(metrics.rel_err), number(metrics.cosine)  # n/a ranks as the largest
    rel = rel_err if np.isfinite(rel_err) else float("inf")
    return rel + (1.0 - cosine if np.isfinite(cosine) else 1.0) * 1e-6 + float(metrics.mismatches or 0)


@dataclass(frozen=True)
class Bisection:
    """The marks found, how many builds it took, and a note where the search stopped early."""

    marks: tuple[str, ...]
    builds: int
    note: str | None = None


class _OutOfBuilds(Exception):
    pass


def minimal_marks(
    marks: Sequence[str], changes: Callable[[Sequence[str]], bool], *, max_builds: int = MAX_BISECT_BUILDS
) -> Bisection:
    """A small set of `marks` whose marking alone changes the answer (`changes(all marks)` is known true).

    With one responsible mark it takes between log2(N) and 2*log2(N) builds; marks that only
    change the answer together are all named. Stops after `max_builds` builds with the set
    narrowed so far, and says so.
    """
    builds = 0

    def test(candidate: Sequence[str]) -> bool:
        nonlocal builds
        if builds >= max_builds:
            raise _OutOfBuilds
        builds += 1
        return changes(candidate)

    narrowed: list[str] = list(marks)

    def search(fixed: list[str], candidates: list[str]) -> list[str]:
        nonlocal narrowed
        if len(candidates) <= 1:
            return candidates
        half = len(candidates) // 2
        first, second = candidates[:half], candidates[half:]
        if test([*fixed, *first]):
            narrowed = [*fixed, *first]
            return search(fixed, first)
        if test([*fixed, *second]):
            narrowed = [*fixed, *second]
            return search(fixed, second)
        first_needed = search([*fixed, *second], first)
        second_needed = search([*fixed, *first_needed], second)
        return [*first_needed, *second_needed]

    try:
        found = search([], list(marks))
    except _OutOfBuilds:
        return Bisection(
            tuple(narrowed),
            builds,
            f"stopped after {max_builds} builds; the answer changes with these {len(narrowed)} marks",
        )
    return Bisection(tuple(found), builds)


def judged(
    answer: AnswerCheck,
    thresholds: Thresholds,
    bisect: Callable[[], Bisection],
    *,
    strict: bool | None = None,
    can_bisect: bool = True,
    rename: Mapping[str, str] | None = None,
) -> MarkingCheck:
    """The check as the report states it, the marks bisected where asked (`bisect` runs the runtime's search).

    `strict`: None bisects when the answer changed beyond the thresholds, True as soon as the
    outputs differ at all, False never. `can_bisect` False (a mode whose marks the runtime
    picks): never. `rename`: the runtime's tensor names -> ONNX names, for the marks found.
    A bisection that fails leaves the check standing, with a note saying why.
    """
    import dataclasses

    from trtdiff.errors import describe_error

    verdict = answer.verdict(thresholds)
    wanted = verdict.status == "changed" if strict is None else (strict and answer.differs())
    if not wanted or not can_bisect or answer.witness is None:
        return verdict
    try:
        found = bisect()
    except Exception as error:  # noqa: BLE001 -- the check stands without the bisection; say why
        return dataclasses.replace(verdict, bisect_note=f"bisection failed: {describe_error(error)}")
    names = rename or {}
    return dataclasses.replace(
        verdict,
        bisected=tuple(names.get(t, t) for t in found.marks),
        bisect_builds=found.builds,
        bisect_note=found.note,
    )


def still_changes(check: AnswerCheck, thresholds: Thresholds, strict: bool) -> bool:
    """A bisection step's answer: outputs that differ at all (`strict`), else beyond the thresholds."""
    return check.differs() if strict else check.changed(thresholds)
