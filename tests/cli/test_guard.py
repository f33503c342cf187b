"""trtdiff.cli.guard: no line the command did not mean as a workflow command reads as one on GitHub Actions."""

from __future__ import annotations

import io
import sys

import pytest

from trtdiff.cli.guard import CommandGuard, guarded_output, workflow_command


def _through(*writes: str) -> str:
    out = io.StringIO()
    guard = CommandGuard(out)
    for text in writes:
        guard.write(text)
        guard.flush()
    return out.getvalue()


@pytest.mark.parametrize(
    ("writes", "shown"),
    [
        (("::add-mask::secret\n",), "\\::add-mask::secret\n"),
        (("ok\n   ::set-output name=x::y\n",), "ok\n   \\::set-output name=x::y\n"),
        (("a\r::stop-commands::t\r\n",), "a\r\\::stop-commands::t\r\n"),
        ((":", ":error::x\n"), ":\\:error::x\n"),  # split across writes, the first ":" already flushed
        (("  ", "::x"), "  \\::x"),
        (("text ##[error]x\n",), "text ##\\[error]x\n"),
        (
            (
                "#",
                "#[warning]y",
            ),
            "##\\[warning]y",
        ),
        (("a :: b\n: x\n::\n",), "a :: b\n: x\n\\::\n"),  # only a line that starts with :: changes
        (("plain text, 1.0 :: 2.0\n",), "plain text, 1.0 :: 2.0\n"),
    ],
)
def test_a_line_that_would_be_a_command_is_marked(writes: tuple[str, ...], shown: str) -> None:
    assert _through(*writes) == shown


def test_trtdiffs_own_annotation_passes_on_a_line_of_its_own() -> None:
    out = io.StringIO()
    guard = CommandGuard(out)
    guard.write("half a line")
    guard.command("::error title=trtdiff%3A x::message")
    assert out.getvalue() == "half a line\n::error title=trtdiff%3A x::message\n"
    with pytest.raises(ValueError, match="not one workflow command"):
        guard.command("::error::a\n::add-mask::b")
    with pytest.raises(TypeError):
        guard.write(b"bytes")  # type: ignore[arg-type]


def test_the_streams_are_guarded_while_the_command_runs_and_restored_after() -> None:
    before = sys.stdout, sys.stderr
    with guarded_output():
        assert isinstance(sys.stdout, CommandGuard) and isinstance(sys.stderr, CommandGuard)
        assert not hasattr(sys.stdout, "buffer"), "click would write around the guard"
        assert sys.stdout.encoding == before[0].encoding
        workflow_command("::error title=t::m")
    assert (sys.stdout, sys.stderr) == before
