"""The model's upsampling calls, as one forward pass sees them: op, mode, align_corners, output
shape, module path and the line of the model's code.

ONNX cannot say whether a Resize came from `align_corners=True`; the PyTorch call can. Both
`inspect` and the culprit pass's advice read these records.
"""

from __future__ import annotations

import importlib.util
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.errors import ModelRunError, first_line, param
from trtdiff.report.inspection import Interpolation

if TYPE_CHECKING:
    import torch

_TORCH_DIR = str(Path(spec.origin).parent) if (spec := importlib.util.find_spec("torch")) and spec.origin else "torch"
_TORCH_MODES = ("nearest_exact", "nearest", "bicubic", "linear")


def record_interpolations(module: torch.nn.Module, feeds: Mapping[str, np.ndarray]) -> list[Interpolation]:
    """Run `module` once on `feeds` (in order) and list its upsampling calls with module path and source line."""
    import torch

    eager = not isinstance(module, (torch.jit.ScriptModule, torch.fx.GraphModule))
    paths: list[str] | None = [] if eager else None
    recorder = _recorder_class()(paths, len(traceback.extract_stack()))
    handles = _hook_paths(module, paths) if paths is not None else []
    tensors = [torch.from_numpy(np.array(value, copy=True, order="C")) for value in feeds.values()]
    try:
        with torch.no_grad(), recorder:
            module(*tensors)
    except Exception as error:
        raise ModelRunError(
            f"the model's forward raised {type(error).__name__}: {first_line(error)}; check "
            f"{param('input_shapes')} / {param('input_files')} against what the model expects"
        ) from error
    finally:
        for handle in handles:
            handle.remove()
    return list(recorder.calls)


def _recorder_class() -> type:
    """A TorchDispatchMode that records aten upsample ops (defined on first use: torch is imported lazily)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self, paths: list[str] | None, depth: int) -> None:
            super().__init__()  # type: ignore[no-untyped-call]  # torch declares no types here
            self.paths, self.depth, self.calls = paths, depth, list[Interpolation]()

        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            name = func._overloadpacket.__name__
            if "upsample" in name and hasattr(out, "shape"):
                flags = [a for a in args[1:] if isinstance(a, bool)]
                module = self.paths[-1] if self.paths else ("" if self.paths is not None else None)
                mode = next((m for m in _TORCH_MODES if m in name), name)
                aligned = flags[0] if flags else None
                call = Interpolation(name.strip("_"), mode, aligned, tuple(out.shape), module, _caller(self.depth))
                self.calls.append(call)
            return out

    return Recorder


def _caller(depth: int) -> str | None:
    """The innermost line of the model's own code: below the forward call, outside torch, this file and
    generated code (an ExportedProgram's "<eval_with_key>")."""
    skip = (_TORCH_DIR, __file__, "<")
    frames = [f for f in traceback.extract_stack()[depth:] if not any(f.filename.startswith(p) for p in skip)]
    return f"{frames[-1].filename}:{frames[-1].lineno}: {(frames[-1].line or '').strip()}" if frames else None


def _hook_paths(module: torch.nn.Module, paths: list[str]) -> list[Any]:
    """Forward hooks keeping `paths[-1]` the path of the submodule running now."""

    def leave(_module: Any, _args: Any, _output: Any) -> None:
        paths.pop()

    handles = []
    for path, sub in module.named_modules():
        if path:
            handles.append(sub.register_forward_pre_hook(lambda _m, _a, path=path: paths.append(path)))
            handles.append(sub.register_forward_hook(leave))
    return handles
