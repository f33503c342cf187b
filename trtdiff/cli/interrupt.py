"""Ctrl-C and SIGTERM in the `trtdiff` process: exit 130 (143), one line "Interrupted." ("Terminated."), and no
temporary file left.

SIGTERM is what CI cancellation, `timeout` and `kill` send; it is handled as SIGINT is, below,
and exits 143 (128 + 15, as a process ended by it would report).

Why the process never raises KeyboardInterrupt: Python raises it in whatever Python code runs
when SIGINT arrives, and much of a comparison's Python code is called back from native code
(PyTorch's dispatch and hooks, the exporters' symbolic functions, a finalizer run by a C++
destructor). Where the C++ caller cannot pass the exception on, the process ends in
std::terminate: "terminate called after throwing an instance of 'pybind11::error_already_set'",
exit 134 and a core dump, one interrupt in several under load. So `ending_on_interrupt`
installs a handler that raises nothing and ends the process itself:

- Python runs the handler in the main thread between two bytecodes, wherever they are. It
  stops the progress display (`at_interrupt`), removes what an interrupted run leaves (below),
  writes "Interrupted." and ends the process with os._exit(130). Nothing else of trtdiff's runs
  in the main thread meanwhile, so nothing is written into what it removes.
- Every temporary file of the process lies in one folder of its own: tempfile's (spill stores,
  exports, ONNX Runtime's and TensorRT's scratch folders) and TMPDIR's (native code). Removing
  that folder removes them all, whichever step was running; a normal end removes it too.
- A report is written whole: inside `writing()` the handler only notes the interrupt, and the
  block ends the process when it has finished. Every output is written under a temporary name
  beside its own and renamed into place when whole (trtdiff.outputs): what is being written
  then (a recording `run --save` writes as the backend runs, a repro bundle) is removed.
- While the main thread waits in a long native call, Python cannot run the handler. A second
  Ctrl-C is then seen by a watcher thread, woken through signal.set_wakeup_fd, which ends the
  process the same way: a stuck run still ends at once. A sender of SIGTERM does not send a
  second one (it kills the process a few seconds later), so the watcher ends the process
  itself when the main thread has not within `TERM_GRACE` seconds (unless its handler has run
  and waits for a report being written: `outputs.whole`).

In process (the click group called by tests or other programs) nothing is installed: Ctrl-C
is Python's KeyboardInterrupt, which the group turns into one line and exit 130.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from trtdiff import outputs

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
TERM_GRACE = 1.0  # seconds the main thread has to answer SIGTERM before the watcher ends the process
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_LINES = {signal.SIGINT: b"Interrupted.\n", signal.SIGTERM: b"Terminated.\n"}


class _Ending:
    """The interrupt state of this process: its temporary folder, what to undo, and whether an end is deferred."""

    def __init__(self, root: Path, stderr: int) -> None:
        self.root = root
        self.stderr = stderr  # a copy of descriptor 2: the exporter's silencing points 2 at a scratch file for a while
        self.at_end: list[Callable[[], None]] = []
        self.pending = False
        self.signum = signal.SIGINT  # the first signal that asked the process to end: its exit code and line
        self._asked = False
        self._once = threading.Lock()

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        """SIGINT or SIGTERM, in the main thread: end now, or when the files being written are whole. Never raises."""
        try:
            self._ask(signum)
            if not self.pending and outputs.defer(lambda: self.end(in_main=True)):
                self.pending = True
                return
            self.end(in_main=True)
        except BaseException:  # noqa: BLE001 - whatever failed, the process still ends as asked
            os._exit(128 + self.signum)

    def _ask(self, signum: int) -> None:
        if not self._asked:
            self._asked, self.signum = True, signal.Signals(signum)

    def watch(self, wakeup: socket.socket) -> None:
        """The watcher thread: a second signal, or a SIGTERM the main thread has not answered within TERM_GRACE,
        ends the process even while the main thread is in native code."""
        seen = 0
        with wakeup:
            while True:
                try:
                    data = wakeup.recv(64)
                except TimeoutError:  # SIGTERM, unanswered: the main thread is stuck
                    if not self.pending:
                        self.end(in_main=False)
                    wakeup.settimeout(None)
                    continue
                except OSError:
                    return
                if not data:  # the process ends normally
                    return
                for signum in (s for s in data if s in SIGNALS):
                    self._ask(signum)
                    seen += 1
                if seen >= 2:
                    self.end(in_main=False)
                elif signal.SIGTERM in data and wakeup.gettimeout() is None:
                    wakeup.settimeout(TERM_GRACE)

    def end(self, in_main: bool) -> None:
        """Stop the display (main thread), remove what the run leaves, say so, exit 130 (143 for SIGTERM)."""
        if not self._once.acquire(blocking=False):
            if in_main:  # the watcher is ending the process
                self._once.acquire()
            return
        if in_main:
            for undo in reversed(self.at_end):
                with contextlib.suppress(BaseException):
                    undo()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(BaseException):
                    stream.flush()
        with contextlib.suppress(BaseException):
            outputs.remove_in_progress()
        _remove(self.root)
        with contextlib.suppress(OSError):
            os.write(self.stderr, _LINES[self.signum])
        os._exit(128 + self.signum)


_ending: _Ending | None = None


@contextlib.contextmanager
def ending_on_interrupt() -> Iterator[None]:
    """For the block: SIGINT and SIGTERM end the process (see the module), temporary files go to a folder of the
    process's own."""
    global _ending
    if _ending is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        root = Path(tempfile.mkdtemp(prefix="trtdiff-"))
    except OSError:  # no temporary folder can be made: the step that needs one says so in its own line
        yield
        return
    earlier = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = str(root)
    ending = _Ending(root, os.dup(2))
    wakeup, signalled = socket.socketpair()
    signalled.setblocking(False)
    previous_fd = signal.set_wakeup_fd(signalled.fileno(), warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, ending.handle) for signum in SIGNALS}
    threading.Thread(target=ending.watch, args=(wakeup,), name="trtdiff-interrupt", daemon=True).start()
    _ending = ending
    try:
        yield
    finally:
        _remove(root)  # the handler still ends the process on SIGINT or SIGTERM here
        _ending = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        signalled.close()
        os.close(ending.stderr)
        tempfile.tempdir = earlier[0]
        if earlier[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = earlier[1]


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """Files written whole: an interrupt in the block ends the process when the block ends (a second one at once)."""
    with outputs.whole():
        yield


@contextlib.contextmanager
def at_interrupt(undo: Callable[[], None]) -> Iterator[None]:
    """Call `undo` before the process ends on an interrupt during the block (e.g. stop a live display)."""
    ending = _ending
    if ending is None:
        yield
        return
    ending.at_end.append(undo)
    try:
        yield
    finally:
        ending.at_end.remove(undo)


@contextlib.contextmanager
def raising_interrupts() -> Iterator[None]:
    """Python's KeyboardInterrupt for the block (a server that stops on Ctrl-C and returns, in pure Python)."""
    if _ending is None:
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _remove(root: Path) -> None:
    """Remove the process's temporary folder (again if a file appeared in it meanwhile)."""
    for _ in range(5):
        shutil.rmtree(root, ignore_errors=True)
        if not os.path.lexists(root):
            return
