"""trtdiff.backends.store.TensorStore: in memory up to the byte budget, spilled to .npy files beyond it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from trtdiff.backends.store import TensorStore


@pytest.fixture
def spill_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make the store create its spill folder under tmp_path, where the test can see it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _spill_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.npy"))


def _array(value: float, n: int = 10, dtype: type = np.float32) -> np.ndarray:
    return np.arange(n, dtype=dtype) + dtype(value)


def test_values_within_the_budget_stay_in_memory(spill_root: Path) -> None:
    with TensorStore(memory_bytes=80) as store:
        a, b = _array(0), _array(100)  # 40 bytes each: exactly the budget
        store.put("a", a)
        store.put("b", b)
        assert store.spilled == 0
        assert list(spill_root.iterdir()) == []
        assert len(store) == 2 and "a" in store and "b" in store
        np.testing.assert_array_equal(store.get("a"), a)
        np.testing.assert_array_equal(store.get("b"), b)


def test_values_past_the_budget_spill_to_disk_and_come_back_equal(spill_root: Path) -> None:
    values = {("torch", f"t{i}"): _array(i * 10) for i in range(5)}
    with TensorStore(memory_bytes=100) as store:
        for key, value in values.items():
            store.put(key, value)
        assert store.spilled == 3  # 40 + 40 fit in 100, the third would make 120
        assert len(_spill_files(spill_root)) == 3
        assert len(store) == 5
        for key, value in values.items():
            got = store.get(key)
            assert got.dtype == value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got, value)


def test_spilled_values_keep_dtype_and_shape(spill_root: Path) -> None:
    with TensorStore(memory_bytes=0) as store:
        values = {
            "f16": np.arange(6, dtype=np.float16).reshape(2, 3),
            "i64": np.array([[-1, 2**40]], dtype=np.int64),
            "bool": np.array([True, False, True]),
            "scalar": np.array(3.5, dtype=np.float64),
        }
        for key, value in values.items():
            store.put(key, value)
        assert store.spilled == 4
        for key, value in values.items():
            got = store.get(key)
            assert (got.dtype, got.shape) == (value.dtype, value.shape)
            np.testing.assert_array_equal(got, value)


def test_non_contiguous_value_spills_with_its_values(spill_root: Path) -> None:
    value = np.arange(12, dtype=np.float32).reshape(3, 4).T
    with TensorStore(memory_bytes=0) as store:
        store.put("t", value)
        np.testing.assert_array_equal(store.get("t"), value)


def test_budget_is_freed_by_discard(spill_root: Path) -> None:
    with TensorStore(memory_bytes=80) as store:
        store.put("a", _array(1))
        store.put("b", _array(2))
        store.put("c", _array(3))
        assert store.spilled == 1
        store.discard("a")
        assert "a" not in store and len(store) == 2
        store.put("d", _array(4))  # fits again in memory
        assert store.spilled == 1
        np.testing.assert_array_equal(store.get("d"), _array(4))


def test_discard_of_a_spilled_value_removes_its_file(spill_root: Path) -> None:
    with TensorStore(memory_bytes=0) as store:
        store.put("a", _array(1))
        store.put("b", _array(2))
        assert len(_spill_files(spill_root)) == 2
        store.discard("a")
        assert store.spilled == 1 and "a" not in store
        assert len(_spill_files(spill_root)) == 1
        np.testing.assert_array_equal(store.get("b"), _array(2))
        with pytest.raises(KeyError):
            store.get("a")


def test_discard_of_an_unknown_key_does_nothing(spill_root: Path) -> None:
    with TensorStore(memory_bytes=40) as store:
        store.put("a", _array(1))
        store.discard("nope")
        assert len(store) == 1 and store.spilled == 0


def test_put_replaces_an_existing_key_and_its_budget(spill_root: Path) -> None:
    with TensorStore(memory_bytes=40) as store:
        store.put("a", _array(1))
        store.put("a", _array(2))  # the old 40 bytes are released first, so this fits too
        assert store.spilled == 0 and len(store) == 1
        np.testing.assert_array_equal(store.get("a"), _array(2))
        store.put("a", _array(3, n=20))  # 80 bytes: over budget, spilled
        assert store.spilled == 1 and len(store) == 1
        np.testing.assert_array_equal(store.get("a"), _array(3, n=20))
        store.put("a", _array(4, n=5))  # back in memory, the spill file is gone
        assert store.spilled == 0 and len(store) == 1
        assert _spill_files(spill_root) == []
        np.testing.assert_array_equal(store.get("a"), _array(4, n=5))


def test_get_of_a_missing_key_raises_key_error() -> None:
    with TensorStore() as store, pytest.raises(KeyError):
        store.get("missing")


def test_close_removes_the_spill_folder_and_every_value(spill_root: Path) -> None:
    store = TensorStore(memory_bytes=40)
    store.put("a", _array(1))
    store.put("b", _array(2))
    folders = [p for p in spill_root.iterdir() if p.is_dir()]
    assert len(folders) == 1
    store.close()
    assert not folders[0].exists()
    assert list(spill_root.iterdir()) == []
    assert len(store) == 0 and store.spilled == 0 and "a" not in store
    store.close()  # closing twice is harmless


def test_context_manager_removes_the_spill_folder_on_error(spill_root: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), TensorStore(memory_bytes=0) as store:
        store.put("a", _array(1))
        assert len(_spill_files(spill_root)) == 1
        raise RuntimeError("boom")
    assert list(spill_root.iterdir()) == []


def test_store_is_usable_after_close(spill_root: Path) -> None:
    store = TensorStore(memory_bytes=0)
    store.put("a", _array(1))
    store.close()
    store.put("b", _array(2))
    assert store.spilled == 1
    np.testing.assert_array_equal(store.get("b"), _array(2))
    store.close()
    assert list(spill_root.iterdir()) == []


def test_no_spill_folder_without_spilling(spill_root: Path) -> None:
    with TensorStore(memory_bytes=1 << 20) as store:
        for i in range(10):
            store.put(i, _array(i))
        assert store.spilled == 0
    assert list(spill_root.iterdir()) == []


def test_spill_files_of_live_keys_never_collide(spill_root: Path) -> None:
    with TensorStore(memory_bytes=0) as store:
        store.put(0, np.full(2, 0.0))
        store.put(2, np.full(2, 2.0))
        store.discard(0)
        store.put(-2, np.full(2, -2.0))
        np.testing.assert_array_equal(store.get(2), np.full(2, 2.0))
        np.testing.assert_array_equal(store.get(-2), np.full(2, -2.0))


def test_to_host_reads_bfloat16_as_float32_and_leaves_arrays_as_they_are() -> None:
    import torch

    from trtdiff.backends.store import to_host

    values = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    host = to_host(values)
    assert host.dtype == np.float32 and host.tolist() == [1.5, -2.0, 3.25]
    array = np.arange(3, dtype=np.float16)
    assert to_host(array) is array


def test_with_beyond_nothing_goes_to_disk_what_it_names_is_held_and_the_rest_dropped(spill_root: Path) -> None:
    with TensorStore(memory_bytes=40, beyond=lambda key: str(key).startswith("out")) as store:
        store.put("a", _array(0))  # 40 bytes: the budget
        store.put("b", _array(1))  # past it: dropped
        store.put("out", _array(2))  # past it, named: held in memory all the same
        assert "a" in store and "b" not in store and "out" in store
        assert store.dropped == 1 and store.spilled == 0 and store.held_bytes == 80
        assert _spill_files(spill_root) == [] and list(spill_root.iterdir()) == []
        np.testing.assert_array_equal(store.get("out"), _array(2))
