"""`trtdiff run`: record every tensor one ONNX backend produces, to compare elsewhere with recordings.

For a backend that runs where PyTorch does not (an edge device with ONNX Runtime or
TensorRT): record there, then compare on a machine with the PyTorch model, giving the ONNX
file and the recording, with the same pairing and reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.errors import BackendError, OptionError
from trtdiff.options import ONNX_BACKENDS, CompareOptions
from trtdiff.pipeline.prepare import check_new_file, prepare

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Recording:
    """What `trtdiff run` wrote."""

    path: str
    backend: str
    describe: str
    tensors: int
    onnx_sha256: str
    onnx_path: str | None
    inputs: dict[str, tuple[int, ...]]


def run(
    model: str | Path | torch.nn.Module,
    options: CompareOptions | None = None,
    *,
    backend: str,
    save: str | Path,
    **fields: Any,
) -> Recording:
    """Run `backend` on the model's ONNX file and record every tensor it returns to `save` (.npz).

    Options as for `compare` (the model, export and backend parts are read).
    """
    from trtdiff.backends.recorded import onnx_digest, record

    options = (options or CompareOptions()).with_fields(**fields)
    if backend not in ONNX_BACKENDS:
        raise OptionError(
            f"only ONNX backends can be recorded ({', '.join(ONNX_BACKENDS)}); "
            "the PyTorch reference is captured by compare itself",
            parameter="backend",
            value=backend,
        )
    if options.runtime.save_engine is not None:
        raise OptionError("use `trtdiff build` to keep an engine; `run` records tensors", parameter="save_engine")
    target = check_new_file(save, options.force, "save")
    assert target is not None
    if target.suffix != ".npz":
        raise OptionError(
            f"recordings are .npz files; name it {target.with_suffix('.npz').name}", parameter="save", value=target
        )
    options = dataclasses.replace(options, runtime=dataclasses.replace(options.runtime, require=(backend,)))
    options.export.validate()
    options.runtime.validate()
    with _required_by(backend), prepare(model, options, backends=(backend,)) as prepared:
        runner = prepared.backends[0]
        count = record(runner, prepared.graph, prepared.feeds, target)
        return Recording(
            path=str(target),
            backend=backend,
            describe=runner.describe(),
            tensors=count,
            onnx_sha256=onnx_digest(prepared.graph),
            onnx_path=prepared.onnx_path,
            inputs={name: tuple(int(d) for d in value.shape) for name, value in prepared.feeds.items()},
        )


@contextmanager
def _required_by(backend: str) -> Iterator[None]:
    """A required backend that cannot run is named by the `backend` parameter, which required it."""
    try:
        yield
    except BackendError as error:
        if error.parameter != "require":
            raise
        cause = error.template.split(": ", 1)[-1]
        raise BackendError(cause, parameter="backend", value=backend) from error
