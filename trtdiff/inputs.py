"""Build the model's input arrays from --input-shape and --input options.

Every backend is fed the same numpy arrays, so the comparison starts from identical inputs.
Arrays from files are kept exactly as given (a float64 file stays float64): casting silently
would hide the very differences trtdiff looks for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtdiff.errors import InputError, OptionError, describe_error

_SHAPE_EXAMPLE = "e.g. 1x3x224x224 or input:1x3x224x224"
_FILE_KINDS = ".npy, .npz, .pt or .pth"


def parse_input_shape(text: str) -> tuple[str | None, tuple[int, ...]]:
    """'1x3x512x512' -> (None, (1, 3, 512, 512)); 'name:1x3x512x512' names the input."""
    name, sep, dims_text = text.strip().rpartition(":")  # names may hold ':' (e.g. 'input:0')
    if sep and not name:
        raise OptionError(f"--input-shape {text}: the input name before ':' is empty; {_SHAPE_EXAMPLE}")
    parts = [p.strip() for p in re.split(r"[xX,]", dims_text)] if dims_text.strip() else []
    if not parts or not all(re.fullmatch(r"[+-]?\d+", p) for p in parts):
        raise OptionError(f"--input-shape {text}: {dims_text.strip() or 'nothing'!r} is not a list of integers separated by 'x'; {_SHAPE_EXAMPLE}")
    dims = tuple(int(p) for p in parts)
    if any(d <= 0 for d in dims):
        raise OptionError(f"--input-shape {text}: every dimension must be a positive integer; {_SHAPE_EXAMPLE}")
    return (name or None), dims


def load_input_file(path: str | Path) -> dict[str, np.ndarray] | list[np.ndarray]:
    """Arrays from a .npy, .npz, .pt or .pth file: a dict by input name, or a positional list."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"--input {path}: no such file; give a {_FILE_KINDS} file")
    if path.is_dir():
        raise InputError(f"--input {path}: is a directory; give a {_FILE_KINDS} file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return [_read(path, "a .npy array", lambda: np.load(path, allow_pickle=False))]
    if suffix == ".npz":
        return _from_npz(path)
    if suffix in (".pt", ".pth"):
        return _from_torch(path)
    raise InputError(f"--input {path}: unsupported file type {suffix or '(no extension)'!r}; give a {_FILE_KINDS} file")


def _read(path: Path, what: str, reader: Any) -> Any:
    """Run `reader`, turning any parse failure into one InputError line."""
    try:
        return reader()
    except Exception as e:  # numpy and torch raise ValueError, OSError, EOFError, zip errors, ...
        raise InputError(f"--input {path}: cannot read it as {what} ({describe_error(e)}); save it again") from None


def _from_npz(path: Path) -> dict[str, np.ndarray] | list[np.ndarray]:
    """Keys arr_0, arr_1, ... (np.savez with positional arrays) become a list, others a dict."""

    def read() -> dict[str, np.ndarray]:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}

    arrays = _read(path, "a .npz archive", read)
    if not arrays:
        raise InputError(f"--input {path}: the .npz archive holds no arrays; save the inputs with np.savez")
    if all(re.fullmatch(r"arr_\d+", k) for k in arrays):
        return [arrays[k] for k in sorted(arrays, key=lambda k: int(k[4:]))]
    return arrays


def _from_torch(path: Path) -> dict[str, np.ndarray] | list[np.ndarray]:
    """A tensor, a list/tuple of tensors, or a dict of name -> tensor (read with weights_only)."""
    import torch

    obj = _read(path, "a torch.save file of tensors", lambda: torch.load(path, map_location="cpu", weights_only=True))
    if isinstance(obj, Mapping):
        if not obj or not all(isinstance(k, str) for k in obj):
            raise InputError(f"--input {path}: a dict of inputs must map input names (strings) to tensors")
        return {k: _to_array(path, v, k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if not obj:
            raise InputError(f"--input {path}: the list of inputs is empty; save one tensor per model input")
        return [_to_array(path, v, f"item {i}") for i, v in enumerate(obj)]
    return [_to_array(path, obj, "the saved object")]


def _to_array(path: Path, value: Any, where: str) -> np.ndarray:
    import torch

    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, torch.Tensor):
        raise InputError(f"--input {path}: {where} is a {type(value).__name__}, not a tensor; save tensors (or a list or dict of them)")
    try:
        return value.detach().cpu().numpy()
    except TypeError:  # bfloat16 and other dtypes numpy has no type for
        raise InputError(f"--input {path}: {where} has dtype {value.dtype}, which numpy cannot hold; save it as float32") from None


def make_inputs(
    input_names: Sequence[str],
    *,
    shapes: Sequence[str] = (),
    files: Sequence[str] = (),
    seed: int = 0,
    dtypes: Mapping[str, np.dtype] | None = None,
) -> dict[str, np.ndarray]:
    """One array per input name, in order: from files where given, else seeded random of the shape given."""
    names = list(input_names)
    if names and not shapes and not files:
        raise InputError(f"the model has inputs {_listed(names)} but no --input-shape or --input was given; pass e.g. --input-shape {names[0]}:1x3x224x224 or --input inputs.npz")
    given: dict[str, tuple[str, np.ndarray | tuple[int, ...]]] = {}  # name -> (option that gave it, array or shape)
    positional: list[tuple[str, np.ndarray | tuple[int, ...]]] = []

    def assign(name: str, origin: str, value: np.ndarray | tuple[int, ...]) -> None:
        if name not in names:
            raise InputError(f"{origin}: the model has no input named {name!r}; its inputs are {_listed(names)}")
        if name in given:
            raise InputError(f"{origin}: input {name!r} is already given by {given[name][0]}; give each input once")
        given[name] = (origin, value)

    for text in files:
        name, path = _split_named_file(text)
        loaded = load_input_file(path)
        if name is not None:
            arrays = list(loaded.values()) if isinstance(loaded, dict) else loaded
            if len(arrays) != 1:
                raise InputError(f"--input {text}: a named input file must hold exactly one array, not {len(arrays)}; drop the '{name}:' prefix to feed several inputs")
            assign(name, f"--input {text}", np.asarray(arrays[0]))
        elif isinstance(loaded, dict):
            for key, array in loaded.items():
                assign(key, f"--input {text}", np.asarray(array))
        else:
            positional += [(f"--input {text}", np.asarray(a)) for a in loaded]
    for text in shapes:
        name, dims = parse_input_shape(text)
        if name is None:
            positional.append((f"--input-shape {text}", dims))
        else:
            assign(name, f"--input-shape {text}", dims)

    free = [n for n in names if n not in given]
    if len(positional) > len(free):
        extra = positional[len(free)][0]
        raise InputError(f"{extra}: more inputs given than the model has ({len(names)}: {_listed(names)}); drop it or name the input it is for")
    for name, (origin, value) in zip(free, positional):
        given[name] = (origin, value)

    missing = [n for n in names if n not in given]
    if missing:
        raise InputError(f"input {missing[0]!r} has no shape or file (the model's inputs are {_listed(names)}); give it with --input-shape {missing[0]}:1x3x224x224 or --input {missing[0]}:file.npy")

    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray] = {}
    for name in names:
        origin, value = given[name]
        if isinstance(value, np.ndarray):
            result[name] = value
        else:
            result[name] = _random(rng, name, value, np.dtype((dtypes or {}).get(name, np.float32)))
    return result


def _split_named_file(text: str) -> tuple[str | None, str]:
    """'x.npy' or 'name:x.npy'; an existing path wins, so paths holding ':' still work."""
    if Path(text).exists() or ":" not in text:
        return None, text
    name, _, path = text.rpartition(":")
    return (name or None), path


def _random(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Standard normal floats, integers in [0, 10), or random bools, of the input's dtype."""
    if dtype.kind == "f":
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape, dtype=dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(f"input {name!r} has dtype {dtype}, for which trtdiff makes no random values; give it with --input {name}:file.npy")


def _listed(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names) if names else "(none)"
