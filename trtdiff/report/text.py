"""Text from files trtdiff did not write, made safe for the place it is written to.

Node, tensor and module names, op types, input file names and model paths come from a model,
an input folder, a saved report or a repro bundle: anyone can put a line break, an escape
sequence or markup in them. Written raw, such a name could start a new line of its own (a
GitHub Actions workflow command such as `::add-mask::`, a Markdown heading), recolour a
terminal or plant a link there (ESC sequences, OSC 8), or be read as rich markup, Markdown or
HTML. Every renderer passes such text through one of these functions where it formats it:

- `plain`: control characters made visible as escapes (`\\n`, `\\r`, `\\t`, `\\x1b`,
  `\\u2028`), so the text is one line with nothing a terminal acts on;
- `markdown`: `plain`, then the characters Markdown or HTML read escaped;
- `markdown_code`: `plain` for an inline code span (which shows everything else literally);
- `html`: `plain`, then HTML-escaped, quotes included (also safe in attributes);
- `markup`: `plain`, then rich markup escaped, for a string rich reads as markup.

It sits in `report/`, the lowest stage that holds such names, so every writer (render/,
analysis/, cli/) can import it.
"""

from __future__ import annotations

import html as _html
import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0, DEL, C1; line and paragraph separators; bidirectional embeddings, overrides and isolates
# (they reorder how a line reads on screen).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_MARKDOWN = "\\`*_[]"
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
"""A `<` that Markdown could read as the start of raw HTML (a tag, a comment, a declaration) or an autolink."""
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
"""An `&` that Markdown could read as the start of an entity or a numeric character reference."""


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def plain(text: str) -> str:
    """`text` as one line with no control character: each written as a visible escape (ESC as `\\x1b`).

    C0 and C1 control characters, DEL, the Unicode line and paragraph separators and the
    bidirectional controls are replaced; everything else, backslashes included, is kept, so a
    name reads as it was written.
    """
    return _UNSAFE.sub(_visible, text)


def markdown(text: str) -> str:
    """`text` safe as Markdown text: `plain`, `\\`*_[]` backslashed, and only where Markdown would read it as
    HTML a `<` or `&` as an entity (one that opens a tag, comment or autolink: `<` before a letter, `/`, `!`
    or `?`; one that starts an entity: `&` before `name;` or `#digits;`) and a leading `>` backslashed.

    With no line break of its own a name starts no block (heading, list, quote, table row), and
    with these escaped it opens no HTML tag, link, image, code span or emphasis; trtdiff's own
    words keep their `->`, `< 0.999` and `> 0.05` as written, in the file as on the page.
    """
    escaped = plain(text)
    for char in _MARKDOWN:
        escaped = escaped.replace(char, "\\" + char)
    escaped = _ENTITY.sub("&amp;", escaped)
    escaped = _TAG.sub("&lt;", escaped)
    return "\\" + escaped if escaped.startswith(">") else escaped


def markdown_code(text: str) -> str:
    """An inline code span of `text` (`plain`), fenced so that backticks in it cannot end it early."""
    text = plain(text)
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html(text: str) -> str:
    """`text` safe in HTML and SVG, attributes included: `plain`, then `<>&"'` as entities."""
    return _html.escape(plain(text), quote=True)


def markup(text: str) -> str:
    """`text` safe inside a string rich reads as markup: `plain`, then `[` escaped (rich.markup.escape)."""
    from rich.markup import escape

    return escape(plain(text))
