"""Turn frozen dataclasses into JSON-ready dicts and back, driven by their type hints.

Non-finite floats are not valid JSON: they are written as the strings "nan", "inf" and
"-inf" and read back as floats, so that NaN stays apart from None (null) in a `float | None`
field. A null where a plain float is expected (reports written before) reads as NaN. A class
with a `json_text()` method and a `from_json_text(text)` classmethod (a backend pair) is
written as that text, as a value or a key.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

T = TypeVar("T")


def to_jsonable(value: Any) -> Any:
    """Recursively convert dataclasses, tuples and floats into plain JSON values."""
    if hasattr(value, "json_text"):
        return value.json_text()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {(k.json_text() if hasattr(k, "json_text") else str(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def from_jsonable(cls: type[T], data: Any) -> T:
    """Rebuild an instance of `cls` (a dataclass or a typing construct) from `to_jsonable` output."""
    built: T = _build(cls, data)
    return built


def _build(tp: Any, data: Any) -> Any:
    origin = get_origin(tp)
    if origin is Literal:
        if data not in get_args(tp):
            raise ValueError(f"expected one of {', '.join(map(repr, get_args(tp)))}, got {data!r}")
        return data
    if isinstance(tp, type) and hasattr(tp, "from_json_text"):
        if not isinstance(data, str):
            raise TypeError(f"expected a string for {tp.__name__}, got {data!r}")
        return tp.from_json_text(data)
    if origin in (typing.Union, types.UnionType):
        return _build_union(tp, data)
    if origin in (tuple, list, dict):
        return _build_container(tp, origin, data)
    if dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp)
        kwargs = {f.name: _build(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return typing.cast(Any, tp)(**kwargs)
    return _build_scalar(tp, data)


def _build_union(tp: Any, data: Any) -> Any:
    args = get_args(tp)
    if data is None and type(None) in args:
        return None
    non_none = [a for a in args if a is not type(None)]
    if data is None and float in non_none:
        return math.nan
    last_error: Exception | None = None
    for arg in non_none:
        try:
            return _build(arg, data)
        except (TypeError, ValueError, KeyError) as error:
            last_error = error
    raise TypeError(f"cannot read {data!r} as {tp}") from last_error


def _build_container(tp: Any, origin: Any, data: Any) -> Any:
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {data!r}")
        key_type, value_type = get_args(tp)
        return {_build(key_type, k): _build(value_type, v) for k, v in data.items()}
    if not isinstance(data, list):
        raise TypeError(f"expected an array, got {data!r}")
    args = get_args(tp)
    if origin is list:
        return [_build(args[0], v) for v in data]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_build(args[0], v) for v in data)
    return tuple(_build(a, v) for a, v in zip(args, data, strict=True))


def _build_scalar(tp: Any, data: Any) -> Any:
    if tp is float:
        if data is None:
            return math.nan
        if isinstance(data, str):
            return float(data)
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError(f"expected a number, got {data!r}")
        return float(data)
    expected = {int: (int, "an integer"), bool: (bool, "true/false"), str: (str, "a string")}
    if tp in expected:
        kind, words = expected[tp]
        if not isinstance(data, kind) or (tp is int and isinstance(data, bool)):
            raise TypeError(f"expected {words}, got {data!r}")
        return data
    if tp is Any:
        return data
    raise TypeError(f"unsupported type {tp!r}")
