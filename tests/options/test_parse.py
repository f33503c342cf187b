"""trtdiff.options.parse: the text forms of option values (shapes, channel values, sizes, byte sizes, lists)."""

from __future__ import annotations

import pytest

from trtdiff.errors import OptionError
from trtdiff.options.parse import (
    format_bytes,
    parse_bytes,
    parse_channels,
    parse_hw,
    parse_input_shape,
    parse_opset,
    parse_opsets,
    parse_recording,
)


def _one_line(info: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1x3x512x512", (None, (1, 3, 512, 512))),
        ("image:1x3x64x64", ("image", (1, 3, 64, 64))),
        ("input:0:2x4", ("input:0", (2, 4))),
        ("7", (None, (7,))),
        (" 1X3 ", (None, (1, 3))),
    ],
)
def test_parse_input_shape(text: str, expected: tuple[str | None, tuple[int, ...]]) -> None:
    assert parse_input_shape(text) == expected


@pytest.mark.parametrize("text", ["1x3xfoo", "", "image:", "1x3x", "1.5x2", ":1x3"])
def test_parse_input_shape_bad(text: str) -> None:
    with pytest.raises(OptionError, match=r"^input_shapes ") as info:
        parse_input_shape(text)
    assert "1x3x224x224" in str(info.value) and "\n" not in str(info.value)
    assert info.value.parameter == "input_shapes" and info.value.value == text


@pytest.mark.parametrize("text", ["1x0x8", "1x-3x8"])
def test_parse_input_shape_non_positive(text: str) -> None:
    with pytest.raises(OptionError, match="positive"):
        parse_input_shape(text)


@pytest.mark.parametrize(
    ("text", "option", "message"),
    [
        ("0.5,abc,0.5", "mean", "not a comma-separated list"),
        ("0.5,0.5", "mean", "2 values for 3 channels"),
        ("0.2,0,0.2", "std", "must be positive"),
        ("nan", "mean", "finite"),
    ],
)
def test_bad_mean_std(text: str, option: str, message: str) -> None:
    with pytest.raises(OptionError, match=message) as info:
        parse_channels(text, option)
    assert _one_line(info).startswith(option) and info.value.parameter == option


def test_channel_values_and_size() -> None:
    assert parse_channels("0.5", "mean") == (0.5, 0.5, 0.5)
    assert (
        parse_hw("512x1024", "size") == (512, 1024)
        and parse_hw("64", "size") == (64, 64)
        and parse_hw("32,48", "size") == (32, 48)
    )
    for bad in ("", "0x4", "4x4x4", "axb"):
        with pytest.raises(OptionError, match=r"^size "):
            parse_hw(bad, "size")


def test_byte_sizes_read_and_write_back() -> None:
    assert parse_bytes("2GB", "memory_bytes") == 2 << 30 and parse_bytes("512mb", "x") == 512 << 20
    assert parse_bytes("1.5g", "x") == int(1.5 * (1 << 30)) and parse_bytes("4096", "x") == 4096
    assert format_bytes(2 << 30) == "2GB" and format_bytes(1536) == "1536" and format_bytes(64 << 10) == "64KB"
    with pytest.raises(OptionError, match=r"^memory_bytes lots: expected a size such as 512MB or 2GB"):
        parse_bytes("lots", "memory_bytes")


def test_opsets_and_recordings() -> None:
    assert parse_opsets("11,13, 17", "opsets") == (11, 13, 17) and parse_opset("13", "opset") == 13
    with pytest.raises(OptionError, match="one value here; sweeps are for compare"):
        parse_opset("13,17", "opset")
    assert parse_recording("onnxruntime=ort.npz", "recordings") == ("onnxruntime", "ort.npz")
    with pytest.raises(OptionError, match=r"expected BACKEND=FILE\.npz"):
        parse_recording("ort.npz", "recordings")
