"""rich's Text for lines that hold names from files: their control characters shown as escapes, never markup.

Every terminal renderer builds its lines as `SafeText` (`SafeText("...")`,
`SafeText.assemble(("FAIL", "bold red"), ": ...")`, table cells): the text of each part goes
through `trtdiff.report.text.plain`, so a node name's line break, ESC sequence or OSC 8 link
reaches the terminal as visible escapes (`\\n`, `\\x1b`), and, being a Text rather than a
string, nothing in it is read as rich markup (`[red]` stays `[red]`).
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text

from trtdiff.report.text import plain


class SafeText(Text):
    """A rich Text whose string parts are `plain`: one line, no control character."""

    def __init__(self, text: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(plain(text), *args, **kwargs)

    def append(self, text: str | Text, style: str | Style | None = None) -> Text:
        return super().append(plain(text) if isinstance(text, str) else text, style)
