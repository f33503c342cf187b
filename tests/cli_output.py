"""What the command line writes on stderr besides its one error line: progress, one line per finished step.

Outside a terminal (a CI log, a test's runner) each step that finished is written as
"trtdiff: STEP (1.2 s)" before an error's line; tests about the error read stderr without them.
"""

from __future__ import annotations

import re

PROGRESS_LINE = re.compile(r"^trtdiff: .+ \(\d+\.\d s\)$")


def without_progress(stderr: str) -> str:
    """`stderr` without its progress lines."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not PROGRESS_LINE.match(line.rstrip("\n")))
