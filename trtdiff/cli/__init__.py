"""The `trtdiff` command: flags parsed into typed options, one library call, one line per error.

`main` is the command as a process (the `trtdiff` script, `python -m trtdiff`); the click
group it runs is `trtdiff.cli.app.main`, which tests and other programs call in process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn


def main() -> NoReturn:
    """Run the `trtdiff` command, then end the process without tearing down the interpreter.

    Everything trtdiff opens is closed before the command returns (reports written, stores and
    temporary folders removed, sessions ended), so what a normal exit adds is freeing every
    object of torch, ONNX Runtime and numpy one by one: about half a second after any compare
    that imported torch, measured on the 2-core machine. Exit handlers still run and the output
    is flushed, as mypy's `hard_exit` does. Under a profiler or tracer (cProfile, coverage) the
    interpreter exits normally, so they write their results.
    """
    from trtdiff.cli.streams import hold_standard_streams

    hold_standard_streams()  # before anything opens a descriptor: none takes number 1 or 2
    from trtdiff.cli.app import main as command
    from trtdiff.cli.interrupt import ending_on_interrupt

    code: str | int | None = 0
    with ending_on_interrupt():  # Ctrl-C: exit 130, SIGTERM: 143, nothing left behind (trtdiff.cli.interrupt)
        try:
            command()  # click's standalone mode: ends in SystemExit
        except SystemExit as stop:
            code = stop.code
        if code is not None and not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
            print(code, file=sys.stderr)
            code = 1
        if not _observed():
            atexit._run_exitfuncs()
    if _observed():
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):  # a reader that has gone is no failure: the status stays the command's
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code or 0)


def _observed() -> bool:
    """Whether a profiler, tracer or debugger watches this process (it writes its results at a normal exit).

    cProfile and coverage hook in through sys.setprofile/settrace, or from Python 3.12 through
    sys.monitoring (cProfile always there), which has six tool slots.
    """
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(monitoring.get_tool(tool) is not None for tool in range(6))
