"""When a node's local error is rounding noise: defined once, for every view that groups such culprits.

Thresholds far tighter than the arithmetic (`--rtol 1e-9`) make every node a culprit: each
one's local error (the node alone on the reference's inputs) is the last bits of its own
rounding, and naming them one by one ("cause unknown", twenty times) hides the ones that
matter. A local error is *noise-level* when it is within a few units in the last place (ULP)
of the tensor's type at the reference's largest magnitude: max-abs error <= `ulps` x
2**-`mantissa_bits` x the reference's largest magnitude, i.e. rel-err <= `ulps` x
2**-`mantissa_bits`.

For float32 (23 mantissa bits) that is 4 ULP, rel-err <= 4 x 2**-23 ~ 4.8e-7. Why 4: a
correctly rounded operation is within half an ULP of its exact value, so two correct
implementations differ by up to one; a reduction (convolution, matrix product, softmax's
sum) summed in another order or with fused multiply-adds adds a few more ULP of the largest
value it sums to. 4 keeps every such difference, and nothing that a wrong constant, a
changed rounding mode or a lower precision (FP16: 2**-10) gives, all orders of magnitude
above it. Local errors are measured on the reference's own inputs, so upstream error does not
accumulate into them.

Only float32 is defined here. Reduced precision (an FP16 or INT8 engine, whose tensors the
graph still declares float32) is another question, for which `NoiseLevel` is the unit to extend:
a level per (type, precision), chosen where the engine's precision is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtdiff.report import ErrorFigures


@dataclass(frozen=True)
class NoiseLevel:
    """Rounding noise of one number type: `ulps` units in the last place of a `mantissa_bits` mantissa."""

    dtype: str
    mantissa_bits: int
    ulps: float = 4.0

    @property
    def rel_err(self) -> float:
        """The largest relative error (max-abs over the reference's largest magnitude) that is noise."""
        return self.ulps * 2.0**-self.mantissa_bits

    def holds(self, figures: ErrorFigures) -> bool:
        """Whether `figures` are noise: finite figures within `rel_err`, and no NaN/Inf that differ."""
        return figures.rel_err is not None and figures.rel_err <= self.rel_err and figures.non_finite_mismatches == 0

    def describe(self) -> str:
        """ "within 4 ULP of float32" """
        return f"within {self.ulps:g} ULP of {self.dtype}"


FLOAT32 = NoiseLevel("float32", mantissa_bits=23)
_LEVELS = {level.dtype: level for level in (FLOAT32,)}


def noise_level(dtype: str) -> NoiseLevel | None:
    """The noise level of tensors of `dtype` ("float32"), or None where none is defined (nothing is noise)."""
    return _LEVELS.get(dtype)


def is_noise(figures: ErrorFigures, dtype: str) -> bool:
    """Whether a local error of a `dtype` tensor is rounding noise (see the module docstring)."""
    level = noise_level(dtype)
    return level is not None and level.holds(figures)
