"""How an option is declared: a dataclass field (name, type, default) carrying an `Option` (help, group,
flag, the commands that show it, how its text is read).

`declarations(part)` reads them back as `Declared` rows; the command line's flags, the
README's options reference, the config-file reader and `compare(**fields)` all work from
those rows, so an option is written down once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from trtdiff.errors import OptionError

Command = Literal["compare", "run", "build", "inspect", "demo", "report", "view"]
ALL: tuple[Command, ...] = ("compare", "run", "build", "inspect")
COMPARE: tuple[Command, ...] = ("compare",)
Parser = Callable[[str, str], Any]
"""Reads an option's text (command line, config file) for a parameter: `parser(text, parameter)`."""


@dataclass(frozen=True)
class Option:
    """Everything about an option but its name, type and default (those are the field's).

        `flag`: the command line's spelling; "" derives `--field-name`, None keeps the option
        out of the command line (library only). `parse` reads one item of text (for a tuple
        field, one item of a repeated flag or a comma list); None reads by the field's type.
        `alias`: a second flag that sets the field to a value, `("--fp16", "fp16")`: `--fp16` is
        `--precision fp16` (the command line only; giving both with different values is an error).
        `secondary`: the flag that sets a bool field to False (`--no-culprit`); `repeat`: the flag
    may be given several times (one item each); `short`: a one-letter alias (`-q`). `runs_code`:
        an option that makes trtdiff run code from a file or module, taken from the command
        line only (never from a config file). `writes`: an option that names a file or folder trtdiff
        writes, or lets it overwrite one (`force`); also from the command line only, so a config
        file in a checked-out repository cannot make trtdiff write anywhere. `default_text`: how help
        shows the default when the value itself would not read well (sizes). `last`: listed after the
        others of its group.
    """

    help: str
    group: str
    commands: tuple[Command, ...] = ALL
    flag: str | None = ""
    metavar: str | None = None
    parse: Parser | None = None
    alias: tuple[str, object] | None = None
    secondary: str | None = None
    repeat: bool = False
    short: str | None = None
    required: bool = False
    runs_code: bool = False
    writes: bool = False
    default_text: str | None = None
    last: bool = False


def option(default: Any = dataclasses.MISSING, *, factory: Callable[[], Any] | None = None, **declared: Any) -> Any:
    """A dataclass field with its declaration: `seed: int = option(0, help=..., group=...)`."""
    metadata = {"option": Option(**declared)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """One option as declared: its field (name, type, default) and its `Option`."""

    name: str
    part: type
    option: Option
    type: Any
    default: Any

    @property
    def flag(self) -> str | None:
        if self.option.flag is None:
            return None
        return self.option.flag or "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The values a Literal-typed option takes (None for other types)."""
        literal = _literal(self.type)
        return tuple(str(v) for v in typing.get_args(literal)) if literal is not None else None

    @property
    def is_bool(self) -> bool:
        return _bare(self.type) is bool

    @property
    def is_tuple(self) -> bool:
        return typing.get_origin(_bare(self.type)) is tuple

    @property
    def is_dict(self) -> bool:
        return typing.get_origin(_bare(self.type)) is dict

    def read(self, value: Any) -> Any:
        """The field's value from what a caller, the command line or a config file gave.

        Text is parsed for non-text fields (`"2GB"` for a size), lists become tuples, a
        repeated flag's items are parsed one by one; typed values pass through unchanged.
        """
        if value is None:
            return None
        if self.is_dict:
            return self._read_dict(value)
        if self.is_tuple:
            return self._read_tuple(value)
        if isinstance(value, str) and not self._is_text():
            return self._read_text(value)
        if isinstance(value, list):
            return tuple(value)
        return value

    def _read_dict(self, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        items = [value] if isinstance(value, str) else list(value)
        parse = self.option.parse
        pairs: dict[str, str] = {}
        for item in items:
            key, path = parse(item, self.name) if parse is not None else tuple(item)
            pairs[str(key)] = str(path)
        return pairs

    def _read_tuple(self, value: Any) -> tuple[Any, ...]:
        if isinstance(value, str):
            parsed = self._read_text(value)
            return parsed if isinstance(parsed, tuple) else (parsed,)
        out: list[Any] = []
        for item in value:
            parsed = self._read_text(item) if isinstance(item, str) else item
            out.extend(parsed if isinstance(parsed, tuple) and not self._tuple_of_tuples() else [parsed])
        return tuple(out)

    def _read_text(self, text: str) -> Any:
        if self.option.parse is not None:
            return self.option.parse(text, self.name)
        bare = _bare(self.type)
        if self.choices is not None:
            if text not in self.choices:
                if "," in text:
                    raise OptionError("one value here; sweeps are for compare", parameter=self.name, value=text)
                raise OptionError(f"unknown; choose one of {', '.join(self.choices)}", parameter=self.name, value=text)
            return text
        if bare is bool:
            lowered = text.strip().lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise OptionError("expected true or false", parameter=self.name, value=text)
        if bare is int:
            from trtdiff.options.parse import parse_int

            return parse_int(text, self.name)
        if bare is float:
            from trtdiff.options.parse import parse_float

            return parse_float(text, self.name)
        return text

    def _is_text(self) -> bool:
        return _bare(self.type) is str and self.option.parse is None

    def _tuple_of_tuples(self) -> bool:
        args = typing.get_args(_bare(self.type))
        return bool(args) and typing.get_origin(args[0]) is tuple


def declarations(part: type) -> tuple[Declared, ...]:
    """The declared options of one part, in field order (fields without a declaration are internal)."""
    return _declarations(part)


@cache  # parts are fixed classes: their declarations never change while the program runs
def _declarations(part: type) -> tuple[Declared, ...]:
    hints = typing.get_type_hints(part)
    rows = []
    for field in dataclasses.fields(part):
        declared = field.metadata.get("option")
        if declared is None:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        rows.append(Declared(field.name, part, declared, hints[field.name], default))
    return tuple(rows)


def all_declarations(parts: Sequence[type]) -> Iterator[Declared]:
    for part in parts:
        yield from declarations(part)


def _bare(hint: Any) -> Any:
    """`X | None` -> X; other hints unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _literal(hint: Any) -> Any:
    bare = _bare(hint)
    return bare if typing.get_origin(bare) is Literal else None
