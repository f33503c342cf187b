"""The PyTorch side of a comparison: the module and how every recording of it is made, stated once.

`TorchReference.of(module, options)` reads the settings a recording needs from the options
(the device, TF32) when the comparison is prepared; every later recording of the comparison
(sample 0 again to stream it, a later sample for the culprit pass or a non-finite search)
calls `record` on that object and says only what differs per call: the inputs, the store its
values go to (pipeline.memory.MemoryBudget sizes it), which values to keep, who sees them as
they come.
`as_recorded` fixes how attention is recorded to the way the first recording did it, so a
later sample is recorded as sample 0 was.

Nothing here imports torch at import time: the capture machinery (capture.py) is imported
when a recording is made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trtdiff.backends.store import TensorStore

if TYPE_CHECKING:
    import numpy as np
    import torch

    from trtdiff.backends.pytorch.capture import AttentionMode, Visit
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.options import BackendOptions


@dataclass(frozen=True)
class TorchReference:
    """The module the comparison records, and the settings every recording of it uses.

    `device` as the options give it ("auto": the GPU when torch sees one, resolved when
    recording); `tf32`: TF32 allowed on CUDA (off: true FP32); `attention`:
    "auto" for the first recording, the way it chose for the later ones (`as_recorded`);
    `dtype`: what the module computes in: "float32" as the user gave it, "float16"/"bfloat16"
    for the benchmark of a reduced-precision comparison ("float64" where asked);
    `cast_inputs`: floating inputs cast to `dtype` at float32 too (the golden of a reduced-precision
    comparison: an FP16 file made by AutoCast takes float16 inputs, the model float32);
    `cast`: the copy of the module cast to `dtype` (None for float32: the user's own, left
    alone), made once and shared by every reference derived from this one (`as_recorded`).
    """

    module: torch.nn.Module
    device: str = "cpu"
    tf32: bool = False
    attention: AttentionMode = "auto"
    dtype: str = "float32"
    cast_inputs: bool = False
    cast: torch.nn.Module | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.dtype != "float32" and self.cast is None:  # made once: references derived from this one share it
            import copy
            import warnings

            import torch

            with warnings.catch_warnings():  # casting a TorchScript archive reads its tensors' .grad: torch warns
                warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor that is not a leaf")
                object.__setattr__(self, "cast", copy.deepcopy(self.module).to(getattr(torch, self.dtype)))

    @classmethod
    def of(cls, module: torch.nn.Module, options: BackendOptions, *, golden: bool = False) -> TorchReference:
        """The reference of a comparison with these options: the one place its settings are read from them.

        `golden`: the comparison runs in reduced precision; the golden it is judged against is the model in
        float32, its inputs cast to float32. Its own error (about 1e-7 of a value per op) is a
        thousandth of FP16's unit roundoff (4.9e-4) and less of BF16's: it does not move a noise
        ratio, and it costs what an FP32 comparison's reference does (a float64 golden took 2.5x
        an FP32 compare's time on its own on a 2-core CPU, twice its memory, and the float64
        values crossed from a GPU to the host)."""
        return cls(module, options.torch_device, options.tf32, cast_inputs=golden)

    def at(self, dtype: str) -> TorchReference:
        """This reference computing in `dtype` ("float32", "float64", "float16", "bfloat16")."""
        return dataclasses.replace(self, dtype=dtype, cast=None)

    @property
    def settings(self) -> tuple[str, bool, str, bool]:
        """What makes two recordings of the same inputs alike (a sweep lends one to every row that matches)."""
        return self.device, self.tf32, self.dtype, self.cast_inputs

    def as_recorded(self, first: TorchCapture) -> TorchReference:
        """This reference recording attention as `first` did (op by op or fused), without checking again."""
        return dataclasses.replace(self, attention="decomposed" if first.decomposed else "fused")

    def record(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        store: TensorStore | None = None,
        visit: Visit | None = None,
        keep: Container[str] | None = None,
    ) -> TorchCapture:
        """One forward on `inputs` (in order), every computing op's output recorded (capture.capture).

        The values go to `store` (the comparison sizes it: pipeline.memory.MemoryBudget), else to a
        new store that the returned capture holds (close `capture.store` when done; closed here if
        the forward fails).
        `visit` sees each value as it is produced and only `keep` are kept, when given (a
        streamed recording: `as_recorded` first, since "auto" may record twice).
        """
        from trtdiff.backends.pytorch.capture import capture

        own = store is None
        into = TensorStore() if store is None else store
        try:
            return capture(
                self.module if self.cast is None else self.cast,
                inputs,
                device=self.device,
                tf32=self.tf32,
                store=into,
                attention=self.attention,
                visit=visit,
                keep=keep,
                dtype=None if self.dtype == "float32" and not self.cast_inputs else self.dtype,
            )
        except BaseException:
            if own:
                into.close()
            raise
