"""Tensors a backend produced elsewhere, recorded by `trtdiff run` (`save`) and replayed by `recordings`.

The file is an .npz written entry by entry (never the whole model's intermediates in RAM):
each ONNX tensor under its name, the inputs under `__input__/<name>`, and `__meta__` (JSON:
the backend's description and the sha256 of the ONNX file it ran), so a comparison can
refuse a recording of a different model.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff import outputs
from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, chunk_names
from trtdiff.errors import InputError, param

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

INPUT_PREFIX = "__input__/"
META = "__meta__"
_PARAM = "recordings"
# How to record backend {0}: the `trtdiff run` command, with its parameters marked.
_RECORD_HINT = f"`trtdiff run MODEL {param('backend')} {{0}} {param('save')} FILE.npz`"


def onnx_digest(graph: GraphInfo) -> str:
    """sha256 of the serialized ONNX model: what a recording is tied to."""
    return hashlib.sha256(graph.model.SerializeToString(deterministic=True)).hexdigest()


def record(
    runner: OnnxBackend,
    graph: GraphInfo,
    feeds: Mapping[str, np.ndarray],
    path: Path,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> int:
    """Run `runner` on `feeds` and write every tensor it can return to `path`; returns the count."""
    available = runner.available()
    wanted = [t for t in graph.node_outputs if t in available]
    sizes = {t: n for t in wanted if (n := graph.tensor_type(t).nbytes()) is not None}
    count = 0
    with (
        outputs.replacing(path) as partial,  # in place once whole; an interrupted run leaves nothing
        zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive,
    ):
        for name, value in feeds.items():
            _write(archive, INPUT_PREFIX + name, value)
        for group in chunk_names(wanted, sizes, chunk_bytes):
            for chunk in runner.run(feeds, group, sizes=sizes, max_bytes=chunk_bytes):
                for name, value in chunk.items():
                    _write(archive, name, value)
                    count += 1
        meta = {
            "backend": runner.name,
            "describe": runner.describe(),
            "onnx_sha256": onnx_digest(graph),
            "tensors": count,
        }
        _write(archive, META, np.array(json.dumps(meta)))
    return count


def _write(archive: zipfile.ZipFile, key: str, value: np.ndarray) -> None:
    with archive.open(key + ".npy", "w", force_zip64=True) as handle:
        np.lib.format.write_array(handle, np.asarray(value), allow_pickle=False)


class RecordedBackend(OnnxBackend):
    """An `OnnxBackend` that replays a recording instead of running anything; `close()` closes the file."""

    def __init__(self, name: str, path: str | Path, graph: GraphInfo) -> None:
        self.path = Path(path)
        given = f"{name}={self.path}"  # as `recordings` names it: backend=file
        if not self.path.is_file():
            raise InputError(
                f"no such file; record one with {_RECORD_HINT.format(name)}", parameter=_PARAM, value=given
            )
        try:
            self._archive = np.load(self.path, allow_pickle=False)
        except Exception as error:  # not a zip, not npz
            raise _not_a_recording(error, given) from error
        try:
            meta = self._meta(name, given, graph)
        except BaseException:
            self._archive.close()  # a refused file is not left open
            raise
        self.name = name
        self._describe = f"{meta.get('describe', name)} (recorded in {self.path.name})"
        keys = set(self._archive.files)
        self._tensors = {k for k in keys if not k.startswith(INPUT_PREFIX) and k != META}
        self.inputs = {k[len(INPUT_PREFIX) :]: self._archive[k] for k in keys if k.startswith(INPUT_PREFIX)}

    def _meta(self, name: str, given: str, graph: GraphInfo) -> dict[str, Any]:
        """The recording's metadata, checked: it records backend `name`, on the ONNX file `graph`."""
        try:
            meta: dict[str, Any] = json.loads(str(self._archive[META]))
        except Exception as error:  # no metadata
            raise _not_a_recording(error, given) from error
        recorded = meta.get("backend")
        if recorded != name:
            raise InputError(
                f"the file records backend {recorded!r}, not {name!r}; use {param(_PARAM)} {recorded}=...",
                parameter=_PARAM,
                value=given,
            )
        if meta.get("onnx_sha256") != onnx_digest(graph):
            raise InputError(
                f"recorded on a different ONNX file than {graph.path.name}; "
                f"pass the ONNX file it ran with {param('onnx')}, or record again",
                parameter=_PARAM,
                value=given,
            )
        return meta

    def _release(self) -> None:
        self._archive.close()

    def describe(self) -> str:
        return self._describe

    def available(self) -> set[str]:
        return set(self._tensors)

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        for name, value in feeds.items():
            if name in self.inputs and not np.array_equal(self.inputs[name], value):
                raise InputError(
                    f"input {name} differs from the recorded one; "
                    f"compare with the recorded inputs (they are used when {param(_PARAM)} is given)",
                    parameter=_PARAM,
                    value=f"{self.name}={self.path}",
                )
        self._check_open()
        names = [t for t in wanted if t in self._tensors]
        for group in chunk_names(names, sizes, max_bytes):
            yield {name: self._archive[name] for name in group}


def _not_a_recording(error: BaseException, given: str) -> InputError:
    return InputError(
        f"not a trtdiff recording ({type(error).__name__}); record one with `trtdiff run`",
        parameter=_PARAM,
        value=given,
    )


def recorded_inputs(load: Mapping[str, str | Path]) -> dict[str, np.ndarray]:
    """The inputs stored in the first recording (all recordings must share them)."""
    name, path = next(iter(load.items()))
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k[len(INPUT_PREFIX) :]: archive[k] for k in archive.files if k.startswith(INPUT_PREFIX)}
    except Exception as error:
        raise InputError(
            f"not a readable trtdiff recording ({type(error).__name__}); record one with {_RECORD_HINT.format('B')}",
            parameter=_PARAM,
            value=f"{name}={path}",
        ) from error
