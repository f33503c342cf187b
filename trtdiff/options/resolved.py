"""The options a comparison ran with, each with where its value came from, as the report records them.

A source is "default", "command line", the path of the config file that set it, or
"caller" (a Python caller's keyword or `CompareOptions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtdiff.options.declare import all_declarations
from trtdiff.options.parts import _PATH_OF, COMPARE_PARTS, CompareOptions

DEFAULT = "default"
COMMAND_LINE = "command line"
CALLER = "caller"


@dataclass(frozen=True)
class ResolvedOption:
    """One option's value as used, and where it came from."""

    value: Any
    source: str


def resolve(options: CompareOptions, origins: Mapping[str, str] | None = None) -> dict[str, ResolvedOption]:
    """Every declared option of `options` by name, with its source: `origins` where it names one, else
    "default" for a default value and "caller" for any other."""
    origins = origins or {}
    resolved: dict[str, ResolvedOption] = {}
    for declared in all_declarations(COMPARE_PARTS):
        part: Any = options
        for step in _PATH_OF[declared.part]:
            part = getattr(part, step)
        value = getattr(part, declared.name)
        source = origins.get(declared.name) or (DEFAULT if value == declared.default else CALLER)
        resolved[declared.name] = ResolvedOption(resolved_value(value), source)
    return resolved


def resolved_value(value: Any) -> Any:
    """`value` as JSON holds it (tuples as lists), so a report read back equals the one written."""
    if isinstance(value, (tuple, list)):
        return [resolved_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): resolved_value(item) for key, item in value.items()}
    return value
