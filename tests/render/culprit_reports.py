"""Hand-built reports with local errors, culprits, drift and attribution, for the renderer tests.

Each builds on conftest's `diverged` report (layers /backbone/Conv, /backbone/Relu,
/decoder/Resize, /head/Conv on torch~onnxruntime):

- `culprit_report`: two culprits, the decoder Resize (an export problem, the first divergence)
  and the head Conv (a runtime problem), with labels so the attribution speaks in mIoU.
- `drift_report`: the head Conv diverges by accumulation; no node's local error breaks the
  thresholds, so the report names the largest local contributors instead.
- `inherited_report`: the first divergence (the head Conv) is no culprit; it inherits the
  error of the decoder Resize, whose own tensor is not among the compared layers.
- `advised_report`: `culprit_report` as trtdiff now writes it: the Resize carries inspect's fix,
  and each attribution says what fixing the culprit alone recovers (the head Conv alone:
  nothing measurable).
"""

from __future__ import annotations

import dataclasses

from trtdiff.report import (
    Attribution,
    BackendPair,
    Contributor,
    Culprit,
    Drift,
    ErrorFigures,
    Layer,
    PairMetrics,
    Reason,
    Report,
    SegmentationSummary,
)

TORCH_ORT = BackendPair("torch", "onnxruntime")
# The local error of a node that holds, and of one that breaks the thresholds.
HOLDS = PairMetrics(cosine=1.0, max_abs=6e-7, mean_abs=6e-8, rel_err=2.3e-7, ref_max_abs=2.6)


def local(cosine: float, rel_err: float, *reasons: Reason) -> PairMetrics:
    """A local error; diverged when `reasons` are given."""
    return dataclasses.replace(
        HOLDS, cosine=cosine, max_abs=rel_err * 2.6, rel_err=rel_err, diverged=bool(reasons), reasons=reasons
    )


def with_local(layers: tuple[Layer, ...], *errors: PairMetrics) -> tuple[Layer, ...]:
    """`layers` with the local errors of torch~onnxruntime, in order."""
    return tuple(
        dataclasses.replace(layer, local={TORCH_ORT: error}) for layer, error in zip(layers, errors, strict=True)
    )


def figures(metrics: PairMetrics) -> ErrorFigures:
    return ErrorFigures.of(metrics)


RESIZE_LOCAL = local(0.999854, 0.0264, Reason("cosine", 0.999854, 0.9999), Reason("rel_err", 0.0264, 0.001))
HEAD_LOCAL = local(0.999900, 0.0071, Reason("rel_err", 0.0071, 0.001))


def resize_culprit(diverged: Report) -> Culprit:
    """The decoder Resize: its local error is all of its error, and the ONNX spec computes the same (export)."""
    resize = diverged.layers[2]
    return Culprit(
        tensor=resize.tensor,
        onnx_node=resize.onnx_node,
        op_type=resize.op_type,
        module=resize.module,
        pair=TORCH_ORT,
        local=figures(RESIZE_LOCAL),
        accumulated=figures(resize.pairs[TORCH_ORT]),
        verdict="export",
        subgraph=(resize.onnx_node,),
        spec=figures(RESIZE_LOCAL),
    )


def culprit_report(diverged: Report) -> Report:
    """Two culprits on torch~onnxruntime, attribution over labelled samples (mIoU 0.958 -> 0.804)."""
    layers = with_local(diverged.layers, HOLDS, HOLDS, RESIZE_LOCAL, HEAD_LOCAL)
    head = layers[3]
    head_culprit = Culprit(
        tensor=head.tensor,
        onnx_node=head.onnx_node,
        op_type=head.op_type,
        module=head.module,
        pair=TORCH_ORT,
        local=figures(HEAD_LOCAL),
        accumulated=figures(head.pairs[TORCH_ORT]),
        verdict="runtime",
        subgraph=(head.onnx_node,),
        spec=ErrorFigures(1.0, 1e-6, 4e-7),
    )
    resize = resize_culprit(diverged)
    attribution = (
        Attribution(resize.onnx_node, resize.tensor, TORCH_ORT, 0.114, 0.0071, 0.999225, 0.99990, 0.804, 0.949, 0.145),
        Attribution(head.onnx_node, head.tensor, TORCH_ORT, 0.114, 2.0e-7, 0.999225, 1.0, 0.804, 0.958, 0.154),
    )
    segmentation = SegmentationSummary(
        num_classes=5,
        ignore_index=None,
        agreement_miou={TORCH_ORT: 0.82},
        agreement_per_class={TORCH_ORT: (0.9, 0.8, 0.8, 0.8, 0.8)},
        changed_pixels={TORCH_ORT: 0.0457},
        label_miou={"torch": 0.958, "onnxruntime": 0.804},
        miou_drop={"onnxruntime": 0.154},
    )
    return dataclasses.replace(
        diverged,
        layers=layers,
        culprit=resize,
        culprits=(resize, head_culprit),
        attribution=attribution,
        segmentation=segmentation,
    )


def drift_report(diverged: Report) -> Report:
    """The head Conv diverges (rel-err 3.0e-03) while every local error holds: four contributors."""
    rel = Reason("rel_err", 0.003, 0.001)
    conv, relu, resize, head = diverged.layers
    resize = dataclasses.replace(resize, pairs={TORCH_ORT: dataclasses.replace(HOLDS, cosine=0.99999, rel_err=8e-4)})
    head = dataclasses.replace(
        head,
        pairs={TORCH_ORT: dataclasses.replace(HOLDS, cosine=0.99995, rel_err=0.003, diverged=True, reasons=(rel,))},
    )
    errors = (local(1.0, 4e-4), local(1.0, 1e-4), local(1.0, 3e-4), local(1.0, 2e-4))
    layers = with_local((conv, relu, resize, head), *errors)
    ranked = sorted(zip(layers, errors, strict=True), key=lambda item: -item[1].rel_err)
    contributors = tuple(
        Contributor(layer.tensor, layer.onnx_node, layer.op_type, layer.module, figures(error))
        for layer, error in ranked
    )
    assert diverged.first_divergence is not None
    first = dataclasses.replace(
        diverged.first_divergence,
        tensor=head.tensor,
        onnx_node=head.onnx_node,
        op_type=head.op_type,
        module=head.module,
        cosine=0.99995,
        max_abs=HOLDS.max_abs,
        rel_err=0.003,
        reasons=(rel,),
        suspects=(head.onnx_node, "/decoder/Resize"),
    )
    layer_check, cosine_check, rtol_check = diverged.checks
    checks = (
        dataclasses.replace(layer_check, failed=1, worst=0.99995),
        dataclasses.replace(cosine_check, worst=0.99995, passed=True, failing_samples=(), failed=0),
        dataclasses.replace(rtol_check, worst=0.003),
    )
    return dataclasses.replace(
        diverged, layers=layers, first_divergence=first, checks=checks, drift=Drift(TORCH_ORT, contributors)
    )


def inherited_report(diverged: Report) -> Report:
    """The first divergence is the head Conv, whose local error holds: the decoder Resize before it is the culprit."""
    conv, relu, _, head = diverged.layers
    layers = with_local((conv, relu, head), HOLDS, HOLDS, local(0.999999, 4e-6))
    assert diverged.first_divergence is not None
    first = dataclasses.replace(
        diverged.first_divergence,
        tensor=head.tensor,
        onnx_node=head.onnx_node,
        op_type=head.op_type,
        module=head.module,
        cosine=0.999225,
        max_abs=0.31,
        rel_err=0.114,
        reasons=(Reason("cosine", 0.999225, 0.9999), Reason("rel_err", 0.114, 0.001)),
        suspects=(head.onnx_node,),
    )
    culprit = resize_culprit(diverged)
    return dataclasses.replace(
        diverged,
        layers=layers,
        not_compared=(*diverged.not_compared, culprit.tensor),
        checks=(dataclasses.replace(diverged.checks[0], compared=3, failed=1), *diverged.checks[1:]),
        first_divergence=first,
        culprit=culprit,
        culprits=(culprit,),
    )


RESIZE_ADVICE = "re-export at opset 11 or higher (--opset 11): align_corners=False is then written as half_pixel"


def advised_report(diverged: Report) -> Report:
    """`culprit_report` with the Resize's fix and the figures of fixing each culprit alone."""
    report = culprit_report(diverged)
    resize, head = report.culprits
    resize = dataclasses.replace(resize, advice=RESIZE_ADVICE, advice_code="resize-no-coordinate-mode")
    first, second = report.attribution
    first = dataclasses.replace(
        first,
        final_rel_err_after_alone=first.final_rel_err_after,
        final_cosine_after_alone=first.final_cosine_after,
        miou_after_alone=first.miou_after,
        miou_recovered_alone=first.miou_recovered,
        measurable=True,
        measurable_alone=True,
        miou_pixel_share=2e-6,
    )
    second = dataclasses.replace(
        second,
        final_rel_err_after_alone=0.114,
        final_cosine_after_alone=0.999225,
        miou_after_alone=0.8036,
        miou_recovered_alone=-0.0004,
        measurable=True,
        measurable_alone=False,
        miou_pixel_share=2e-6,
    )
    return dataclasses.replace(report, culprit=resize, culprits=(resize, head), attribution=(first, second))


ONNX_ONLY = PairMetrics(cosine=1.0, max_abs=0.0, mean_abs=0.0, rel_err=0.0, ref_max_abs=1.0)
"""A tensor two ONNX backends compute bit for bit alike (a constant, shape arithmetic)."""


def many_backends_report(advised: Report, backends: tuple[str, ...]) -> Report:
    """`advised` compared on `backends` (torch first): every pair with torch has torch~onnxruntime's figures
    (local errors, culprits and attribution too, so each culprit node is listed once per pair), pairs of two ONNX
    backends agree; a Constant only the ONNX backends compute (bit for bit alike) comes first and an Identity of
    the Relu after it, the rows a view folds."""
    from trtdiff.report import all_pairs

    pairs = all_pairs(backends)
    with_torch = [pair for pair in pairs if pair.reference == "torch"]
    onnx_only = [pair for pair in pairs if pair.reference != "torch"]
    agree = dataclasses.replace(HOLDS, rel_err=1.1e-7, max_abs=3e-7, cosine=1.0)

    def spread(layer: Layer) -> Layer:
        torch_ort = layer.pairs[TORCH_ORT]
        local_ort = (layer.local or {}).get(TORCH_ORT)
        return dataclasses.replace(
            layer,
            pairs={**{pair: torch_ort for pair in with_torch}, **{pair: agree for pair in onnx_only}},
            local=None if local_ort is None else {pair: local_ort for pair in with_torch},
        )

    conv, relu, resize, head = (spread(layer) for layer in advised.layers)
    constant = dataclasses.replace(
        conv, tensor="/Constant_output_0", onnx_node="/Constant", op_type="Constant", module=None, shape=(2,),
        pairs={pair: ONNX_ONLY for pair in onnx_only}, local=None, pairing=None,
    )  # fmt: skip
    identity = dataclasses.replace(
        relu, tensor="/backbone/Identity_output_0", onnx_node="/backbone/Identity", op_type="Identity"
    )
    culprits = tuple(dataclasses.replace(c, pair=pair) for c in advised.culprits for pair in with_torch)
    attribution = tuple(dataclasses.replace(a, pair=pair) for a in advised.attribution for pair in with_torch)
    return dataclasses.replace(
        advised,
        backends=backends,
        layers=(constant, conv, relu, identity, resize, head),
        culprit=culprits[0],
        culprits=culprits,
        attribution=attribution,
    )
