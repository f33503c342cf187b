"""One engine run per sample, its debug tensors streamed (stream.py): the queue, the thread, the ends of a run.

No engine runs on this project's machines, so the machinery a streamed run relies on is
tested with what can run: plain Python producers feeding the same `TensorStream` and
`ThreadedRun` the runtime uses (not a stand-in for TensorRT: these are the classes under
test). The real listener feeding a stream is in test_tensorrt_runtime.py (TensorRT-RTX) and
test_tensorrt_buffers.py (the collector alone).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from trtdiff.backends.base import chunk_names
from trtdiff.backends.tensorrt.stream import TensorStream, ThreadedRun
from trtdiff.errors import BackendError

SIZES = {"a": 3, "b": 3, "c": 3, "d": 5, "e": 0, "big": 20, "f": 2, "g": 2, "h": 2, "i": 2}


def _feed(sizes: dict[str, int], dropped: list[str] | None = None):
    """A producer that hands over each name with its size (value: the name, upper-cased), as the listener does."""

    def produce(stream: TensorStream[str]) -> int:
        for name, nbytes in sizes.items():
            target = stream.route(name)
            if target is None:
                continue
            if not stream.reserve(nbytes):  # the consumer stopped: the run goes on, copying nothing
                if dropped is not None:
                    dropped.append(name)
                continue
            stream.put(target, name.upper(), nbytes)
        return len(sizes)

    return produce


def test_chunks_come_as_the_bound_packs_them_and_never_more_is_held() -> None:
    """The consumer gets the values in order, in the very chunks chunk_names makes, holding at most max_bytes."""
    run: ThreadedRun[str, int] = ThreadedRun(_feed(SIZES), 8)
    chunks = [dict(chunk) for chunk in run.chunks()]
    names = list(SIZES)
    assert [list(chunk) for chunk in chunks] == chunk_names(names, SIZES, 8)
    assert [list(chunk) for chunk in chunks] == [["a", "b"], ["c", "d", "e"], ["big"], ["f", "g", "h", "i"]]
    assert chunks[0] == {"a": "A", "b": "B"} and run.result == len(SIZES)
    assert run.stream.peak == 20  # the one value over the bound, alone; everything else within 8 bytes
    assert not run.thread.is_alive()
    whole: ThreadedRun[str, int] = ThreadedRun(_feed(SIZES), 1 << 62)  # what fetch asks: one chunk
    assert [list(chunk) for chunk in whole.chunks()] == [names]


def test_a_chunk_is_held_until_the_next_is_asked_for() -> None:
    """The producer waits while the consumer works on a chunk: held bytes never pass the bound, over time."""
    seen: list[int] = []
    sizes = {f"t{i}": 4 for i in range(12)}
    run: ThreadedRun[str, int] = ThreadedRun(_feed(sizes), 8)
    for chunk in run.chunks():
        assert len(chunk) == 2
        threading.Event().wait(0.01)  # the comparison's work on the chunk: the engine may not run ahead
        seen.append(run.stream.peak)
    assert seen == [8] * 6 and not run.thread.is_alive()


def test_routing_drops_unwanted_names_before_any_room_is_taken() -> None:
    wanted = {"a": "onnx_a", "d": "onnx_d"}
    run: ThreadedRun[str, int] = ThreadedRun(_feed(SIZES), 1 << 20, wanted.get)
    assert [dict(chunk) for chunk in run.chunks()] == [{"onnx_a": "A", "onnx_d": "D"}]
    assert run.stream.peak == 8


def test_an_error_of_the_run_reaches_the_consumer_and_the_thread_is_joined() -> None:
    def failing(stream: TensorStream[str]) -> int:
        for name in ("a", "b", "c"):
            stream.reserve(4)
            stream.put(name, name, 4)
        raise BackendError("TensorRT failed to run the engine for m.onnx: out of memory")

    run: ThreadedRun[str, int] = ThreadedRun(failing, 8)
    got: list[list[str]] = []
    with pytest.raises(BackendError, match="out of memory"):
        for chunk in run.chunks():
            got.append(list(chunk))
    assert got == [["a", "b"]] and not run.thread.is_alive()  # "c", queued before the failure, is dropped
    with pytest.raises(BackendError, match="stopped before it finished"):
        _ = run.result


def test_closing_early_stops_the_copies_and_joins_the_thread() -> None:
    """The comparison stops after one chunk: the run goes to its end copying nothing more, and nothing is kept."""
    dropped: list[str] = []
    sizes = {f"t{i}": 8 for i in range(50)}
    run: ThreadedRun[str, int] = ThreadedRun(_feed(sizes, dropped), 8)
    chunks = run.chunks()
    assert list(next(chunks)) == ["t0"]
    chunks.close()  # what a generator's caller does when it stops reading
    assert not run.thread.is_alive() and run.stream.closed
    assert len(dropped) >= 48 and run.result == 50  # the producer ran to its end, copying nothing
    assert run.stream.held == 0 and list(run.stream.chunks()) == []  # nothing queued is kept
    run.close()  # idempotent


def test_an_interrupt_in_the_comparison_stops_the_run() -> None:
    """KeyboardInterrupt raised where the consumer holds a chunk (as the runtime's generator sees it)."""
    dropped: list[str] = []
    run: ThreadedRun[str, int] = ThreadedRun(_feed({f"t{i}": 8 for i in range(20)}, dropped), 8)
    chunks = run.chunks()
    next(chunks)
    with pytest.raises(KeyboardInterrupt):
        chunks.throw(KeyboardInterrupt)
    assert not run.thread.is_alive() and len(dropped) >= 18


_CTRL_C = """
import signal, threading
from trtdiff.backends.tensorrt.stream import ThreadedRun

main = threading.get_ident()

def interrupted(stream):
    signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C, delivered to the main thread
    while stream.reserve(1):  # the engine goes on until the consumer has stopped
        stream.put("t", "T", 1)
        threading.Event().wait(0.001)
    return 0

run = ThreadedRun(interrupted, 1 << 30)  # never full: the consumer waits for the end
try:
    for _ in run.chunks():
        pass
except KeyboardInterrupt:
    print("interrupted", run.thread.is_alive(), run.stream.closed, threading.active_count())
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill")
def test_ctrl_c_while_the_consumer_waits_stops_the_run_and_joins_it() -> None:
    """A real SIGINT reaches the main thread while it waits for the engine's next tensor (a fresh interpreter:
    in this one, a native library loaded by earlier tests may have SIGINT do something else)."""
    done = subprocess.run([sys.executable, "-c", _CTRL_C], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted", "False", "True", "1"]  # the thread joined, none left


def test_closed_before_the_thread_ran_produces_nothing() -> None:
    calls: list[int] = []
    run: ThreadedRun[str, int] = ThreadedRun(lambda stream: calls.append(1) or 0, 8)
    run.stream.close()
    assert list(run.chunks()) == [] and calls == [] and not run.thread.is_alive()
