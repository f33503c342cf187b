"""Build the model's input arrays from input shapes (`input_shapes`) and input files (`input_files`).

Every backend is fed the same numpy arrays, so the comparison starts from identical inputs.
Arrays from files are kept exactly as given (a float64 file stays float64): casting silently
would hide the very differences trtdiff looks for. An array holding no finite value at all
(all NaN or Inf: a broken file, never a meaningful input) is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from trtdiff.errors import InputError, describe_error, param
from trtdiff.options.parse import parse_input_shape

_FILE_KINDS = ".npy, .npz, .pt or .pth"
_SHAPES = "input_shapes"
_FILES = "input_files"

Origin = tuple[str, str]  # (parameter, the text given for it): where an input came from
Given = np.ndarray | tuple[int, ...]  # an array from a file, or the shape of a random one


def load_input_file(path: str | Path) -> dict[str, np.ndarray] | list[np.ndarray]:
    """Arrays from a .npy, .npz, .pt or .pth file: a dict by input name, or a positional list."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such file; give a {_FILE_KINDS} file", parameter=_FILES, value=path)
    if path.is_dir():
        raise InputError(f"is a directory; give a {_FILE_KINDS} file", parameter=_FILES, value=path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return [_read(path, "a .npy array", lambda: np.load(path, allow_pickle=False))]
    if suffix == ".npz":
        return _from_npz(path)
    if suffix in (".pt", ".pth"):
        return _from_torch(path)
    raise InputError(
        f"unsupported file type {suffix or '(no extension)'!r}; give a {_FILE_KINDS} file", parameter=_FILES, value=path
    )


def _read(path: Path, what: str, reader: Callable[[], Any]) -> Any:
    """Run `reader`, turning any parse failure into one InputError line."""
    try:
        return reader()
    except Exception as e:  # noqa: BLE001 -- numpy and torch raise ValueError, OSError, EOFError, zip errors, ...
        raise InputError(
            f"cannot read it as {what} ({describe_error(e)}); save it again", parameter=_FILES, value=path
        ) from None


def _from_npz(path: Path) -> dict[str, np.ndarray] | list[np.ndarray]:
    """Keys arr_0, arr_1, ... (np.savez with positional arrays) become a list, others a dict."""

    def read() -> dict[str, np.ndarray]:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}

    arrays = _read(path, "a .npz archive", read)
    if not arrays:
        raise InputError(
            "the .npz archive holds no arrays; save the inputs with np.savez", parameter=_FILES, value=path
        )
    if all(re.fullmatch(r"arr_\d+", k) for k in arrays):
        return [arrays[k] for k in sorted(arrays, key=lambda k: int(k[4:]))]
    return dict(arrays)


def _from_torch(path: Path) -> dict[str, np.ndarray] | list[np.ndarray]:
    """A tensor, a list/tuple of tensors, or a dict of name -> tensor (read with weights_only)."""
    import torch

    obj = _read(path, "a torch.save file of tensors", lambda: torch.load(path, map_location="cpu", weights_only=True))
    if isinstance(obj, Mapping):
        if not obj or not all(isinstance(k, str) for k in obj):
            raise InputError("a dict of inputs must map input names (strings) to tensors", parameter=_FILES, value=path)
        return {k: _to_array(path, v, k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if not obj:
            raise InputError(
                "the list of inputs is empty; save one tensor per model input", parameter=_FILES, value=path
            )
        return [_to_array(path, v, f"item {i}") for i, v in enumerate(obj)]
    return [_to_array(path, obj, "the saved object")]


def _to_array(path: Path, value: Any, where: str) -> np.ndarray:
    import torch

    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, torch.Tensor):
        raise InputError(
            f"{where} is a {type(value).__name__}, not a tensor; save tensors (or a list or dict of them)",
            parameter=_FILES,
            value=path,
        )
    try:
        return value.detach().cpu().numpy()
    except TypeError:  # bfloat16 and other dtypes numpy has no type for
        raise InputError(
            f"{where} has dtype {value.dtype}, which numpy cannot hold; save it as float32",
            parameter=_FILES,
            value=path,
        ) from None


def make_inputs(
    input_names: Sequence[str],
    *,
    shapes: Sequence[str] = (),
    files: Sequence[str] = (),
    seed: int = 0,
    dtypes: Mapping[str, np.dtype] | None = None,
    file_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> dict[str, np.ndarray]:
    """One array per input name, in order: from files where given, else seeded random of the shape given.

    `file_shapes` are shapes read from an ONNX file for the inputs `shapes` and `files` leave
    out; a 0 there is kept (the file declares an empty input), where a shape given as text
    must be positive.
    """
    names = list(input_names)
    if names and not shapes and not files and not file_shapes:
        raise InputError(
            f"the model has inputs {_listed(names)} but no {param(_SHAPES)} or {param(_FILES)} was given; "
            f"pass e.g. {param(_SHAPES)} {names[0]}:1x3x224x224 or {param(_FILES)} inputs.npz"
        )
    given, positional = _gather(names, shapes, files)
    for name, dims in (file_shapes or {}).items():
        if name in names and name not in given:
            given[name] = ((_SHAPES, f"{name}:{'x'.join(map(str, dims))} (read from the ONNX file)"), tuple(dims))
    free = [n for n in names if n not in given]
    if len(positional) > len(free):
        (parameter, text), _ = positional[len(free)]
        raise InputError(
            f"more inputs given than the model has ({len(names)}: {_listed(names)}); "
            "drop it or name the input it is for",
            parameter=parameter,
            value=text,
        )
    for name, (origin, value) in zip(free, positional, strict=False):  # positional may be the shorter
        given[name] = (origin, value)

    missing = [n for n in names if n not in given]
    if missing:
        raise InputError(
            f"input {missing[0]!r} has no shape or file (the model's inputs are {_listed(names)}); give it with "
            f"{param(_SHAPES)} {missing[0]}:1x3x224x224 or {param(_FILES)} {missing[0]}:file.npy"
        )

    wanted = {name: np.dtype((dtypes or {}).get(name, np.float32)) for name in names}
    check_memory({name: (origin, value, wanted[name]) for name, (origin, value) in given.items()})
    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray] = {}
    for name in names:
        _, value = given[name]
        if isinstance(value, np.ndarray):
            result[name] = value
        else:
            result[name] = _random(rng, name, value, wanted[name])
    return result


RUN_COPIES = 3
"""A comparison holds each input at least this many times (the array, PyTorch's copy, the
reference's record of it), before any activation: the least it can need."""


def check_memory(inputs: Mapping[str, tuple[Origin, Given, np.dtype]], available: int | None = None) -> None:
    """Refuse, before any work, random inputs a comparison cannot hold in the memory there is.

    The estimate is a floor (`RUN_COPIES` times the inputs), so a run that could fit is
    never refused; `available` defaults to what the machine (or its cgroup) has free.
    """
    shapes = {
        name: (origin, value, dtype) for name, (origin, value, dtype) in inputs.items() if isinstance(value, tuple)
    }
    sizes = {name: int(np.prod(value, dtype=object)) * dtype.itemsize for name, (_, value, dtype) in shapes.items()}
    arrays = sum(value.nbytes for _, value, _ in inputs.values() if isinstance(value, np.ndarray))
    need = sum(sizes.values()) * RUN_COPIES + arrays * (RUN_COPIES - 1)  # the arrays read are in memory already
    available = available_memory() if available is None else available
    if not sizes or available is None or need <= available:
        return
    name = max(sizes, key=lambda n: sizes[n])
    origin = shapes[name][0]
    raise InputError(
        f"input {name!r} takes {_bytes(sizes[name])}, and a comparison holds its inputs at least "
        f"{RUN_COPIES} times ({_bytes(need)}), but {_bytes(available)} of memory is available here; "
        f"give a smaller shape",
        parameter=origin[0],
        value=origin[1],
    )


def available_memory() -> int | None:
    """Bytes of memory free for this process: MemAvailable, capped by a cgroup v2 limit; None if unknown."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as meminfo:
            found += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit.isdigit() and used.isdigit():
            found.append(int(limit) - int(used))
    except OSError:
        pass
    return min(found) if found else None


def _bytes(count: int) -> str:
    """1234567890 -> '1.1 GiB'."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _gather(
    names: list[str], shapes: Sequence[str], files: Sequence[str]
) -> tuple[dict[str, tuple[Origin, Given]], list[tuple[Origin, Given]]]:
    """Inputs given by name (name -> (origin, array or shape)), and the rest in the order given."""
    given: dict[str, tuple[Origin, Given]] = {}
    positional: list[tuple[Origin, Given]] = []

    def assign(name: str, origin: Origin, value: Given) -> None:
        if name not in names:
            raise InputError(
                f"the model has no input named {name!r}; its inputs are {_listed(names)}",
                parameter=origin[0],
                value=origin[1],
            )
        if name in given:
            earlier = given[name][0]
            raise InputError(
                f"input {name!r} is already given by {param(earlier[0])} {earlier[1]}; give each input once",
                parameter=origin[0],
                value=origin[1],
            )
        given[name] = (origin, value)

    for text in files:
        origin = (_FILES, text)
        name, path = _split_named_file(text)
        loaded = load_input_file(path)
        held = list(loaded.items()) if isinstance(loaded, dict) else [(f"array {i}", a) for i, a in enumerate(loaded)]
        for key, array in held:
            refuse_non_finite(array, key if len(held) > 1 else None, parameter=_FILES, value=text)
        if name is not None:
            arrays = list(loaded.values()) if isinstance(loaded, dict) else loaded
            if len(arrays) != 1:
                raise InputError(
                    f"a named input file must hold exactly one array, not {len(arrays)}; "
                    f"drop the '{name}:' prefix to feed several inputs",
                    parameter=_FILES,
                    value=text,
                )
            assign(name, origin, np.asarray(arrays[0]))
        elif isinstance(loaded, dict):
            for key, array in loaded.items():
                assign(key, origin, np.asarray(array))
        else:
            positional += [(origin, np.asarray(a)) for a in loaded]
    for text in shapes:
        name, dims = parse_input_shape(text)
        if name is None:
            positional.append(((_SHAPES, text), dims))
        else:
            assign(name, (_SHAPES, text), dims)
    return given, positional


def refuse_non_finite(array: np.ndarray, what: str | None, *, parameter: str | None, value: object) -> None:
    """Raise InputError when float `array` holds values and none of them is finite; `what` names it in a file."""
    array = np.asarray(array)
    if array.size == 0:
        return
    nan, inf = non_finite_counts(array)
    if nan + inf == array.size:
        counts = ", ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "Inf")) if n)
        head = f"{what} " if what else ""
        raise InputError(
            f"{head}holds no finite value ({counts} of {array.size}); every output would be NaN/Inf: "
            "check how the file was written",
            parameter=parameter,
            value=value,
        )


def _split_named_file(text: str) -> tuple[str | None, str]:
    """'x.npy' or 'name:x.npy'; an existing path wins, so paths holding ':' still work."""
    if Path(text).exists() or ":" not in text:
        return None, text
    name, _, path = text.rpartition(":")
    return (name or None), path


def _random(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Standard normal floats, integers in [0, 10), or random bools, of the input's dtype."""
    try:
        return _random_values(rng, name, shape, dtype)
    except MemoryError:  # the check above is a floor; the allocation itself may still fail
        raise InputError(
            f"input {name!r} of shape {'x'.join(map(str, shape))} does not fit in memory here; give a smaller shape",
            parameter=_SHAPES,
        ) from None


def _random_values(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f" or dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):  # ml_dtypes floats
        return _standard_normal(rng, shape).astype(dtype, copy=False)
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape, dtype=dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(
        f"input {name!r} has dtype {dtype}, for which trtdiff makes no random values; "
        f"give it with {param(_FILES)} {name}:file.npy"
    )


_PART = 1 << 20
"""Values per part of a large random input, each drawn from its own child of the generator on a thread of its own."""


def _standard_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal float32 values; from 4 parts on, the parts drawn at once on the CPU's threads (numpy draws
    without the GIL): a 1x3x4096x4096 input took 0.7 s on one thread, which the floor's torch.randn does not.
    The parts and their generators (`rng.spawn`) depend on the shape alone: a seed gives the same values on
    every machine, whatever its number of cores."""
    size = int(np.prod(shape, dtype=np.int64))
    parts = -(-size // _PART)
    if parts < 4:
        return rng.standard_normal(shape, dtype=np.float32)
    values = np.empty(size, dtype=np.float32)
    children = rng.spawn(parts)

    def draw(i: int) -> None:
        children[i].standard_normal(dtype=np.float32, out=values[i * _PART : (i + 1) * _PART])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(draw, range(parts)))
    return values.reshape(shape)


def _listed(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names) if names else "(none)"


def non_finite_counts(array: np.ndarray) -> tuple[int, int]:
    """How many NaN and how many Inf `array` holds (0, 0 for integer and bool arrays)."""
    array = np.asarray(array)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.complexfloating)):
        if array.dtype.kind in "iub":
            return 0, 0
        try:  # ml_dtypes floats (bfloat16, float8) are not numpy floating types
            array = array.astype(np.float32)
        except (TypeError, ValueError):
            return 0, 0
    return int(np.count_nonzero(np.isnan(array))), int(np.count_nonzero(np.isinf(array)))
