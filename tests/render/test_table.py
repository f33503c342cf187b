"""The terminal's layer table (trtdiff.render.table): 80 columns with two, three and four backends, one row per
tensor with its worst pair, the judged figure with its limit in the head, folded rows (issue 40, items 1-2)."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from rich.console import Console

from trtdiff.render.table import WIDTH
from trtdiff.render.terminal import render_terminal
from trtdiff.report import Layer, PairMetrics, Report


def render(report: Report, *, show_all: bool = False, width: int = WIDTH) -> list[str]:
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=width, color_system=None), show_all=show_all)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def table(rows: list[str]) -> list[str]:
    """The table's lines: from its head to the last line before what follows it."""
    start = next(i for i, row in enumerate(rows) if row.lstrip().startswith("# op"))
    end = next(i for i in range(start + 1, len(rows)) if not rows[i][:1].isdigit() and not rows[i].startswith(" "))
    return rows[start:end]


def test_two_backends_at_80_columns(advised: Report) -> None:
    """One pair: no pair column; the judged figure (rel-err) with its limit in the head, not cosine, max-abs,
    rel and local side by side."""
    assert table(render(advised)) == [
        "# op     module / ONNX node      cos rel≤1e-3    local",
        "1 Conv   backbone.stem.0    1.000000 2.30e-07 2.30e-07 ok",
        "2 Relu   backbone.stem.1    1.000000 2.20e-07 2.30e-07 ok",
        "3 Resize decoder            0.999854 2.64e-02 2.64e-02 DIVERGED",
    ]


def test_three_backends_at_80_columns_fold_the_constant_and_the_identity(three: Report) -> None:
    """Three backends, three pairs: a row per tensor with its worst pair; the Constant only the ONNX backends
    compute and the Identity of the Relu fold into one line that says how many."""
    rows = render(three)
    assert table(rows) == [
        "# op     module / ONNX node pair        cos rel≤1e-3    local",
        "2 Conv   backbone.stem.0    pt~ort 1.000000 2.30e-07 2.30e-07 ok",
        "3 Relu   backbone.stem.1    pt~ort 1.000000 2.20e-07 2.30e-07 ok",
        "5 Resize decoder            pt~ort 0.999854 2.64e-02 2.64e-02 DIV",
    ]
    after = rows.index(table(rows)[-1]) + 1
    assert rows[after : after + 4] == [
        "… 2 rows folded that copy their input or agree bit for bit in every backend: 1",
        "Constant, 1 Identity (the JSON and HTML reports list them)",
        "pair: the worst of 3 pairs, torch's first (pt torch, ort onnxruntime, ref",
        "onnx-reference); --all lists each",
    ]


def test_four_backends_at_80_columns(four: Report) -> None:
    """Four backends, six pairs: still one row per tensor, nothing cut; --all gives each pair a line."""
    rows = render(four)
    assert table(rows) == [
        "# op     module / ONNX node pair        cos rel≤1e-3    local",
        "2 Conv   backbone.stem.0    pt~ort 1.000000 2.30e-07 2.30e-07 ok",
        "3 Relu   backbone.stem.1    pt~ort 1.000000 2.20e-07 2.30e-07 ok",
        "5 Resize decoder            pt~ort 0.999854 2.64e-02 2.64e-02 DIV",
    ]
    assert "pair: the worst of 6 pairs, torch's first (pt torch, ort onnxruntime, ref" in rows
    every = table(render(four, show_all=True))
    assert every[:8] == [
        "# op     module / ONNX node pair         cos rel≤1e-3    local",
        "2 Conv   backbone.stem.0    pt~ort  1.000000 2.30e-07 2.30e-07 ok",
        "                            pt~ref  1.000000 2.30e-07 2.30e-07 ok",
        "                            pt~ov   1.000000 2.30e-07 2.30e-07 ok",
        "                            ort~ref 1.000000 1.10e-07        - ok",
        "                            ort~ov  1.000000 1.10e-07        - ok",
        "                            ref~ov  1.000000 1.10e-07        - ok",
        "3 Relu   backbone.stem.1    pt~ort  1.000000 2.20e-07 2.30e-07 ok",
    ]
    assert len(every) == 1 + 4 * 6
    for report in (four, dataclasses.replace(four, layers=_long_names(four.layers))):
        for show_all in (False, True):
            for row in table(render(report, show_all=show_all)):
                assert len(row) <= WIDTH and "…" not in row.split()[-2:], row


def _long_names(layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """The layers with long op types and module paths, as a real model has."""
    return tuple(
        dataclasses.replace(layer, op_type="GlobalAveragePool", module=f"aspp.branches.4.pool.{layer.index}")
        for layer in layers
    )


def test_the_worst_pair_is_shown(four: Report) -> None:
    """Where another pair is further past its limits, the row shows that pair."""
    conv = four.layers[1]
    worse = dataclasses.replace(conv.pairs[next(p for p in conv.pairs if p.candidate == "openvino")], rel_err=9e-4)
    pairs = {p: (worse if p.candidate == "openvino" and p.reference == "torch" else m) for p, m in conv.pairs.items()}
    report = dataclasses.replace(
        four, layers=(four.layers[0], dataclasses.replace(conv, pairs=pairs), *four.layers[2:])
    )
    assert "2 Conv   backbone.stem.0    pt~ov  1.000000 9.00e-04 2.30e-07 ok" in render(report)


def test_a_reshape_of_a_diverged_input_is_not_folded(four: Report) -> None:
    """Only rows that agree fold: an Identity whose values diverge keeps its row."""
    resize = four.layers[4]
    identity = dataclasses.replace(resize, tensor="/decoder/Identity_output_0", op_type="Reshape", local=None)
    report = dataclasses.replace(four, layers=(*four.layers[:5], identity, four.layers[5]))
    rows = render(report, show_all=True)
    assert any(row.startswith("6 Reshape decoder") and row.endswith("DIV") for row in rows)


def _judged(report: Report, **figures: tuple[float, ...]) -> Report:
    """`report` with each layer's one pair carrying the figure `figures` name (quant_steps, noise_ratio)."""
    (name, values), = figures.items()  # fmt: skip
    layers = []
    for layer, value in zip(report.layers, values, strict=True):
        pairs: dict = {p: dataclasses.replace(m, **{name: value}) if value >= 0 else m for p, m in layer.pairs.items()}
        layers.append(dataclasses.replace(layer, pairs=pairs))
    return dataclasses.replace(report, layers=tuple(layers))


def test_fp16_rows_show_the_noise_ratio_under_its_limit(passing: Report) -> None:
    assert table(render(_judged(passing, noise_ratio=(0.28, 1.46, 4.1)))) == [
        "# op   module / ONNX node      cos ratio≤8",
        "1 Conv backbone.stem.0    1.000000    0.28 ok",
        "2 Relu backbone.stem.1    1.000000    1.46 ok",
        "3 Conv head               1.000000    4.10 ok",
    ]


def test_qdq_rows_show_quantization_steps_and_a_mixed_column_says_each_limit(passing: Report) -> None:
    conv = passing.layers[0]
    report = _judged(passing, quant_steps=(1.0, -1, -1))
    report = dataclasses.replace(report, layers=(dataclasses.replace(report.layers[0], op_type="DequantizeLinear"),
                                                 *report.layers[1:]))  # fmt: skip
    rows = render(report)
    assert table(rows) == [
        "# op       module / ONNX node           cos   judged",
        "1 DequantizeLinear backbone.stem.0 1.000000   1.00st ok",
        "2 Relu     backbone.stem.1         1.000000 2.20e-07 ok",
        "3 Conv     head                    1.000000 3.10e-07 ok",
    ]
    assert "judged: quantization steps (st) ≤ 8, rel-err ≤ 0.001" in rows
    only = dataclasses.replace(report, layers=(report.layers[0],))
    assert table(render(only))[0] == "# op       module / ONNX node           cos steps≤8"
    assert conv.pairs  # the fixture's layer is unchanged


def test_drift_of_a_quantized_graph_is_in_parentheses_and_said_to_be_unjudged(passing: Report) -> None:
    """Against the float model a Q/DQ graph's accumulated error is drift (analysis.judge): its figure is shown,
    in parentheses, with a line saying it is not judged and what is."""
    report = _judged(passing, quant_steps=(12.0, -1, -1))
    layers = [dataclasses.replace(layer, pairs={p: dataclasses.replace(m, drift=True) for p, m in layer.pairs.items()})
              for layer in report.layers]  # fmt: skip
    rows = render(dataclasses.replace(report, layers=tuple(layers)))
    assert table(rows)[1].split()[-2:] == ["(12.0st)", "ok"]
    assert "(…): drift, not judged: a quantized graph's error against its float model builds" in rows
    back = Report.from_json(dataclasses.replace(report, layers=tuple(layers)).to_json())
    assert all(m.drift for layer in back.layers for m in layer.pairs.values())  # the JSON keeps it


def test_exact_rows_count_the_elements_that_differ(passing: Report) -> None:
    """An integer tensor is judged exactly: "exact" or how many elements differ."""
    conv, relu, head = passing.layers
    pair = next(iter(conv.pairs))
    ints = PairMetrics(cosine=None, max_abs=0.0, mean_abs=0.0, rel_err=0.0, ref_max_abs=4.0, mismatches=0)
    differ = dataclasses.replace(ints, mismatches=3, max_abs=2.0, diverged=True)
    report = dataclasses.replace(
        passing,
        layers=(
            dataclasses.replace(conv, op_type="ArgMax", pairs={pair: ints}, is_output=True),
            dataclasses.replace(relu, op_type="TopK", pairs={pair: differ}, is_output=True),
            head,
        ),
    )
    rows = table(render(report, show_all=True))
    assert rows[1].split()[-2:] == ["exact", "ok"] and rows[2].split()[-3:] == ["3", "differ", "DIVERGED"]


@pytest.mark.slow
def test_no_cell_is_cut_for_four_backends_on_the_demo_model() -> None:
    """Issue 40, item 1, screenshot-free: the demo model on torch, onnxruntime, onnx-reference and openvino at
    80 columns. Before, cells shrank to "C…", "0…", "1.000…", the status to "D…" and the module column went;
    the first 30 rows were Identity/Constant rows of two ONNX backends. Now no cell is cut, every row fits,
    and the rows that only copy or are constants fold into one line saying how many."""
    pytest.importorskip("openvino")
    from conftest import FOUR_BACKENDS, REAL_MODEL

    import trtdiff

    report = trtdiff.compare(REAL_MODEL, input_shapes=["1x3x32x32"], opset=10, backends=list(FOUR_BACKENDS))
    assert len(report.pairs) == 6
    for show_all in (False, True):
        rows = table(render(report, show_all=show_all))
        assert rows[0].split() == ["#", "op", "module", "/", "ONNX", "node", "pair", "cos", "rel≤1e-3", "local"]
        assert all(len(row) <= WIDTH and "…" not in row for row in rows), "\n".join(rows)
        named = [row for row in rows if row[:3].strip().isdigit()]
        assert all(row.split()[-1] in ("ok", "DIV") for row in named), "\n".join(rows)
        assert not any(row.split()[1] in ("Constant", "Identity") for row in named)
    text = " ".join(render(report))
    assert re.search(
        r"… [0-9]+ rows folded that copy their input or agree bit for bit in every backend: [0-9]+ Constant", text
    )
    assert "DIV" in table(render(report))[-1] and "Resize   decoder" in table(render(report))[-1]
