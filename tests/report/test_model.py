"""The Report and its JSON form: every field survives a round trip, non-finite floats included."""

from __future__ import annotations

import dataclasses
import json
import math

from trtdiff.report import (
    BackendPair,
    FirstDivergence,
    Layer,
    NonFinite,
    PairingSummary,
    PairMetrics,
    Reason,
    Report,
    Thresholds,
)

ORT = BackendPair("torch", "onnxruntime")
NON_FINITE = (Reason("non_finite", 3.0, 0.0),)


def _report() -> Report:
    ok = PairMetrics(cosine=1.0, max_abs=1e-7, mean_abs=1e-8, rel_err=2e-7, ref_max_abs=0.5)
    bad = PairMetrics(
        cosine=float("nan"),
        max_abs=float("inf"),
        mean_abs=float("inf"),
        rel_err=float("inf"),
        ref_max_abs=1.0,
        nan_cand=3,
        diverged=True,
        reasons=NON_FINITE,
        non_finite_mismatches=3,
    )
    layers = (
        Layer(
            "a", "/a/Conv", "Conv", "a", (1, 2), "float32", {ORT: ok}, torch_op="aten.convolution.default", pairing="op"
        ),
        Layer("out", "/Resize", "Resize", None, (1, 2), "float32", {ORT: bad}, is_output=True),
    )
    return Report(
        passed=False,
        model="m.pt",
        onnx_path=None,
        opset=13,
        exporter="torchscript",
        backends=("torch", "onnxruntime"),
        reference="torch",
        inputs={"x": (1, 3, 8, 8)},
        thresholds=Thresholds(allow_nonfinite=True),
        layers=layers,
        not_compared=("/Shape_output_0",),
        first_divergence=FirstDivergence(
            "out",
            "/Resize",
            "Resize",
            None,
            ORT,
            float("nan"),
            float("inf"),
            float("inf"),
            NON_FINITE,
            ("/Resize", "/Shape"),
        ),
        pairing=PairingSummary(onnx_tensors=3, float_tensors=2, paired_with_torch=2, by_method={"op": 2}),
        environment={"torch": "2.13.0"},
        notes=("a note",),
        timings={"torch": 0.1},
        non_finite=(NonFinite("onnxruntime", "out", "/Resize", "Resize", None, 3, 0, "input"),),
        trtdiff_version="0.1.0",
    )


def test_json_round_trip_preserves_everything() -> None:
    report = _report()
    text = report.to_json()
    json.loads(text)  # strict JSON: no NaN/Infinity tokens
    assert "NaN" not in text and "Infinity" not in text
    back = Report.from_json(text)
    assert back.to_json() == text
    assert back.layers[0] == report.layers[0]
    assert math.isnan(back.first_divergence.cosine) and math.isinf(back.first_divergence.max_abs)
    assert back.inputs == {"x": (1, 3, 8, 8)} and back.outputs[0].tensor == "out"
    assert back.first_divergence.pair == ORT and back.trtdiff_version == "0.1.0"
    assert back.non_finite == report.non_finite and back.thresholds.allow_nonfinite
    assert back.layers[1].pairs[ORT].non_finite_mismatches == 3
    assert json.loads(text)["first_divergence"]["reasons"] == [
        {"metric": "non_finite", "value": 3.0, "limit": 0.0, "detail": None}
    ]


def test_documented_keys_are_present() -> None:
    data = _report().to_dict()
    for key in ("passed", "opset", "exporter", "backends", "first_divergence", "layers", "not_compared"):
        assert key in data
    assert set(data["first_divergence"]) >= {
        "tensor",
        "onnx_node",
        "op_type",
        "module",
        "pair",
        "cosine",
        "max_abs",
        "suspects",
    }
    assert set(data["layers"][0]) >= {"tensor", "onnx_node", "op_type", "module", "shape", "pairs"}
    assert set(data["layers"][0]["pairs"]) == {"torch~onnxruntime"}


def test_layers_are_numbered_from_one_and_the_number_is_written() -> None:
    report = _report()
    assert [layer.index for layer in report.layers] == [1, 2], "hand-built layers get their position"
    data = json.loads(report.to_json())
    assert [layer["index"] for layer in data["layers"]] == [1, 2]
    for layer in data["layers"]:  # a report written before layers carried their number
        del layer["index"]
    assert [layer.index for layer in Report.from_dict(data).layers] == [1, 2]


def test_layer_numbers_are_kept_where_they_rise_and_renumbered_where_they_do_not() -> None:
    report = _report()
    first, second = report.layers
    kept = dataclasses.replace(report, layers=(first, dataclasses.replace(second, index=7)))
    assert [layer.index for layer in kept.layers] == [1, 7], "a report cut from a longer one keeps its numbers"
    copies = dataclasses.replace(report, layers=(second, second))
    assert [layer.index for layer in copies.layers] == [1, 2]
