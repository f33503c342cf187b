"""trtdiff.report.text: text from files made one line with nothing a terminal, Markdown, HTML or rich acts on."""

from __future__ import annotations

import pytest

from trtdiff.report.text import html, markdown, markdown_code, markup, plain


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\n::add-mask::secret", "\\n::add-mask::secret"),
        ("\x1b]8;;http://evil\x07click\x1b]8;;\x07", "\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07"),
        ("\x1b[31m", "\\x1b[31m"),
        ("\r# heading\t", "\\r# heading\\t"),
        ("a\x85b\u2028c\u202ed\x7f\x00", "a\\x85b\\u2028c\\u202ed\\x7f\\x00"),
        ("C:\\models\\net.onnx [red]x[/red] é ✓", "C:\\models\\net.onnx [red]x[/red] é ✓"),  # kept as written
    ],
)
def test_plain_makes_every_control_character_visible(text: str, shown: str) -> None:
    assert plain(text) == shown
    assert plain(plain(text)) == plain(text)
    assert len(plain(text).splitlines()) <= 1


def test_markdown_html_and_markup_escape_what_their_reader_acts_on() -> None:
    assert markdown("\r# heading") == "\\\\r# heading"  # no line break: no heading
    assert markdown("![img](http://x)") == "!\\[img\\](http://x)"
    assert markdown("<script>*a*_b_`c`") == "&lt;script>\\*a\\*\\_b\\_\\`c\\`"
    assert markdown("&lt; &#60; <!-- a</b>") == "&amp;lt; &amp;#60; &lt;!-- a&lt;/b>"  # no entity, comment, tag
    assert markdown(">quote") == "\\>quote"  # no block quote where it starts a line


def test_markdown_keeps_the_words_arrows_and_comparisons_as_written() -> None:
    """Issue 40, item 8: the summary read "final rel-err 7.46e-01 -&gt; 6.29e-01" in the file."""
    assert markdown("rel-err 7.46e-01 -> 6.29e-01 (cosine 0.9 < 0.999; rel-err 0.4 > 0.05) & more") == (
        "rel-err 7.46e-01 -> 6.29e-01 (cosine 0.9 < 0.999; rel-err 0.4 > 0.05) & more"
    )
    assert markdown_code("a`b\nc") == "`` a`b\\nc ``" and markdown_code("x") == "`x`"
    assert html("<script>'\"&\x1b") == "&lt;script&gt;&#x27;&quot;&amp;\\x1b"
    assert markup("[red]x[/red]\n") == "\\[red]x\\[/red]\\n"
