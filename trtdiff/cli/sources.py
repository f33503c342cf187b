"""The options of one command: the defaults, then a config file, then the command line, each value with its source.

The config file is `--config FILE`, or the nearest pyproject.toml holding `[tool.trtdiff]`
(trtdiff.options.config), unless `--no-config`. Its keys are the options' Python names; the
command line replaces any of them. The sources go into the report (`Report.options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtdiff.cli.flags import Given, folded, given
from trtdiff.errors import OptionError, param
from trtdiff.options import declared_of
from trtdiff.options.config import ConfigFile, load_config
from trtdiff.options.resolved import COMMAND_LINE, ResolvedOption, resolved_value

# Command-line names that set another option's value: compare's --opset N is a sweep axis of one value.
_SETS = {"opsets": "opset", "exporters": "exporter"}


@dataclass(frozen=True)
class Sources:
    """The options read, where each one came from (name -> "command line" or a file's path), the file read."""

    read: Given
    origins: dict[str, str]
    config: ConfigFile | None


def read_options(values: Mapping[str, Any]) -> Sources:
    """The command's options: what the command line gave over what the config file sets."""
    values = folded(values)  # `--fp16` is `--precision fp16` given on the command line
    cli = given(values)
    if cli.config.no_config and cli.config.config:
        raise OptionError(f"reads no config file; drop {param('config')} or it", parameter="no_config")
    config = None if cli.config.no_config else load_config(cli.config.config)
    given_names = [name for name, raw in values.items() if raw is not None and raw != () and declared_of(name)]
    origins = dict.fromkeys(config.values, config.source) if config is not None else {}
    for name in list(origins):  # compare's `opsets = [13]` in a file is its opset
        if name in _SETS:
            origins[_SETS[name]] = origins[name]
    for name in given_names:
        origins[name] = COMMAND_LINE
        if name in _SETS:
            origins[_SETS[name]] = COMMAND_LINE
    read = given(values, config.values) if config is not None else cli
    return Sources(read, origins, config)


def set_by_file_only(sources: Sources, recorded: Mapping[str, ResolvedOption]) -> dict[str, ResolvedOption]:
    """The options the config file set that a report does not record by itself (the command line's own:
    `quiet`, `show_all`, sweep axes), with the file as their source, so the report and its
    "options from FILE" line name every key the file set (where the command line did not replace it)."""
    config = sources.config
    if config is None:
        return {}
    return {
        name: ResolvedOption(resolved_value(value), config.source)
        for name, value in config.values.items()
        if name not in recorded and sources.origins.get(name) == config.source
    }
