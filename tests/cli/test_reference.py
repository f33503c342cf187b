"""trtdiff.cli.reference: docs/options.md holds the reference the declarations generate."""

from __future__ import annotations

from pathlib import Path

from trtdiff.cli.reference import BEGIN, END, options_reference, replace_in
from trtdiff.options import every_option

OPTIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_the_options_doc_holds_the_generated_reference() -> None:
    text = OPTIONS_DOC.read_text()
    assert BEGIN in text and END in text
    assert replace_in(text) == text, "run: python -m trtdiff.cli.reference --write docs/options.md"


def test_every_option_has_a_row() -> None:
    reference = options_reference()
    for declared in every_option():
        shown = declared.flag if declared.flag is not None else f"{declared.name}="
        assert shown in reference, declared.name
