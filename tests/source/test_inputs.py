"""Input shapes and input files turned into the arrays every backend is fed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from trtdiff.errors import InputError, OptionError
from trtdiff.source.inputs import available_memory, check_memory, load_input_file, make_inputs


def test_random_inputs_positional_and_named() -> None:
    arrays = make_inputs(["image", "mask"], shapes=["mask:1x1x4x4", "1x3x4x4"], seed=3)
    assert list(arrays) == ["image", "mask"]
    assert arrays["image"].shape == (1, 3, 4, 4) and arrays["mask"].shape == (1, 1, 4, 4)
    assert arrays["image"].dtype == np.float32


def test_random_inputs_are_seeded() -> None:
    a = make_inputs(["x"], shapes=["2x3"], seed=5)["x"]
    b = make_inputs(["x"], shapes=["2x3"], seed=5)["x"]
    c = make_inputs(["x"], shapes=["2x3"], seed=6)["x"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(a, np.random.default_rng(5).standard_normal((2, 3), dtype=np.float32))


def test_a_large_random_input_drawn_in_parts_is_the_same_whatever_the_number_of_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From 4 parts of 2**20 values on, the parts are drawn on threads, each from its own child generator: the values
    depend on the seed and the shape, not on the machine; they are standard normal and differ from part to part."""
    shape = ["1x3x1024x1024"]  # 3 parts: drawn whole, as before
    np.testing.assert_array_equal(
        make_inputs(["x"], shapes=shape, seed=1)["x"],
        np.random.default_rng(1).standard_normal((1, 3, 1024, 1024), dtype=np.float32),
    )
    shape = ["1x5x1024x1024"]  # 5 parts
    many = make_inputs(["x"], shapes=shape, seed=1)["x"]
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    one = make_inputs(["x"], shapes=shape, seed=1)["x"]
    np.testing.assert_array_equal(many, one)
    assert abs(float(many.mean())) < 0.01 and abs(float(many.std()) - 1) < 0.01
    parts = many.reshape(-1)[: 5 << 20].reshape(5, 1 << 20)
    assert not np.array_equal(parts[0], parts[1])
    assert not np.array_equal(many, make_inputs(["x"], shapes=shape, seed=2)["x"])


def test_dtypes() -> None:
    arrays = make_inputs(
        ["ids", "flag", "half"],
        shapes=["2x50", "3", "2x2"],
        dtypes={"ids": np.dtype(np.int64), "flag": np.dtype(bool), "half": np.dtype(np.float16)},
    )
    assert arrays["ids"].dtype == np.int64 and arrays["ids"].min() >= 0 and arrays["ids"].max() < 10
    assert arrays["flag"].dtype == np.bool_ and arrays["flag"].shape == (3,)
    assert arrays["half"].dtype == np.float16


def test_npy_file_keeps_float64(tmp_path: Path) -> None:
    data = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.save(tmp_path / "x.npy", data)
    assert len(load_input_file(tmp_path / "x.npy")) == 1
    arrays = make_inputs(["x"], files=[str(tmp_path / "x.npy")])
    assert arrays["x"].dtype == np.float64
    np.testing.assert_array_equal(arrays["x"], data)


def test_npz_named_and_positional(tmp_path: Path) -> None:
    a, b = np.ones((1, 2), np.float32), np.zeros((3,), np.int64)
    np.savez(tmp_path / "named.npz", mask=b, image=a)
    np.savez(tmp_path / "positional.npz", a, b)
    assert isinstance(load_input_file(tmp_path / "named.npz"), dict)
    positional = load_input_file(tmp_path / "positional.npz")
    assert isinstance(positional, list) and [p.shape for p in positional] == [(1, 2), (3,)]
    for name in ("named.npz", "positional.npz"):
        arrays = make_inputs(["image", "mask"], files=[str(tmp_path / name)])
        assert list(arrays) == ["image", "mask"]
        np.testing.assert_array_equal(arrays["image"], a)
        assert arrays["mask"].dtype == np.int64


def test_npz_unknown_name(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", imgae=np.ones(2))
    with pytest.raises(InputError, match=r"no input named 'imgae'; its inputs are 'image'"):
        make_inputs(["image"], files=[str(tmp_path / "in.npz")])


@pytest.mark.parametrize("kind", ["tensor", "list", "tuple", "dict"])
def test_pt_files(tmp_path: Path, kind: str) -> None:
    image, mask = torch.randn(1, 3, 4, 4), torch.ones(1, 1, 4, 4, dtype=torch.bool)
    obj = {"tensor": image, "list": [image, mask], "tuple": (image, mask), "dict": {"mask": mask, "image": image}}[kind]
    torch.save(obj, tmp_path / "in.pt")
    names = ["image"] if kind == "tensor" else ["image", "mask"]
    arrays = make_inputs(names, files=[str(tmp_path / "in.pt")])
    np.testing.assert_array_equal(arrays["image"], image.numpy())
    if kind != "tensor":
        assert arrays["mask"].dtype == np.bool_


def test_named_file_and_shape_mixed(tmp_path: Path) -> None:
    np.save(tmp_path / "m.npy", np.ones((1, 1, 4, 4), np.float32))
    arrays = make_inputs(["image", "mask"], files=[f"mask:{tmp_path / 'm.npy'}"], shapes=["1x3x4x4"])
    assert arrays["mask"].sum() == 16 and arrays["image"].shape == (1, 3, 4, 4)
    positional = make_inputs(["image", "mask"], files=[str(tmp_path / "m.npy")], shapes=["1x3x4x4"])
    assert positional["image"].shape == (1, 1, 4, 4) and positional["mask"].shape == (1, 3, 4, 4)


def test_missing_input() -> None:
    with pytest.raises(InputError, match=r"input 'mask' has no shape.*input_shapes mask:1x3x224x224"):
        make_inputs(["image", "mask"], shapes=["1x3x4x4"])


def test_no_inputs_given() -> None:
    with pytest.raises(InputError, match="no input_shapes or input_files was given"):
        make_inputs(["image"])


def test_unknown_shape_name() -> None:
    with pytest.raises(InputError, match=r"no input named 'img'; its inputs are 'image', 'mask'"):
        make_inputs(["image", "mask"], shapes=["img:1x3x4x4", "1x1x4x4"])


def test_too_many_and_duplicate() -> None:
    with pytest.raises(InputError, match="more inputs given than the model has"):
        make_inputs(["image"], shapes=["1x3x4x4", "1x3x4x4"])
    with pytest.raises(InputError, match="already given"):
        make_inputs(["image"], shapes=["image:1x3x4x4", "image:1x3x8x8"])


def test_zero_dim_is_option_error() -> None:
    with pytest.raises(OptionError, match="positive"):
        make_inputs(["image"], shapes=["1x3x0x4"])


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.npy", None, "no such file"),
        ("bad.npy", b"not numpy", "cannot read it as a .npy array"),
        ("bad.npz", b"PK\x03\x04junk", "cannot read it as a .npz archive"),
        ("bad.pt", b"junk", "cannot read it as a torch.save file"),
        ("in.csv", b"1,2,3", "unsupported file type '.csv'"),
    ],
)
def test_bad_files(tmp_path: Path, name: str, content: bytes | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message) as info:
        load_input_file(path)
    assert "\n" not in str(info.value)


def test_pt_file_with_non_tensor(tmp_path: Path) -> None:
    torch.save({"image": 3}, tmp_path / "in.pt")
    with pytest.raises(InputError, match="not a tensor"):
        load_input_file(tmp_path / "in.pt")


def test_pt_file_with_pickled_object_is_refused(tmp_path: Path) -> None:
    torch.save(torch.nn.ReLU(), tmp_path / "in.pt")
    with pytest.raises(InputError, match=r"cannot read it as a torch\.save file"):
        load_input_file(tmp_path / "in.pt")


def test_a_shape_too_big_for_memory_is_refused_before_any_work() -> None:
    shape = (1, 3, 2048, 2048)  # the README's demo size: 48 MiB, three times over
    given = {"x": (("input_shapes", "1x3x2048x2048"), shape, np.dtype(np.float32))}
    check_memory(given, available=24 << 30)
    with pytest.raises(InputError) as caught:
        check_memory(given, available=100 << 20)
    assert caught.value.parameter == "input_shapes" and caught.value.value == "1x3x2048x2048"
    assert str(caught.value) == (
        "input_shapes 1x3x2048x2048: input 'x' takes 48.0 MiB, and a comparison holds its inputs at least 3 "
        "times (144.0 MiB), but 100.0 MiB of memory is available here; give a smaller shape"
    )
    available = available_memory()
    assert available is not None and available > 0  # read from /proc/meminfo (and the cgroup) here
    with pytest.raises(InputError, match="of memory is available here"):  # 12 TB: refused, never allocated
        make_inputs(["x"], shapes=["1x3x1000000x1000000"])
