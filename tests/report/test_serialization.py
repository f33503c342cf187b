"""trtdiff.report.serialization: frozen dataclasses to JSON-ready values and back, driven by type hints."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from trtdiff.report import BackendPair
from trtdiff.report.serialization import from_jsonable, to_jsonable

ORT = BackendPair("torch", "onnxruntime")
TRT = BackendPair("onnxruntime", "tensorrt")


@dataclass(frozen=True)
class Inner:
    value: float
    label: str | None = None


@dataclass(frozen=True)
class Outer:
    name: str
    count: int
    flag: bool
    mode: Literal["fast", "exact"]
    inner: Inner
    items: tuple[Inner, ...]
    shape: tuple[int, int]
    by_pair: dict[BackendPair, float]
    pair: BackendPair
    optional_count: int | None = None
    optional_inner: Inner | None = None
    names: list[str] = field(default_factory=list)
    extra: Any = None


@dataclass(frozen=True)
class Floats:
    value: float
    values: tuple[float, ...] = ()


@dataclass(frozen=True)
class OptionalFloat:
    value: float | None


def _outer(**changes: Any) -> Outer:
    base: dict[str, Any] = {
        "name": "net",
        "count": 3,
        "flag": True,
        "mode": "exact",
        "inner": Inner(0.5, "half"),
        "items": (Inner(1.0), Inner(-2.25, "b")),
        "shape": (2, 3),
        "by_pair": {ORT: 0.25, TRT: 1.5},
        "pair": TRT,
        "optional_count": None,
        "optional_inner": Inner(4.0),
        "names": ["a", "b"],
        "extra": {"free": [1, "form"]},
    }
    base.update(changes)
    return Outer(**base)


def _through_json(value: Any) -> Any:
    return json.loads(json.dumps(to_jsonable(value), allow_nan=False))


def test_nested_dataclass_writes_plain_json_values() -> None:
    assert to_jsonable(_outer()) == {
        "name": "net",
        "count": 3,
        "flag": True,
        "mode": "exact",
        "inner": {"value": 0.5, "label": "half"},
        "items": [{"value": 1.0, "label": None}, {"value": -2.25, "label": "b"}],
        "shape": [2, 3],
        "by_pair": {"torch~onnxruntime": 0.25, "onnxruntime~tensorrt": 1.5},
        "pair": "onnxruntime~tensorrt",
        "optional_count": None,
        "optional_inner": {"value": 4.0, "label": None},
        "names": ["a", "b"],
        "extra": {"free": [1, "form"]},
    }


def test_nested_dataclass_round_trips_through_json() -> None:
    original = _outer()
    rebuilt = from_jsonable(Outer, _through_json(original))
    assert rebuilt == original
    assert isinstance(rebuilt.items, tuple) and isinstance(rebuilt.shape, tuple)
    assert isinstance(rebuilt.names, list)
    assert all(isinstance(k, BackendPair) for k in rebuilt.by_pair)
    assert list(rebuilt.by_pair) == [ORT, TRT]


def test_optional_fields_round_trip_with_values_and_with_none() -> None:
    original = _outer(optional_count=7, optional_inner=None)
    rebuilt = from_jsonable(Outer, _through_json(original))
    assert rebuilt.optional_count == 7 and rebuilt.optional_inner is None
    assert rebuilt == original


def test_missing_fields_with_defaults_take_the_default() -> None:
    assert from_jsonable(Inner, {"value": 2}) == Inner(2.0, None)


def test_missing_required_field_is_an_error() -> None:
    with pytest.raises(TypeError):
        from_jsonable(Inner, {"label": "x"})


def test_integer_json_number_reads_as_float() -> None:
    rebuilt = from_jsonable(Inner, {"value": 2, "label": None})
    assert rebuilt.value == 2.0 and type(rebuilt.value) is float


def test_nan_is_written_as_a_string_and_read_back_as_nan() -> None:
    data = to_jsonable(Floats(math.nan, (1.0, math.nan)))
    assert data == {"value": "nan", "values": [1.0, "nan"]}
    rebuilt = from_jsonable(Floats, json.loads(json.dumps(data, allow_nan=False)))
    assert math.isnan(rebuilt.value)
    assert rebuilt.values[0] == 1.0 and math.isnan(rebuilt.values[1])


def test_a_null_float_of_an_earlier_report_reads_as_nan() -> None:
    rebuilt = from_jsonable(Floats, {"value": None, "values": [None]})
    assert math.isnan(rebuilt.value) and math.isnan(rebuilt.values[0])


def test_infinities_are_written_as_strings_and_read_back() -> None:
    data = to_jsonable(Floats(math.inf, (-math.inf, 0.0)))
    assert data == {"value": "inf", "values": ["-inf", 0.0]}
    rebuilt = from_jsonable(Floats, _through_json(Floats(math.inf, (-math.inf, 0.0))))
    assert rebuilt == Floats(math.inf, (-math.inf, 0.0))


def test_json_dumps_accepts_every_non_finite_value_once_converted() -> None:
    text = json.dumps(to_jsonable({"a": [math.nan, math.inf, -math.inf]}), allow_nan=False)
    assert text == '{"a": ["nan", "inf", "-inf"]}'


def test_nan_in_an_optional_float_reads_back_as_nan() -> None:
    rebuilt = from_jsonable(OptionalFloat, _through_json(OptionalFloat(math.nan)))
    assert rebuilt.value is not None and math.isnan(rebuilt.value)


def test_none_in_an_optional_float_reads_back_as_none() -> None:
    assert from_jsonable(OptionalFloat, _through_json(OptionalFloat(None))) == OptionalFloat(None)
    assert from_jsonable(OptionalFloat, {"value": "-inf"}) == OptionalFloat(-math.inf)


def test_backend_pair_keys_and_values_are_written_as_text() -> None:
    assert to_jsonable({ORT: 1, TRT: 2}) == {"torch~onnxruntime": 1, "onnxruntime~tensorrt": 2}
    assert to_jsonable(ORT) == "torch~onnxruntime"
    assert to_jsonable((ORT, TRT)) == ["torch~onnxruntime", "onnxruntime~tensorrt"]
    assert from_jsonable(dict[BackendPair, int], {"torch~onnxruntime": 1}) == {ORT: 1}
    assert from_jsonable(tuple[BackendPair, ...], ["onnxruntime~tensorrt"]) == (TRT,)


def test_other_dict_keys_are_written_with_str() -> None:
    assert to_jsonable({1: "a", "b": 2.5}) == {"1": "a", "b": 2.5}


@pytest.mark.parametrize("text", ["torch", "torch~", "~onnxruntime", "a~b~c"])
def test_malformed_backend_pair_text_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="backend pair"):
        from_jsonable(BackendPair, text)


def test_backend_pair_must_be_a_string() -> None:
    with pytest.raises(TypeError):
        from_jsonable(BackendPair, {"reference": "torch", "candidate": "onnxruntime"})


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_literal_accepts_its_listed_values(mode: str) -> None:
    assert from_jsonable(Literal["fast", "exact"], mode) == mode
    assert from_jsonable(Outer, _through_json(_outer(mode=mode))).mode == mode


@pytest.mark.parametrize("value", ["slow", "FAST", "", None, 1])
def test_literal_rejects_other_values(value: Any) -> None:
    with pytest.raises(ValueError, match="fast"):
        from_jsonable(Literal["fast", "exact"], value)


def test_literal_field_rejects_other_values_inside_a_dataclass() -> None:
    data = _through_json(_outer())
    data["mode"] = "approximate"
    with pytest.raises(ValueError, match="approximate"):
        from_jsonable(Outer, data)


def test_optional_literal_accepts_none() -> None:
    assert from_jsonable(Literal["a", "b"] | None, None) is None
    assert from_jsonable(Literal["a", "b"] | None, "b") == "b"
    with pytest.raises(TypeError):
        from_jsonable(Literal["a", "b"] | None, "c")


@pytest.mark.parametrize(
    ("tp", "data"),
    [
        (int, "3"),
        (int, 3.0),
        (int, True),
        (int, None),
        (float, True),
        (float, [1.0]),
        (bool, 1),
        (bool, "true"),
        (str, 5),
        (str, None),
        (int | None, "x"),
        (Inner | None, 3),
    ],
)
def test_wrong_json_types_raise_type_error(tp: Any, data: Any) -> None:
    with pytest.raises(TypeError):
        from_jsonable(tp, data)


def test_wrong_type_inside_a_nested_dataclass_is_an_error() -> None:
    data = _through_json(_outer())
    data["items"][1]["label"] = 12
    with pytest.raises(TypeError):
        from_jsonable(Outer, data)


def test_fixed_length_tuple_must_have_its_length() -> None:
    with pytest.raises(ValueError):
        from_jsonable(tuple[int, int], [1, 2, 3])
    assert from_jsonable(tuple[int, str], [1, "a"]) == (1, "a")


@pytest.mark.parametrize(
    ("tp", "data"),
    [
        (tuple[str, ...], "ab"),  # a string is not an array of its characters
        (list[str], "ab"),
        (tuple[str, ...], {"a": 1}),  # nor an object an array of its keys
        (dict[str, int], [1, 2]),
        (tuple[int, ...], "12"),
    ],
)
def test_wrong_container_types_raise_type_error(tp: Any, data: Any) -> None:
    with pytest.raises(TypeError):
        from_jsonable(tp, data)


def test_any_passes_data_through() -> None:
    assert from_jsonable(Any, {"x": [1, None]}) == {"x": [1, None]}


def test_unsupported_type_is_reported() -> None:
    with pytest.raises(TypeError, match="unsupported"):
        from_jsonable(bytes, "abc")
