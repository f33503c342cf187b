"""Hand-built Reports whose final outputs hold NaN/Inf, for the renderer tests.

Each builds on conftest's `passing` report (one sample "input", thresholds at their defaults).
`nan_report`: a single comparison where a square root of negative numbers makes NaN in both
backends, which reach the output (the finite check fails, no layer diverges). `trt_nan_report`:
three backends where only TensorRT overflows (Inf at /norm/Pow, NaN at the output), as an FP16
engine does. `allowed_report`: the NaN report under `allow_nonfinite`, positions identical: it passes.
"""

from __future__ import annotations

import dataclasses

from trtdiff.report import (
    BackendPair,
    FirstDivergence,
    Layer,
    NonFinite,
    PairMetrics,
    Reason,
    Report,
    SampleResult,
    ThresholdCheck,
    Thresholds,
)

TORCH_ORT = BackendPair("torch", "onnxruntime")
TORCH_TRT = BackendPair("torch", "tensorrt")
ORT_TRT = BackendPair("onnxruntime", "tensorrt")


AGREE = PairMetrics(cosine=1.0, max_abs=6e-7, mean_abs=6e-8, rel_err=2.3e-7, ref_max_abs=2.6)


def layer(node: str, op_type: str, module: str, pairs: dict[BackendPair, PairMetrics], *, out: bool = False) -> Layer:
    return Layer(f"{node}_output_0", node, op_type, module, (1, 64), "float32", pairs, is_output=out, pairing="op")


def layer_check(pair: BackendPair, failed: int) -> ThresholdCheck:
    return ThresholdCheck(
        id=ThresholdCheck.make_id("layers", "layers", pair),
        scope="layers",
        threshold="layers",
        metric="divergence",
        pair=pair,
        backend=None,
        limit=0.0,
        worst=1.0,
        worst_sample="input",
        passed=not failed,
        failing_samples=("input",) if failed else (),
        compared=3,
        failed=failed,
    )


def nan_both(count: int) -> PairMetrics:
    """Both sides NaN at the same `count` positions, the rest equal."""
    return PairMetrics(
        cosine=1.0, max_abs=0.0, mean_abs=0.0, rel_err=0.0, ref_max_abs=0.0, nan_ref=count, nan_cand=count
    )


def candidate_only(nan: int, inf: int, size: int) -> PairMetrics:
    """The candidate holds `nan` NaN and `inf` Inf where the reference is finite."""
    reason = Reason("non_finite", float(nan + inf), 0.0, detail=f"{nan + inf} of {size} positions")
    return PairMetrics(
        cosine=1.0,
        max_abs=1e-3,
        mean_abs=1e-4,
        rel_err=2e-4,
        ref_max_abs=5.0,
        nan_cand=nan,
        inf_cand=inf,
        non_finite_mismatches=nan + inf,
        diverged=True,
        reasons=(reason,),
    )


def finite_check(
    pair: BackendPair, worst: float, *, passed: bool = False, allow: bool = False, compared: int = 1
) -> ThresholdCheck:
    return ThresholdCheck(
        id=ThresholdCheck.make_id("outputs", "finite", pair),
        scope="outputs",
        threshold="finite",
        metric="non_finite_mismatches" if allow else "non_finite",
        pair=pair,
        backend=None,
        limit=0.0,
        worst=worst,
        worst_sample="input",
        passed=passed,
        failing_samples=() if passed else ("input",),
        compared=compared,
        failed=0 if passed else 1,
    )


def nan_report(base: Report) -> Report:
    """NaN from /root/Sqrt in both backends, through /head/Conv to the output."""
    layers = (
        layer("/conv/Conv", "Conv", "conv", {TORCH_ORT: AGREE}),
        layer("/root/Sqrt", "Sqrt", "root", {TORCH_ORT: nan_both(256)}),
        layer("/head/Conv", "Conv", "head", {TORCH_ORT: nan_both(128)}, out=True),
    )
    entries = tuple(
        NonFinite(backend, "/root/Sqrt_output_0", "/root/Sqrt", "Sqrt", "root", 256, 0, "input")
        for backend in ("torch", "onnxruntime")
    )
    return dataclasses.replace(
        base,
        passed=False,
        layers=layers,
        samples=(SampleResult("input", {"/head/Conv_output_0": {TORCH_ORT: layers[-1].pairs[TORCH_ORT]}}),),
        checks=(layer_check(TORCH_ORT, 0), finite_check(TORCH_ORT, 256.0)),
        non_finite=entries,
    )


def allowed_report(nan: Report) -> Report:
    """The NaN report under allow_nonfinite: the positions agree, so every check holds."""
    checks = tuple(c for c in nan.checks if c.threshold != "finite")
    return dataclasses.replace(
        nan,
        passed=True,
        thresholds=Thresholds(allow_nonfinite=True),
        checks=(*checks, finite_check(TORCH_ORT, 0.0, passed=True, allow=True)),
    )


def trt_nan_report(base: Report) -> Report:
    """Only TensorRT overflows: Inf at /norm/Pow, NaN at /head/Gemm (the output); PyTorch and ONNX Runtime agree."""
    pow_trt = candidate_only(0, 12, 64)
    out_trt = candidate_only(40, 0, 40)
    layers = (
        layer("/stem/Conv", "Conv", "stem", {TORCH_ORT: AGREE, TORCH_TRT: AGREE, ORT_TRT: AGREE}),
        layer("/norm/Pow", "Pow", "norm", {TORCH_ORT: AGREE, TORCH_TRT: pow_trt, ORT_TRT: pow_trt}),
        layer("/head/Gemm", "Gemm", "head", {TORCH_ORT: AGREE, TORCH_TRT: out_trt, ORT_TRT: out_trt}, out=True),
    )
    first = FirstDivergence(
        tensor="/norm/Pow_output_0",
        onnx_node="/norm/Pow",
        op_type="Pow",
        module="norm",
        pair=TORCH_TRT,
        cosine=1.0,
        max_abs=1e-3,
        rel_err=2e-4,
        reasons=pow_trt.reasons,
        suspects=("/norm/Pow",),
    )
    output = {pair: layers[-1].pairs[pair] for pair in (TORCH_ORT, TORCH_TRT, ORT_TRT)}
    return dataclasses.replace(
        base,
        passed=False,
        backends=("torch", "onnxruntime", "tensorrt"),
        layers=layers,
        first_divergence=first,
        samples=(SampleResult("input", {"/head/Gemm_output_0": output}),),
        checks=(
            layer_check(TORCH_ORT, 0),
            layer_check(TORCH_TRT, 2),
            layer_check(ORT_TRT, 2),
            finite_check(TORCH_ORT, 0.0, passed=True),
            finite_check(TORCH_TRT, 40.0),
            finite_check(ORT_TRT, 40.0),
        ),
        non_finite=(NonFinite("tensorrt", "/norm/Pow_output_0", "/norm/Pow", "Pow", "norm", 0, 12, "input"),),
    )
