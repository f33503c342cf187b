"""The command line's flags, generated from the option declarations, and their values read back.

`flags(command)` adds a click/cloup option for every option the command shows, in the
groups the declarations name; every flag defaults to None, so what the user gave is what is
not None. An option's alias (`--fp16` of `--precision`) is a click option of its own, folded
back into the option by `folded(values)`. `given(values)` reads those values with each option's
own reader (the same one `compare(**fields)` and a config file use) and sorts them into the
parts they belong to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import cloup

from trtdiff.errors import OptionError
from trtdiff.options import (
    COMPARE_PARTS,
    Command,
    ConfigOptions,
    Declared,
    DemoOptions,
    ReportOptions,
    RunOptions,
    SweepAxes,
    ViewOptions,
    declared_of,
    for_command,
)
from trtdiff.options.parse import format_bytes, parse_bytes

F = TypeVar("F", bound=Callable[..., Any])
GROUPS = (
    "Model and inputs",
    "Export",
    "Backends",
    "TensorRT",
    "Thresholds and culprits",
    "CI gate over many samples",
    "Reports",
    "Recording",
    "Demo",
    "Configuration",
    "Model Explorer",
)
ALIAS = "__alias"
"""The suffix of an alias's click parameter (`precision__alias` for `--fp16`): a name of its own."""


def flags(command: Command) -> Callable[[F], F]:
    """A decorator adding every option `command` shows, one cloup option group per declared group."""
    declared = for_command(command)
    groups = [(title, [d for d in declared if d.option.group == title]) for title in GROUPS]

    def decorate(function: F) -> F:
        for title, members in reversed(groups):
            if members:
                options = [made for d in members for made in (_click_option(d), *_alias_option(d))]
                function = cloup.option_group(title, *options)(function)
        return function

    return decorate


def _click_option(declared: Declared) -> Callable[[F], F]:
    """One click option for `declared`: its flag(s), default None, its help with the default."""
    assert declared.flag is not None
    option = declared.option
    names = [name for name in (option.short, declared.flag) if name]
    if option.secondary:
        names = [f"{declared.flag}/{option.secondary}"]
    kwargs: dict[str, Any] = {"default": None, "help": help_text(declared)}
    if declared.is_bool:
        kwargs["is_flag"] = True
    if option.metavar or declared.choices is not None:
        # Choices are checked by the option's reader, so a wrong one is one line like every other error.
        kwargs["metavar"] = option.metavar or "|".join(declared.choices or ())
    if option.repeat:
        kwargs["multiple"] = True
    if option.required:
        kwargs["required"] = True
    return cloup.option(*names, declared.name, **kwargs)


def _alias_option(declared: Declared) -> list[Callable[[F], F]]:
    """The click option of `declared`'s alias (none without one): `--fp16` gives `precision__alias` "fp16"."""
    if declared.option.alias is None:
        return []
    flag, value = declared.option.alias
    return [cloup.option(flag, declared.name + ALIAS, flag_value=value, default=None, help=alias_help(declared))]


def alias_help(declared: Declared) -> str:
    """ "Same as --precision fp16.": what an option's alias stands for."""
    assert declared.option.alias is not None
    return f"Same as {declared.flag} {declared.option.alias[1]}."


def folded(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with each alias given turned into its option's value (OptionError when both disagree)."""
    out = {name: raw for name, raw in values.items() if not name.endswith(ALIAS)}
    for name, raw in values.items():
        declared = declared_of(name.removesuffix(ALIAS)) if name.endswith(ALIAS) else None
        if declared is None or raw is None or declared.option.alias is None:
            continue
        flag, value = declared.option.alias
        given_too = out.get(declared.name)
        if given_too is not None and declared.read(given_too) != value:
            raise OptionError(
                f"{flag} means {declared.flag} {value}; give one of them", parameter=declared.name, value=given_too
            )
        out[declared.name] = value
    return out


def help_text(declared: Declared) -> str:
    """The option's help, with its default where the default says something."""
    default = default_text(declared)
    return f"{declared.option.help} [default: {default}]" if default else declared.option.help


def default_text(declared: Declared) -> str | None:
    """How the default reads on the command line ("2GB", "0.9999"); None where there is nothing to show."""
    if declared.option.default_text is not None:
        return declared.option.default_text
    value = declared.default
    if value is None or value is False or value == () or value == {}:
        return None
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if declared.option.parse is parse_bytes and isinstance(value, int):
        return format_bytes(value)
    return str(value)


@dataclass(frozen=True)
class Given:
    """What the command line gave, read and sorted: options for `compare` and the command line's own parts."""

    compare: dict[str, Any] = field(default_factory=dict)
    axes: SweepAxes = field(default_factory=SweepAxes)
    reports: ReportOptions = field(default_factory=ReportOptions)
    run: RunOptions = field(default_factory=RunOptions)
    demo: DemoOptions = field(default_factory=DemoOptions)
    config: ConfigOptions = field(default_factory=ConfigOptions)
    view: ViewOptions = field(default_factory=ViewOptions)


def given(values: Mapping[str, Any], underneath: Mapping[str, Any] | None = None) -> Given:
    """The options the user gave (None and empty repeats are not given), read by their declarations.

    `underneath` holds options already read from a config file: the command line's values
    replace them name by name. An alias counts as its option given (`folded`).
    """
    compare: dict[str, Any] = {}
    own: dict[type, dict[str, Any]] = {}
    read = {name: value for name, value in (underneath or {}).items() if declared_of(name) is not None}
    for name, raw in folded(values).items():
        declared = declared_of(name)
        if declared is None or raw is None or raw == ():
            continue
        read[name] = declared.read(raw)
    for name, value in read.items():
        declared = declared_of(name)
        assert declared is not None
        if declared.part in COMPARE_PARTS:
            compare[name] = value
        else:
            own.setdefault(declared.part, {})[name] = value
    return Given(
        compare=compare,
        axes=SweepAxes(**own.get(SweepAxes, {})),
        reports=ReportOptions(**own.get(ReportOptions, {})),
        run=RunOptions(**own.get(RunOptions, {})),
        demo=DemoOptions(**own.get(DemoOptions, {})),
        config=ConfigOptions(**own.get(ConfigOptions, {})),
        view=ViewOptions(**own.get(ViewOptions, {})),
    )
