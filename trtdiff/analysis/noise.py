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

**Reduced precision** (FP16, BF16: `--precision`, or a graph whose own types are float16 or
bfloat16) makes errors of its own at every layer, far above float32's: each tensor is judged by
its *noise ratio*, the candidate's rel-err against the golden over the error the precision itself
makes there (Ascend msProbe's precision compare): the golden is the PyTorch model in float32, the
benchmark the PyTorch model in the same precision (trtdiff.backends.pytorch.benchmark), and the
error the precision makes at a tensor is the benchmark's rel-err against the golden, but never
less than one unit in the last place of the precision (`FLOAT16`, `BFLOAT16`: 2**-10, 2**-7 of
the tensor's largest magnitude), the least any value stored in it can be off by. About 1 is
ordinary rounding (measured: 0.3 to 1.5 on the tests' transformer block and CNN, for ONNX Runtime
and the ONNX reference evaluator), a few times more is a kernel that rounds or accumulates worse,
and an overflow past 65504, a LayerNorm variance computed in FP16 or a sum that loses its small
terms is tens to thousands of times more. The gate's default `max_noise_ratio` is 8. A local error
whose ratio is within `NOISE_RATIO_NOISE` (1: no more than the precision's own) is noise-level.
FP32 comparisons compute none of this: no golden, no benchmark, today's figures.

**Quantized tensors** (the graph's own Q/DQ nodes: an activation DequantizeLinear's output, and
the float tensor its QuantizeLinear reads) are measured in *quantization steps*: max-abs error
over the scale of that DequantizeLinear (`quant_steps`; the largest scale where it is per
channel). Rounding to the grid alone is half a step; a correct model compared with its float
model carries the steps of every layer before too: at most 2.5 steps on the tests' INT8 and
INT16 CNNs, so the gate's default `max_quant_steps` is 8, room for deeper networks. A wrong
scale, a wrong zero point or a Q and DQ that disagree move values by tens to hundreds of steps
(a DequantizeLinear scale doubled: 97). The figure is the **99.9th percentile** of |delta|, not
the max: min-max calibration clips the few values of a new input past the range it saw, and
those few positions alone would call a correct model diverged, while every Q/DQ fault (a scale,
a zero point, a Q and DQ that disagree, a tensor quantized twice) moves most of the tensor. The
price: a fault confined to fewer than 0.1% of a tensor's positions is not seen in steps (its
max-abs error is still reported). It costs one pass over the differences of quantized tensors
only; a graph with no Q/DQ computes nothing more.
A local error (the node alone on the reference's inputs) within `QUANT_STEP_NOISE` (one step:
half a step of rounding on each side) is noise-level.
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

FLOAT16 = NoiseLevel("float16", mantissa_bits=10, ulps=1.0)
BFLOAT16 = NoiseLevel("bfloat16", mantissa_bits=7, ulps=1.0)
REDUCED_LEVELS = {"fp16": FLOAT16, "bf16": BFLOAT16}
"""The least error each reduced precision makes at a tensor (one ULP of its largest value), by precision."""

NOISE_RATIO_NOISE = 1.0
"""A local error no larger than the precision's own is rounding (see the module docstring)."""


def noise_level(dtype: str) -> NoiseLevel | None:
    """The noise level of tensors of `dtype` ("float32"), or None where none is defined (nothing is noise)."""
    return _LEVELS.get(dtype)


QUANT_PERCENTILE = 99.9
"""The percentile of |delta| the step figure takes (see the module docstring)."""

QUANT_STEP_NOISE = 1.0
"""A quantized local error within one step is rounding to the grid (see the module docstring)."""


def quant_steps(max_abs: float, scale: float) -> float:
    """Max-abs error in quantization steps of `scale` (inf for a scale of 0 with an error)."""
    if scale > 0:
        return max_abs / scale
    return 0.0 if max_abs == 0 else float("inf")


def is_noise(figures: ErrorFigures, dtype: str) -> bool:
    """Whether a local error of a `dtype` tensor is rounding noise (see the module docstring);
    a quantized one (its figures hold `quant_steps`) within `QUANT_STEP_NOISE` steps, one of a
    reduced-precision comparison (`noise_ratio`) within `NOISE_RATIO_NOISE`."""
    if figures.quant_steps is not None:
        return figures.quant_steps <= QUANT_STEP_NOISE and figures.non_finite_mismatches == 0
    if figures.noise_ratio is not None:
        return figures.noise_ratio <= NOISE_RATIO_NOISE and figures.non_finite_mismatches == 0
    level = noise_level(dtype)
    return level is not None and level.holds(figures)
