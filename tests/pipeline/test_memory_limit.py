"""--memory-limit: a chunked comparison whose least memory cannot fit here is refused before any backend runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import trtdiff
from tests.cli_output import without_progress
from tests.culprit_models import small_cnn
from trtdiff.cli.app import main
from trtdiff.errors import OptionError

LIMIT = 64 << 10  # a chunk of the small CNN's tensors at 32x32: its graph runs in several segments


def _available(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """The memory this machine is said to have free (what source.inputs reads from /proc/meminfo)."""
    import trtdiff.source.inputs

    monkeypatch.setattr(trtdiff.source.inputs, "available_memory", lambda: count)


def test_a_frontier_that_does_not_fit_beside_the_limit_is_refused_with_the_figure_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _available(monkeypatch, LIMIT + 1024)  # the inputs fit (three copies of 12 KB); frontier + limit do not
    with pytest.raises(OptionError) as caught:
        trtdiff.compare(small_cnn(), input_shapes=["1x3x32x32"], opset=13, memory_bytes=LIMIT, torch_device="cpu")
    assert caught.value.parameter == "memory_bytes"
    message = str(caught.value)
    assert "of live tensors between the segments" in message and "65KB of memory is available" in message
    assert "lower" in message and "give a smaller input shape" in message


def test_the_refusal_is_one_line_naming_memory_limit_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, LIMIT + 1024)
    model = ["compare", "tests.culprit_models:small_cnn", "--input-shape", "1x3x32x32", "--opset", "13"]
    flags = ["--backends", "torch,onnxruntime", "--torch-device", "cpu", "--memory-limit", "64KB"]
    result = CliRunner().invoke(main, [*model, *flags])
    assert result.exit_code == 2, result.output
    lines = [line for line in without_progress(result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "--memory-limit" in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_with_the_memory_there_is_the_same_comparison_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, 1 << 30)
    report = trtdiff.compare(small_cnn(), input_shapes=["1x3x32x32"], opset=13, memory_bytes=LIMIT, torch_device="cpu")
    assert report.passed and report.layers


def test_the_culprit_pass_records_sample_0_again_spilling_only_what_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed comparison whose culprit pass records the reference again: what it spills to disk stays there until
    the end (it keeps only the values the pass reads), never written and then deleted."""
    from tests.culprit_models import dilate_first_conv, edited, export
    from trtdiff.backends.store import TensorStore
    from trtdiff.source.onnx_graph import load_graph

    model = small_cnn()
    source = export(model, "1x3x64x64", tmp_path / "cnn.onnx", 13)

    path, name = edited(source, tmp_path / "edited.onnx", dilate_first_conv)
    graph = load_graph(path)
    limit = sum(n for t in graph.node_outputs if (n := graph.tensor_type(t).nbytes()) is not None)  # one chunk
    stores: list[TensorStore] = []
    deleted: list[tuple[int, object]] = []  # (which store, key) of each value deleted from disk before the end
    make, discard = TensorStore.__init__, TensorStore.discard

    def noting(self: TensorStore, *args: object, **kwargs: object) -> None:
        make(self, *args, **kwargs)  # type: ignore[arg-type]
        stores.append(self)

    def dropping(self: TensorStore, key: object) -> None:
        if key in self._on_disk:
            deleted.append((stores.index(self), key))
        discard(self, key)  # type: ignore[arg-type]

    monkeypatch.setattr(TensorStore, "__init__", noting)
    monkeypatch.setattr(TensorStore, "discard", dropping)
    report = trtdiff.compare(  # on the CPU: a reference recorded on a GPU is held there, never streamed
        model,
        onnx=str(path),
        input_shapes=["1x3x64x64"],
        backends=["torch", "onnxruntime"],
        memory_bytes=limit,
        torch_device="cpu",
    )
    assert report.culprit is not None and report.culprit.onnx_node == name
    assert len(stores) >= 3 and any(s._files_written for s in stores[1:])  # the first, the streamed, the culprit pass's
    assert [key for index, key in deleted if index > 0] == []


def test_over_many_chunks_the_reference_streams_in_lockstep_writing_nothing_to_disk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sample 0's tensors take several chunks: PyTorch is recorded again and compared as the graph's segments come,
    each node run once; no recording spills, and the figures are those of one chunk."""
    from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
    from trtdiff.backends.store import TensorStore

    _available(monkeypatch, 1 << 30)
    stores: list[TensorStore] = []
    make = TensorStore.__init__

    def noting(self: TensorStore, *args: object, **kwargs: object) -> None:
        make(self, *args, **kwargs)  # type: ignore[arg-type]
        stores.append(self)

    runs: list[int] = []
    segmented = OnnxRuntimeBackend._run_segments
    monkeypatch.setattr(OnnxRuntimeBackend, "_run_segments", lambda self, *a: runs.append(1) or segmented(self, *a))
    monkeypatch.setattr(TensorStore, "__init__", noting)
    model = small_cnn()
    common = dict(input_shapes=["1x3x32x32"], opset=13, torch_device="cpu", backends=["torch", "onnxruntime"])
    small = trtdiff.compare(model, memory_bytes=LIMIT, **common)  # type: ignore[arg-type]
    assert small.passed and runs and all(store._files_written == 0 for store in stores)
    assert stores[0].dropped > 0  # the first recording kept what fits and the outputs, for the pairing
    whole = trtdiff.compare(model, **common)  # type: ignore[arg-type]
    figures = [(x.tensor, m.max_abs, m.cosine) for x in small.layers for m in x.pairs.values()]
    assert figures == [(x.tensor, m.max_abs, m.cosine) for x in whole.layers for m in x.pairs.values()]


def test_the_budget_shares_the_limit_once_between_the_reference_and_the_chunks() -> None:
    """MemoryBudget (issue 39): half the limit for any store of the reference; the chunks compared in the other
    half, shared by one chunk of each ONNX backend and, where the reference is read back, its values of that chunk;
    a reference on a GPU holds nothing on the host, so a chunk may take the whole limit; --chunk-bytes caps it."""
    from trtdiff.options import BackendOptions
    from trtdiff.pipeline.memory import MemoryBudget

    runtime = BackendOptions(memory_bytes=1200, chunk_bytes=1 << 30)
    assert MemoryBudget.plan(runtime, 2, on_host=True, read_back=False) == MemoryBudget(1200, 600, 300)
    assert MemoryBudget.plan(runtime, 2, on_host=True, read_back=True) == MemoryBudget(1200, 600, 200)
    assert MemoryBudget.plan(runtime, 2, on_host=False, read_back=True) == MemoryBudget(1200, 600, 1200)
    capped = BackendOptions(memory_bytes=1200, chunk_bytes=100)
    assert MemoryBudget.plan(capped, 1, on_host=True, read_back=False).chunk == 100


@pytest.mark.parametrize(
    ("fields", "mode", "chunk"),
    [
        ({}, "streamed", 1 << 19),  # half of 1 MB over one ONNX backend
        ({"culprit": True}, "held", 1 << 18),  # shared with the reference read back from its store
        ({"capture": "stats"}, "statistics", 1 << 19),
    ],
)
def test_a_comparison_reads_its_chunks_and_stores_from_one_budget(
    fields: dict[str, object], mode: str, chunk: int
) -> None:
    """The reference's mode is chosen once from the options, and the engine, the culprit pass and every store
    read the one budget it fixes (pipeline.reference, pipeline.memory)."""
    from contextlib import ExitStack

    from trtdiff.options import CompareOptions
    from trtdiff.pipeline.prepare import prepare
    from trtdiff.pipeline.reference import FirstRecording

    options = CompareOptions().with_fields(
        input_shapes=["1x3x32x32"], opset=13, memory_bytes=1 << 20, torch_device="cpu", **fields
    )
    with ExitStack() as stack:
        first = FirstRecording(options, stack)
        prepared = stack.enter_context(prepare(small_cnn(), options, record=first.record))
        reference = first.paired(prepared, {})
        assert reference.mode == mode and reference.budget.chunk == chunk and reference.budget.store == 1 << 19
        assert prepared.capture is not None and prepared.capture.store.memory_bytes == reference.budget.store
