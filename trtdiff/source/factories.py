"""Import a model factory (`pkg.module:build`) from the current directory, as `python -m` would.

Used for a model given as a factory spec, and for `model_class` with a state_dict: the class
is built with no arguments and the state_dict is loaded into it (strictly).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from trtdiff.errors import ModelLoadError, describe_error, param

if TYPE_CHECKING:
    import torch

FACTORY_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


@contextlib.contextmanager
def cwd_on_path() -> Iterator[None]:
    """Make modules in the current directory importable, as `python -m` would, for one import."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # files written since the last import must be seen
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def call_factory(spec: str, *, label: str) -> Any:
    """Import `pkg.mod:attr` from the current directory; call it with no arguments if callable."""
    import torch

    if not FACTORY_RE.match(spec):
        raise ModelLoadError(
            f"{label}: not of the form pkg.module:ClassOrFunction; "
            "name an importable module, a colon, then the class or function"
        )
    module_name, attr_path = spec.split(":", 1)
    with cwd_on_path():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
                raise ModelLoadError(
                    f"{label}: no module named {e.name!r} importable from {os.getcwd()}; "
                    "run trtdiff from the directory that holds it"
                ) from None
            raise ModelLoadError(
                f"{label}: importing {module_name} failed ({describe_error(e)}); install what it imports"
            ) from None
        except Exception as e:  # noqa: BLE001 -- the user's module may raise anything at import time
            raise ModelLoadError(
                f"{label}: importing {module_name} raised {describe_error(e)}; fix the module"
            ) from None
    target: Any = module
    for part in attr_path.split("."):
        if not hasattr(target, part):
            raise ModelLoadError(f"{label}: {module_name} has no attribute {attr_path!r}; check the name after the ':'")
        target = getattr(target, part)
    if isinstance(target, torch.nn.Module) or is_exported_program(target):
        return target
    if not callable(target):
        raise ModelLoadError(
            f"{label}: {module_name}.{attr_path} is an object of type {type(target).__name__}, not a class or function "
            "that builds an nn.Module"
        )
    try:
        result = target()
    except Exception as e:  # noqa: BLE001 -- the factory's own error, whatever it is
        raise ModelLoadError(
            f"{label}: calling {attr_path}() raised {describe_error(e)}; "
            "fix it so that it builds the model when called with no arguments"
        ) from None
    if not isinstance(result, torch.nn.Module) and not is_exported_program(result):
        raise ModelLoadError(
            f"{label}: {attr_path}() returned an object of type {type(result).__name__}, not an nn.Module; "
            "make it return the model"
        )
    return result


def is_exported_program(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.export.ExportedProgram)


def build_with_state_dict(spec: str, model_class: str, state_dict: Mapping[str, Any]) -> torch.nn.Module:
    """Build `model_class` (a `pkg.mod:Class` spec) and load the state_dict read from `spec` into it."""
    import torch

    label = f"{param('model_class')} {model_class}"
    module = call_factory(model_class, label=label)
    if not isinstance(module, torch.nn.Module) or isinstance(module, torch.jit.ScriptModule):
        raise ModelLoadError(
            f"{label}: built an object of type {type(module).__name__}, "
            "not an eager nn.Module to load the state_dict into"
        )
    _load_state_dict(spec, label, module, state_dict)
    return module


def _load_state_dict(spec: str, label: str, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
    """load_state_dict(strict=True), with missing/unexpected keys named in one line."""
    expected = set(module.state_dict())
    given = set(state_dict)
    if given != expected and all(k.startswith("module.") for k in given):
        stripped = {k[len("module.") :]: v for k, v in state_dict.items()}
        if set(stripped) == expected:  # saved from DataParallel/DistributedDataParallel
            state_dict, given = stripped, set(stripped)
    missing, unexpected = sorted(expected - given), sorted(given - expected)
    if missing or unexpected:
        parts = [
            f"{what} keys {few(keys)}" for what, keys in (("missing", missing), ("unexpected", unexpected)) if keys
        ]
        raise ModelLoadError(
            f"{spec}: the state_dict does not fit {label} ({'; '.join(parts)}); "
            f"check that {param('model_class')} names the class these weights were saved from"
        )
    try:
        module.load_state_dict(state_dict, strict=True)
    except RuntimeError as e:
        detail = next((line.strip() for line in str(e).splitlines() if "mismatch" in line), describe_error(e))
        raise ModelLoadError(
            f"{spec}: the state_dict does not fit {label} ({detail}); check the class's constructor defaults"
        ) from None


def few(keys: list[str], n: int = 3) -> str:
    """The first `n` keys, and how many more there are."""
    shown = ", ".join(keys[:n])
    return f"{shown} and {len(keys) - n} more" if len(keys) > n else shown
