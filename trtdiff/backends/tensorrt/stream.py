"""One engine run per sample: its debug tensors handed to the comparison as they fire, in chunks of bounded bytes.

TensorRT reports a debug tensor by calling the listener's `process_debug_tensor` while the
engine runs, and the address it hands over is valid only during that call (so NVIDIA's
debugTensorWriter sample and Polygraphy's runner copy the tensor inside the callback). The
comparison wants the tensors in chunks of at most `max_bytes`, and should not hold more. So
the run goes on a thread of its own (`ThreadedRun`): its listener copies each wanted tensor
to the host and puts it into a `TensorStream`, a queue bounded in bytes whose `reserve`
blocks while the queue is full (the engine then waits inside the callback); the comparison
reads chunks from the other end as they come.

Nothing here knows TensorRT: the producer is any callable handed the stream, so the queue,
the chunking, the thread, early closing and errors are tested with plain Python producers.
The bound counts what is reserved, queued and handed out: a chunk handed to the consumer is
counted until the consumer asks for the next one, so at most `max_bytes` (or one tensor
larger than that, alone) is held at any time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from trtdiff.errors import BackendError

T = TypeVar("T")
R = TypeVar("R")


class TensorStream(Generic[T]):
    """A byte-bounded hand-over of named values from one producer thread to one consumer.

    Producer: `route(name)` (the name to hand a value over under, None: not wanted),
    `reserve(nbytes)` (wait for room; False once the consumer stopped), then `put` (or
    `release` where the copy failed), and `finish(error)` at the end. Consumer: `chunks()`,
    and `close()` when it stops, early or not.
    """

    def __init__(self, max_bytes: int, route: Callable[[str], str | None] | None = None) -> None:
        self.max_bytes = max(1, int(max_bytes))
        self._route = route
        self._cond = threading.Condition()
        self._queued: list[tuple[str, T, int]] = []
        self._held = 0  # bytes reserved, queued or handed out and not yet given back
        self._handed = 0  # bytes of the chunk the consumer holds
        self._blocked = False  # the producer waits for room
        self._done = False
        self._error: BaseException | None = None
        self.closed = False
        self.peak = 0  # the most bytes held at once

    @property
    def held(self) -> int:
        """Bytes reserved, queued or handed out and not yet given back."""
        return self._held

    def route(self, name: str) -> str | None:
        return name if self._route is None else self._route(name)

    def reserve(self, nbytes: int) -> bool:
        """Wait until `nbytes` more fit (a value over `max_bytes` waits until nothing is held); False once closed."""
        with self._cond:
            while not self.closed and self._held and self._held + nbytes > self.max_bytes:
                self._blocked = True
                self._cond.notify_all()
                self._cond.wait()
            self._blocked = False
            if self.closed:
                return False
            self._held += nbytes
            self.peak = max(self.peak, self._held)
            return True

    def put(self, name: str, value: T, nbytes: int) -> None:
        """Queue a value whose `nbytes` were reserved (dropped once the consumer stopped)."""
        with self._cond:
            if not self.closed:
                self._queued.append((name, value, nbytes))

    def release(self, nbytes: int) -> None:
        """Give back a reservation that no value will fill (its copy failed)."""
        with self._cond:
            if not self.closed:
                self._held -= nbytes
                self._cond.notify_all()

    def finish(self, error: BaseException | None = None) -> None:
        """The producer is done; `error`, if any, is raised to the consumer (instead of what is still queued)."""
        with self._cond:
            self._done, self._error = True, error
            self._cond.notify_all()

    def close(self) -> None:
        """The consumer stops: whatever is queued is dropped, and the producer's `reserve` answers False."""
        with self._cond:
            self.closed = True
            self._queued.clear()
            self._held = self._handed = 0
            self._cond.notify_all()

    def chunks(self) -> Iterator[dict[str, T]]:
        """The values by name, in the order put, each chunk as full as the bound allows; the producer's error raised."""
        while True:
            chunk = self._next_chunk()
            if chunk is None:
                return
            yield chunk
            del chunk  # given back at the next call: hold no reference to it meanwhile

    def _next_chunk(self) -> dict[str, T] | None:
        """Give the last chunk back, wait until the producer is blocked or done, take what is queued (None: the end)."""
        with self._cond:
            self._held -= self._handed
            self._handed = 0
            self._cond.notify_all()
            while not (self._done or (self._blocked and self._queued)):
                self._cond.wait()
            if self._error is not None:
                raise self._error  # what was queued before it is dropped: the run failed
            if not self._queued:
                return None
            self._handed = sum(nbytes for _, _, nbytes in self._queued)
            chunk = {name: value for name, value, _ in self._queued}
            self._queued.clear()
            return chunk


class ThreadedRun(Generic[T, R]):
    """`produce(stream)` on a thread of its own, read as chunks by the caller; `close()` stops and joins it.

    The thread is a daemon, so a process that ends on Ctrl-C (cli.interrupt) never waits for
    it; in process, the thread is always joined before `chunks()` ends, however it ends.
    """

    def __init__(
        self,
        produce: Callable[[TensorStream[T]], R],
        max_bytes: int,
        route: Callable[[str], str | None] | None = None,
        name: str = "trtdiff-tensorrt-run",
    ) -> None:
        self.stream: TensorStream[T] = TensorStream(max_bytes, route)
        self._produce = produce
        self._result: list[R] = []
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        error: BaseException | None = None
        try:
            if not self.stream.closed:  # closed before the thread ran: nothing to produce
                self._result.append(self._produce(self.stream))
        except BaseException as caught:  # noqa: BLE001 -- handed to the consumer, raised in its thread
            error = caught
        finally:
            self.stream.finish(error)

    def chunks(self) -> Iterator[dict[str, T]]:
        """Start the producer and yield its chunks as they come; then `result` is what it returned.

        Its error is raised here; an error or Ctrl-C here, or the caller closing the generator,
        closes the stream (the producer drops the rest) and joins the thread.
        """
        try:
            self.thread.start()
            yield from self.stream.chunks()
        finally:
            self.close()

    @property
    def result(self) -> R:
        """What the producer returned (once `chunks()` ended; BackendError if it did not finish)."""
        if not self._result:
            raise BackendError("the TensorRT run was stopped before it finished")
        return self._result[0]

    def close(self) -> None:
        """Close the stream and wait for the thread (idempotent; what the producer still copies is dropped)."""
        self.stream.close()
        if self.thread.ident is not None and self.thread is not threading.current_thread():
            self.thread.join()
