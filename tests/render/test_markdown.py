"""The Markdown summary: verdict, checks table, divergence, segmentation, TensorRT, versions."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from trtdiff.render.markdown import render_markdown, write_markdown
from trtdiff.report import Report


def _table(text: str, after: str = "") -> list[list[str]]:
    """The cells of the first table (after the line starting with `after`)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after)) if after else 0
    rows: list[str] = []
    for line in lines[start:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def _line(text: str, start: str) -> str:
    (found,) = [line for line in text.splitlines() if line.startswith(start)]
    return found


def test_passing_summary_exactly(passing: Report) -> None:
    assert render_markdown(passing) == (
        "### trtdiff: ✅ PASS — 3 checks passed\n"
        "`examples:tiny` · inputs x 1x3x32x32 · opset 13 (torchscript) · torch → onnxruntime (reference torch)\n"
        "\n"
        "| | check | worst | limit | worst sample |\n"
        "|---|---|---|---|---|\n"
        "| ✅ | `layers/torch~onnxruntime` | cosine 1.000000 | no diverged layer (min-cosine 0.9999, rtol 0.001) "
        "| `input` |\n"
        "| ✅ | `outputs/min-cosine/torch~onnxruntime` | 1.000000 | cosine ≥ 0.9999 | `input` |\n"
        "| ✅ | `outputs/rtol/torch~onnxruntime` | 3.10e-07 | rel\\_err ≤ 0.001 | `input` |\n"
        "\n"
        "**First divergence:** none — all 3 compared layers agree.\n"
        "\n"
        "<sub>trtdiff 9.8.7 · torch 2.13.0+cpu · onnx 1.23.2 · onnxruntime 1.32.0 (CPUExecutionProvider) · "
        "CPU x86\\_64 · python 3.11.7</sub>\n"
    )


def test_gate_summary(gated: Report) -> None:
    text = render_markdown(gated)
    assert text.splitlines()[0] == "### trtdiff: ❌ FAIL — 3 of 5 checks failed"
    assert text.splitlines()[1].endswith(" · 3 samples")
    rows = _table(text)
    assert all(len(row) == 5 for row in rows)
    assert rows[2] == [
        "❌",
        "`outputs/min-cosine/torch~onnxruntime`",
        "0.999420",
        "cosine ≥ 0.9999",
        "`sample-2` (2 of 3 fail)",
    ]
    assert rows[4] == [
        "❌",
        "`agreement/min-miou/torch~onnxruntime`",
        "0.8875",
        "miou ≥ 0.9",
        "`sample-2` (2 of 3 fail)",
    ]
    assert rows[6] == ["❌", "`labels/max-miou-drop/onnxruntime`", "0.1000", "miou\\_drop ≤ 0.05", "—"]
    assert _line(text, "**Segmentation**") == (
        "**Segmentation** (4 classes, ignore index 255): "
        "agreement mIoU torch~onnxruntime 0.8875 (0.10% pixels changed); mIoU vs labels torch 0.8000; "
        "mIoU vs labels onnxruntime 0.7000; drop onnxruntime 0.1000"
    )


def test_first_divergence_and_suspects(diverged: Report) -> None:
    text = render_markdown(diverged)
    assert _line(text, "**First divergence:**") == (
        "**First divergence:** `/decoder/Resize` (Resize, module `decoder`) on torch~onnxruntime — cosine 0.999854, "
        "max-abs 1.04e-02, rel-err 2.64e-02 (cosine 0.999854 < 0.9999; rel-err 2.64e-02 > 0.001); "
        "2 of 4 layers diverge."
    )
    assert _line(text, "Suspects") == (
        "Suspects (nodes feeding it): `/decoder/Resize`, then `/decoder/Concat`, `/decoder/Div`, `/decoder/Cast`, "
        "`/decoder/Slice`, `/decoder/Shape`"
    )
    layers = _table(text)[2]
    assert layers == [
        "❌",
        "`layers/torch~onnxruntime`",
        "cosine 0.999225",
        "no diverged layer (min-cosine 0.9999, rtol 0.001)",
        "`input`",
    ]


def test_tensorrt_lines(trt_skipped: Report, trt_ran: Report) -> None:
    """TensorRT through the one function every compiled runtime goes through (render/runtimes.py, issue 31)."""
    assert _line(render_markdown(trt_skipped), "TensorRT:") == (
        "TensorRT: skipped — no CUDA GPU: torch.cuda.is\\_available() is False"
    )
    text = render_markdown(trt_ran)
    assert _line(text, "TensorRT:") == (
        "TensorRT: tensorrt 10.9.0, fp32, TF32 off, outputs unfused: 2 marked, 1 not returned  "
    )
    assert text.splitlines()[1].endswith("torch → onnxruntime → tensorrt (reference torch)")
    assert "· tensorrt 10.9.0 · GPU NVIDIA H200 ·" in text


def test_names_cannot_break_the_markdown(gated: Report) -> None:
    odd = dataclasses.replace(gated.checks[0], id="outputs/a|b`c", worst_sample="s|1")
    text = render_markdown(dataclasses.replace(gated, checks=(odd, *gated.checks[1:]), model="<img src=x>|m"))
    assert text.count("<img") == 1 and "`<img src=x>|m`" in text, "raw HTML only inside a code span"
    assert all(len(row) == 5 for row in _table(text))
    assert "`` outputs/a\\|b`c ``" in text


def test_no_checks(passing: Report) -> None:
    assert "_No threshold checks were made._" in render_markdown(dataclasses.replace(passing, checks=()))


def test_write_markdown_writes_or_appends(passing: Report, gated: Report, tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("# earlier step\n")
    write_markdown(passing, path, append=True)
    write_markdown(gated, path, append=True)
    text = path.read_text()
    assert text.startswith("# earlier step\n") and text.index("✅ PASS") < text.index("❌ FAIL")
    write_markdown(passing, path)
    assert path.read_text() == render_markdown(passing)


def test_real_comparison(real_report: Report) -> None:
    """End to end: the summary of a real comparison names the decoder Resize and every check."""
    text = render_markdown(real_report)
    assert "**First divergence:** `/decoder/Resize` (Resize, module `decoder`) on torch~onnxruntime" in text
    assert [row[1] for row in _table(text)[2:]] == [f"`{check.id}`" for check in real_report.checks]
    assert f"trtdiff {real_report.trtdiff_version}" in text
    assert len(text.splitlines()) <= 32, "a PR comment stays short (24 lines, 8 more for 3 diverged layers)"
    assert "; 5 more not listed; the HTML and JSON reports list every layer):" in text


def test_culprits_list_before_the_first_divergence(culprits: Report) -> None:
    text = render_markdown(culprits)
    start = text.index("**Culprits:**")
    assert text[start:].splitlines()[:3] == [
        "**Culprits:**",
        "1. `/decoder/Resize` (Resize, module `decoder`) on torch~onnxruntime: local rel-err 2.64e-02 vs accumulated "
        "2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same); injecting torch's value recovers "
        "0.1450 of 0.1540 mIoU (final rel-err 1.14e-01 -> 7.10e-03)",
        "2. `/head/Conv` (Conv, module `head`) on torch~onnxruntime: local rel-err 7.10e-03 vs accumulated 1.14e-01, "
        "cosine 0.999900; runtime problem (onnxruntime deviates from the ONNX spec); injecting torch's values here "
        "and at the 1 earlier culprit recovers 0.1540 of 0.1540 mIoU (final rel-err 1.14e-01 -> 2.00e-07)",
    ]
    assert start < text.index("**First divergence:**")
    assert "inherited" not in text and "**Drift**" not in text


def test_one_culprit_and_an_inherited_first_divergence(inherited: Report) -> None:
    text = render_markdown(inherited)
    assert _line(text, "**Culprit:**") == (
        "**Culprit:** `/decoder/Resize` (Resize, module `decoder`) on torch~onnxruntime: local rel-err 2.64e-02 vs "
        "accumulated 2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same)"
    )
    assert _line(text, "**First divergence:**") == (
        "**First divergence:** `/head/Conv` (Conv, module `head`) on torch~onnxruntime — cosine 0.999225, "
        "max-abs 3.10e-01, rel-err 1.14e-01 (cosine 0.999225 < 0.9999; rel-err 1.14e-01 > 0.001) "
        "(inherited from `/decoder/Resize`); 1 of 3 layers diverge."
    )
    assert text.index("**Culprit:**") < text.index("**First divergence:**")


def test_drift_line(drift: Report) -> None:
    text = render_markdown(drift)
    assert _line(text, "**Drift**") == (
        "**Drift** on torch~onnxruntime: accumulated drift, no single culprit; largest local contributors: "
        "`/backbone/Conv` (rel-err 4.00e-04), `/decoder/Resize` (3.00e-04), `/head/Conv` (2.00e-04), … 1 more"
    )
    assert text.index("**First divergence:**") < text.index("**Drift**")
    assert "**Culprit" not in text


def test_non_finite_values(passing: Report) -> None:
    from nonfinite_reports import nan_report, trt_nan_report

    text = render_markdown(nan_report(passing))
    assert text.startswith("### trtdiff: ❌ FAIL — 1 of 2 checks failed\n")
    assert ["❌", "`outputs/finite/torch~onnxruntime`", "256", "no NaN/Inf", "`input`"] in _table(text)
    assert _line(text, "**Non-finite values:**") == (
        "**Non-finite values:** the outputs of torch and onnxruntime hold NaN/Inf; they first appear at "
        "`/root/Sqrt` (Sqrt, module `root`): 256 NaN"
    )
    trt = render_markdown(trt_nan_report(passing))
    assert "**Non-finite values:** the outputs of tensorrt hold NaN/Inf; they first appear at `/norm/Pow`" in trt
    assert trt.index("**Non-finite values:**") < trt.index("**First divergence:**")


def test_culprits_carry_the_fix_and_what_fixing_each_alone_recovers(advised: Report) -> None:
    text = render_markdown(advised)
    start = text.index("**Culprits:**")
    block = text[start : text.index("**First divergence:**")].splitlines()
    assert block[1].endswith(
        "; fix: re-export at opset 11 or higher (--opset 11): align\\_corners=False is then written as half\\_pixel"
    )
    assert block[2].endswith(
        "runtime problem (onnxruntime deviates from the ONNX spec); fixing it alone recovers no measurable mIoU "
        "(final rel-err 1.14e-01 -> 1.14e-01); injecting torch's values here and at the 1 earlier culprit "
        "recovers 0.1540 of 0.1540 mIoU (final rel-err 1.14e-01 -> 2.00e-07)"
    )
    assert block[3:] == ["", "`/decoder/Resize` alone carries 94% of the 0.1540 mIoU lost.", ""]


def test_diverged_layers_show_the_judged_figure_under_its_limit(advised: Report, four: Report) -> None:
    """Issue 40, item 2: each diverged layer with the figure its verdict used, the limit in the head; with
    several pairs each layer's worst pair; FP16 rows by noise ratio, Q/DQ rows in quantization steps."""
    assert _table(render_markdown(advised), "**Diverged layers**") == [
        ["#", "op", "module / ONNX node", "cosine", "rel-err ≤ 1e-3", "local"],
        ["---", "---", "---", "---", "---", "---"],
        ["3", "Resize", "`decoder`", "0.999854", "2.64e-02", "2.64e-02"],
        ["4", "Conv", "`head`", "0.999225", "1.14e-01", "7.10e-03"],
    ]
    text = render_markdown(four)
    assert "**Diverged layers** (2 of 6, the worst pair of each; the HTML and JSON reports list every layer):" in text
    assert _table(text, "**Diverged layers**")[2] == [
        "5", "Resize", "`decoder`", "torch~onnxruntime", "0.999854", "2.64e-02", "2.64e-02"
    ]  # fmt: skip

    def judged(name: str, values: tuple[float, float, float, float]) -> Report:
        layers = tuple(
            dataclasses.replace(
                layer,
                pairs={p: dataclasses.replace(m, **{name: v}) for p, m in layer.pairs.items()},
                local={p: dataclasses.replace(m, **{name: v / 2}) for p, m in (layer.local or {}).items()},
            )
            for layer, v in zip(advised.layers, values, strict=True)
        )
        return dataclasses.replace(advised, layers=layers)

    fp16 = _table(render_markdown(judged("noise_ratio", (0.3, 0.4, 41.0, 99.0))), "**Diverged layers**")
    assert fp16[0][4] == "noise ratio ≤ 8" and fp16[2][4:] == ["41.0", "20.5"]
    qdq = _table(render_markdown(judged("quant_steps", (0.3, 0.4, 12.0, 99.0))), "**Diverged layers**")
    assert qdq[0][4] == "quantization steps ≤ 8" and qdq[3][4:] == ["99.0", "49.5"]
    assert "Diverged layers" not in render_markdown(dataclasses.replace(advised, layers=advised.layers[:2]))
