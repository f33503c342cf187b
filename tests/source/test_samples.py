"""trtdiff.source.samples: sample 0 is what the model was prepared with; later samples are seeded, a folder's, or none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from trtdiff.errors import InputError
from trtdiff.options import CompareOptions
from trtdiff.source.inputs import make_inputs
from trtdiff.source.samples import Sample, SampleSource, folder_samples, random_samples

SHAPE = "1x3x8x8"


def _prepared_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs prepare builds from the same options (sample 0)."""
    return make_inputs(["x"], shapes=[SHAPE], seed=seed)


def _stream(options: CompareOptions, feeds: dict[str, np.ndarray]) -> list[Sample]:
    source = SampleSource.open(options, None)
    return list(source.stream(feeds, tuple(feeds), {}))


def test_random_samples_are_made_lazily_by_index() -> None:
    made: list[int] = []

    def make(index: int) -> tuple[np.ndarray, ...]:
        made.append(index)
        return (np.full((1,), index),)

    samples = random_samples(3, make)
    assert made == []
    assert next(samples).name == "sample-0" and made == [0]
    rest = list(samples)
    assert [s.name for s in rest] == ["sample-1", "sample-2"] and made == [0, 1, 2]
    assert [int(s.values[0][0]) for s in rest] == [1, 2]
    assert all(s.label is None for s in rest)


def test_without_a_count_one_sample_named_input() -> None:
    (only,) = random_samples(None, lambda index: (np.zeros(1),))
    assert only.name == "input"


def test_a_single_comparison_streams_the_prepared_feeds() -> None:
    feeds = _prepared_feeds()
    source = SampleSource.open(CompareOptions().with_fields(input_shapes=[SHAPE]), None)
    assert source.first is None and source.first_feeds() is None
    (only,) = list(source.stream(feeds, ("x",), {}))
    assert only.name == "input" and only.values[0] is feeds["x"] and only.label is None


def test_n_seeded_samples_start_with_the_prepared_feeds() -> None:
    options = CompareOptions().with_fields(input_shapes=[SHAPE], num_samples=4)
    feeds = _prepared_feeds()
    samples = _stream(options, feeds)
    assert [s.name for s in samples] == ["sample-0", "sample-1", "sample-2", "sample-3"]
    assert samples[0].values[0] is feeds["x"]
    arrays = [s.values[0] for s in samples]
    assert all(a.shape == (1, 3, 8, 8) and a.dtype == np.float32 for a in arrays)
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(arrays[i], arrays[j]), (i, j)


def test_seeded_samples_are_reproducible_and_follow_the_seed() -> None:
    options = CompareOptions().with_fields(input_shapes=[SHAPE], num_samples=3)
    again = _stream(options, _prepared_feeds())
    once = _stream(options, _prepared_feeds())
    for a, b in zip(once, again, strict=True):
        np.testing.assert_array_equal(a.values[0], b.values[0])
    other = _stream(options.with_fields(seed=5), _prepared_feeds(5))
    assert not np.array_equal(other[1].values[0], once[1].values[0])


def test_seeded_samples_keep_the_model_input_dtypes() -> None:
    options = CompareOptions().with_fields(input_shapes=["ids:2x4"], num_samples=2)
    dtypes = {"ids": np.dtype(np.int64)}
    feeds = make_inputs(["ids"], shapes=["ids:2x4"], seed=0, dtypes=dtypes)
    source = SampleSource.open(options, None)
    samples = list(source.stream(feeds, ("ids",), dtypes))
    assert samples[1].values[0].dtype == np.int64 and samples[1].values[0].shape == (2, 4)
    assert ((samples[1].values[0] >= 0) & (samples[1].values[0] < 10)).all()


def test_several_inputs_keep_their_order() -> None:
    shapes = ["a:1x2", "b:1x3"]
    options = CompareOptions().with_fields(input_shapes=shapes, num_samples=2)
    feeds = make_inputs(["a", "b"], shapes=shapes, seed=0)
    samples = list(SampleSource.open(options, None).stream(feeds, ("a", "b"), {}))
    assert [tuple(v.shape for v in s.values) for s in samples] == [((1, 2), (1, 3))] * 2


def test_seeded_samples_without_input_shapes_take_the_prepared_shapes() -> None:
    options = CompareOptions().with_fields(num_samples=2)  # shapes read from the ONNX file by prepare
    feeds = _prepared_feeds()
    samples = _stream(options, feeds)
    assert [s.values[0].shape for s in samples] == [(1, 3, 8, 8)] * 2


def test_a_recording_replays_its_inputs_as_the_only_sample() -> None:
    recorded = {"x": np.ones((1, 3, 8, 8), np.float32)}
    source = SampleSource.open(CompareOptions(), recorded)
    assert source.first is not None and source.first.name == "recorded"
    first_feeds = source.first_feeds()
    assert first_feeds is not None and list(first_feeds) == ["input_0"]
    assert first_feeds["input_0"] is recorded["x"]
    feeds = {"x": recorded["x"].copy()}
    (only,) = list(source.stream(feeds, ("x",), {}))
    assert only.name == "recorded" and only.values[0] is feeds["x"]


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for name in ("b", "a", "c")}
    for name, array in arrays.items():
        np.save(images / f"{name}.npy", array)
        np.save(labels / f"{name}.npy", np.full((8, 8), ord(name) - ord("a"), np.int64))
    return images, labels, arrays


def test_a_folder_gives_its_files_in_sorted_order_with_labels(folder: tuple[Path, Path, dict]) -> None:
    images, labels, arrays = folder
    options = CompareOptions().with_fields(inputs_dir=str(images), labels_dir=str(labels))
    source = SampleSource.open(options, None)
    assert source.first is not None and source.first.name == "a"
    first_feeds = source.first_feeds()
    assert first_feeds is not None
    np.testing.assert_array_equal(first_feeds["input_0"], arrays["a"])
    feeds = {"x": first_feeds["input_0"]}
    samples = list(source.stream(feeds, ("x",), {}))
    assert [s.name for s in samples] == ["a", "b", "c"]
    assert samples[0].values[0] is feeds["x"]
    np.testing.assert_array_equal(samples[2].values[0], arrays["c"])
    assert [int(s.label[0, 0, 0]) for s in samples if s.label is not None] == [0, 1, 2]
    assert samples[1].label is not None and samples[1].label.shape == (1, 8, 8)


def test_folder_samples_are_read_one_at_a_time(folder: tuple[Path, Path, dict]) -> None:
    images, _labels, _arrays = folder
    (images / "b.npy").write_bytes(b"not an array")
    samples: Iterator[Sample] = folder_samples(CompareOptions().with_fields(inputs_dir=str(images)))
    assert next(samples).name == "a"  # the broken file is not read yet
    with pytest.raises(InputError) as caught:
        next(samples)
    assert caught.value.parameter == "inputs_dir"


def test_inputs_holding_some_nan_or_inf_are_noted_and_none_finite_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "inputs"
    folder.mkdir()
    for index, bad in enumerate(([np.nan], [np.inf, -np.inf], [])):
        array = np.ones((1, 3, 8, 8), np.float32)
        array.flat[: len(bad)] = bad
        np.save(folder / f"s{index}.npy", array)
    source = SampleSource.open(CompareOptions().with_fields(inputs_dir=str(folder)), None)
    assert source.notes() == ()
    first = source.first_feeds()
    assert first is not None
    samples = list(source.stream({"x": first["input_0"]}, ("x",), {}))
    assert [s.name for s in samples] == ["s0", "s1", "s2"]
    assert source.notes() == (
        "the inputs of 2 samples hold NaN/Inf values (first: input 'x' of sample s0 holds 1 NaN of 192 values)",
    )
    single = SampleSource.open(CompareOptions(), {"x": np.array([np.nan, 1.0], np.float32)})
    list(single.stream({"x": np.array([np.nan, 1.0], np.float32)}, ("x",), {}))
    assert single.notes() == (
        "input 'x' of sample recorded holds 1 NaN of 2 values; outputs computed from them may be NaN/Inf too",
    )
    refused = SampleSource.open(CompareOptions(), {"x": np.full(2, np.nan, np.float32)})
    with pytest.raises(InputError, match=r"sample recorded: input 'x' holds no finite value \(2 NaN of 2\)"):
        list(refused.stream({"x": np.full(2, np.nan, np.float32)}, ("x",), {}))
