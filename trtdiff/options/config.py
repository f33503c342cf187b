"""Options from a config file: `[tool.trtdiff]` in the nearest pyproject.toml, or a TOML file given.

Keys are the options' Python names, the same as `trtdiff.compare(**fields)` takes
(`opset = 10`, `input_shapes = ["1x3x512x512"]`, `min_cosine = 0.999`); a value is a TOML
value or text, read by the option's own reader as the command line reads it. The command
line overrides the file. As ruff and mypy do, an unknown key is an error naming the key and
the file, and so is an option a file must not set, taken from the command line only: one that
would run code (`trust`, `model_class`), and one that names a file or folder trtdiff writes or
lets it overwrite one (the report paths, `save_onnx`, `save_engine`, `engine_cache`,
`save_repro`, `save`, `force`). A cloned repository's or a pull request's pyproject.toml must
not be able to make trtdiff unpickle a file, import a module, or write over the user's files.
A key of a command that reads no config file (`view`'s `host`, `demo`'s options) is refused
too, rather than ignored: nothing would ever read it.

Where the file is found: from the current directory upward, the first pyproject.toml that
holds a `[tool.trtdiff]` table; the search stops at the filesystem root and at the root of a
repository (a folder holding `.git`), so a pyproject.toml above the repository is never read.
`--config FILE` names the file instead: a pyproject.toml (its `[tool.trtdiff]` table), or any
other TOML file, whose `[tool.trtdiff]` table or, without one, top level holds the options.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtdiff.errors import ConfigError, TrtdiffError, param
from trtdiff.options import Declared, declared_of, every_option

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli, the same parser
    import tomli as tomllib

PYPROJECT = "pyproject.toml"
TABLE = "[tool.trtdiff]"
# Options about finding the file itself: a file cannot name another file to read.
_NOT_IN_FILES = frozenset({"config", "no_config"})
# The commands that read a config file: those that take --config.
_READERS = frozenset(next(d for d in every_option() if d.name == "config").option.commands)


@dataclass(frozen=True)
class ConfigFile:
    """The options a config file sets, read by their declarations, and where the file is."""

    path: Path
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def compare_fields(self) -> dict[str, Any]:
        """The values `trtdiff.compare(model, **fields)` takes: the command line's own options left out."""
        return {name: value for name, value in self.values.items() if declared_of(name, compare_only=True)}

    @property
    def source(self) -> str:
        """How a report names this file as the source of an option: its absolute path."""
        return str(self.path)


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml holding a `[tool.trtdiff]` table, from `start` (the current directory) upward.

    The search stops at a repository root (a folder holding `.git`) and at the filesystem root.
    """
    folder = (start or Path.cwd()).resolve()
    for candidate_folder in (folder, *folder.parents):
        candidate = candidate_folder / PYPROJECT
        if candidate.is_file() and _table(_parse(candidate), candidate, required=False) is not None:
            return candidate
        if (candidate_folder / ".git").exists():
            return None
    return None


def load_config(path: str | Path | None = None, *, start: Path | None = None) -> ConfigFile | None:
    """The options of `path` (a file the user named), or of the nearest pyproject.toml; None when there is none."""
    if path is not None:
        target = Path(path)
        if not target.is_file():
            what = "is a folder" if target.is_dir() else "no such file"
            raise ConfigError(
                f"{what}; give a pyproject.toml or a TOML file of options", parameter="config", value=path
            )
        data = _parse(target)
        table = _table(data, target, required=target.name == PYPROJECT)
        return read_table(data if table is None else table, target.resolve())
    found = find_pyproject(start)
    if found is None:
        return None
    table = _table(_parse(found), found, required=True)
    assert table is not None
    return read_table(table, found)


def read_table(table: Mapping[str, Any], path: Path) -> ConfigFile:
    """Every key of `table` read by its option's declaration; ConfigError for a key trtdiff refuses."""
    values: dict[str, Any] = {}
    for key, raw in table.items():
        declared = _declared(key, path)
        try:
            values[key] = declared.read(_as_text(declared, raw, key, path))
        except ConfigError:
            raise
        except TrtdiffError as error:
            raise ConfigError(f"{_where(path)}: {key} = {_shown(raw)}: {_reason(error)}") from error
    if "opset" in values and "opsets" in values:
        raise ConfigError(f"{_where(path)}: opset and opsets both set; keep one (opsets = [...] for a sweep)")
    return ConfigFile(path, values)


def _declared(key: str, path: Path) -> Declared:
    declared = declared_of(key)
    if declared is None or key in _NOT_IN_FILES:
        names = [d.name for d in every_option() if d.name not in _NOT_IN_FILES]
        close = difflib.get_close_matches(key, names, n=1)
        hint = f"did you mean {close[0]!r}?" if close else "the keys are the options' Python names, e.g. input_shapes"
        raise ConfigError(f"{_where(path)}: unknown key {key!r}; {hint} (docs/options.md)")
    flag = declared.flag or key
    if declared.option.runs_code:
        raise ConfigError(
            f"{_where(path)}: {key} makes trtdiff run code from a file or module, so it is taken from the command "
            f"line only ({flag}); remove it from the file"
        )
    if declared.option.writes:
        what = "lets trtdiff overwrite files" if declared.is_bool else "names a file or folder trtdiff writes"
        raise ConfigError(
            f"{_where(path)}: {key} {what}, so it is taken from the command line only ({flag}); remove it from the file"
        )
    if not _READERS & set(declared.option.commands):
        commands = " and ".join(f"trtdiff {c}" for c in declared.option.commands)
        raise ConfigError(
            f"{_where(path)}: {key} is an option of {commands}, which reads no config file; remove it from the file"
        )
    return declared


def _as_text(declared: Declared, raw: Any, key: str, path: Path) -> Any:
    """A TOML value as the option's reader takes it: scalars as text, lists item by item, tables as mappings."""
    if declared.is_dict:
        if not isinstance(raw, dict):
            raise ConfigError(f"{_where(path)}: {key} = {_shown(raw)}: expected a table of BACKEND = FILE")
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, dict):
        raise ConfigError(f"{_where(path)}: {key} is a table; expected a value")
    if declared.is_tuple:
        items = raw if isinstance(raw, list) else [raw]
        if any(isinstance(item, (list, dict)) for item in items):
            raise ConfigError(f"{_where(path)}: {key} = {_shown(raw)}: expected a list of values")
        texts = [_scalar_text(item) for item in items]
        # A repeated flag takes one item each; any other list option reads one comma list, as its flag does.
        return tuple(texts) if declared.option.repeat else ",".join(texts)
    if isinstance(raw, list):
        raise ConfigError(f"{_where(path)}: {key} = {_shown(raw)}: expected one value, not a list")
    return _scalar_text(raw)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error}); fix the file or pass --no-config") from error
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from error


def _table(data: Mapping[str, Any], path: Path, *, required: bool) -> dict[str, Any] | None:
    tool = data.get("tool")
    table = tool.get("trtdiff") if isinstance(tool, dict) else None
    if table is None:
        if required:
            raise ConfigError(f"{path}: no {TABLE} table; add one, or name a file of options with {param('config')}")
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.trtdiff must be a table of options")
    return table


def _where(path: Path) -> str:
    return f"{path} {TABLE}" if path.name == PYPROJECT else str(path)


def _shown(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def _reason(error: TrtdiffError) -> str:
    """An option reader's message without its "parameter value:" head (the key is named already)."""
    template = error.template
    if error.parameter is not None:
        head = param(error.parameter) + ("" if error.value is None else f" {error.value}") + ": "
        template = template.removeprefix(head)
    return template
