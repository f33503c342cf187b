"""The text forms of option values: what a command line or a config file writes, and the value it means.

Each parser takes the text and the parameter it was given for, and raises an `OptionError`
naming that parameter with an example of the right form. The source stage reads the same
grammar (an input shape is parsed here whether it comes from `--input-shape` or from
Python), so a malformed value is refused before any work starts.
"""

from __future__ import annotations

import math
import re

from trtdiff.errors import OptionError, param

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
SHAPE_EXAMPLE = "e.g. 1x3x224x224 or input:1x3x224x224"


def parse_bytes(text: str, parameter: str) -> int:
    """'512MB', '2GB', '1.5g', '4096' -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise OptionError("expected a size such as 512MB or 2GB", parameter=parameter, value=text)
    return int(float(match.group(1)) * _SCALE[match.group(2).lower()])


def format_bytes(size: int) -> str:
    """2147483648 -> '2GB' (the largest unit that writes it whole), as the parsers read it back."""
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def parse_names(text: str, parameter: str) -> tuple[str, ...]:
    """'torch, onnxruntime' -> ('torch', 'onnxruntime'); empty items are dropped."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise OptionError("expected one or more comma-separated names", parameter=parameter, value=repr(text))
    return names


def parse_opsets(text: str, parameter: str) -> tuple[int, ...]:
    """'11,13,17' -> (11, 13, 17)."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise OptionError(
            "expected an opset or comma-separated opsets, e.g. 13 or 11,13,17", parameter=parameter, value=text
        ) from None


def parse_opset(text: str, parameter: str) -> int:
    """'13' -> 13; several opsets are a sweep, which only `compare` runs."""
    if "," in text:
        raise OptionError("one value here; sweeps are for compare", parameter=parameter, value=text)
    return parse_int(text, parameter)


def parse_int(text: str, parameter: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise OptionError("expected a whole number", parameter=parameter, value=text) from None


def parse_float(text: str, parameter: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise OptionError("expected a number, e.g. 0.999 or 1e-3", parameter=parameter, value=text) from None


def parse_input_shape(text: str, parameter: str = "input_shapes") -> tuple[str | None, tuple[int, ...]]:
    """'1x3x512x512' -> (None, (1, 3, 512, 512)); 'name:1x3x512x512' names the input; 'scalar' is ()."""
    name, sep, dims_text = text.strip().rpartition(":")  # names may hold ':' (e.g. 'input:0')
    if sep and not name:
        raise OptionError(f"the input name before ':' is empty; {SHAPE_EXAMPLE}", parameter=parameter, value=text)
    if dims_text.strip().lower() == "scalar":
        return (name or None), ()
    parts = [p.strip() for p in re.split(r"[xX,]", dims_text)] if dims_text.strip() else []
    if not parts or not all(re.fullmatch(r"[+-]?\d+", p) for p in parts):
        raise OptionError(
            f"{dims_text.strip() or 'nothing'!r} is not a list of integers separated by 'x'; {SHAPE_EXAMPLE}",
            parameter=parameter,
            value=text,
        )
    dims = tuple(int(p) for p in parts)
    if any(d <= 0 for d in dims):
        raise OptionError(
            f"every dimension must be a positive integer; {SHAPE_EXAMPLE}", parameter=parameter, value=text
        )
    return (name or None), dims


def check_input_shape(text: str, parameter: str) -> str:
    """The shape text itself, once it parses (`input_shapes` keeps the text; the source stage reads it)."""
    parse_input_shape(text, parameter)
    return text.strip()


def parse_channels(text: str, parameter: str, channels: int = 3) -> tuple[float, ...]:
    """'0.485,0.456,0.406' -> one float per channel; a single value is used for every channel.

    A std must be positive (a parameter whose name ends in "std").
    """
    example = f"e.g. {param('mean')} 0.485,0.456,0.406 {param('std')} 0.229,0.224,0.225"
    try:
        values = tuple(float(p.strip()) for p in text.split(","))
    except ValueError:
        raise OptionError(
            f"not a comma-separated list of numbers; {example}", parameter=parameter, value=repr(text)
        ) from None
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise OptionError(
            f"{len(values)} values for {channels} channels; give one value or one per channel, {example}",
            parameter=parameter,
            value=repr(text),
        )
    if not all(math.isfinite(v) for v in values):
        raise OptionError(f"values must be finite numbers; {example}", parameter=parameter, value=repr(text))
    if parameter.endswith("std") and any(v <= 0 for v in values):
        raise OptionError(f"every std must be positive (it divides); {example}", parameter=parameter, value=repr(text))
    return values


def parse_hw(text: str, parameter: str) -> tuple[int, int]:
    """'512x1024' (or the older '512,1024') -> (H, W); a single number gives a square size."""
    parts = [p.strip() for p in re.split(r"[xX,]", text.strip())]
    if not all(re.fullmatch(r"\d+", p) for p in parts) or len(parts) > 2:
        raise OptionError(
            f"not a size; give HEIGHTxWIDTH, e.g. {param(parameter)} 512x1024", parameter=parameter, value=repr(text)
        )
    dims = [int(p) for p in parts]
    if any(d <= 0 for d in dims):
        raise OptionError(
            f"height and width must be positive; e.g. {param(parameter)} 512x1024",
            parameter=parameter,
            value=repr(text),
        )
    return (dims[0], dims[0]) if len(dims) == 1 else (dims[0], dims[1])


def parse_recording(text: str, parameter: str) -> tuple[str, str]:
    """'onnxruntime=ort.npz' -> ('onnxruntime', 'ort.npz')."""
    backend, sep, path = text.partition("=")
    if not sep or not backend.strip() or not path.strip():
        raise OptionError(
            f"expected BACKEND=FILE.npz, e.g. {param(parameter)} onnxruntime=ort.npz", parameter=parameter, value=text
        )
    return backend.strip(), path.strip()
