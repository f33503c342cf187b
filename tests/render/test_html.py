"""The HTML report: self-contained structure, exact sections, and what headless Chromium renders."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from trtdiff.errors import OptionError
from trtdiff.render.html import render_html, write_html
from trtdiff.report import Report

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def gated_html(gated: Report, tmp_path: Path) -> Path:
    path = tmp_path / "report.html"
    write_html(gated, path)
    return path


class _Tags(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def _layer_rows(text: str) -> list[dict[str, str | None]]:
    return [attrs for tag, attrs in _tags(text) if tag == "tr" and (attrs.get("id") or "").startswith("layer-")]


@pytest.mark.slow
def test_self_contained_structure(gated: Report, gated_html: Path) -> None:
    text = gated_html.read_text()
    tags = _tags(text)
    names = [tag for tag, _ in tags]
    assert names.count("svg") == 2, "depth plot and per-sample plot"
    assert "script" not in names and "link" not in names and "img" not in names and "iframe" not in names
    for _, attrs in tags:
        for key in ("src", "href", "xlink:href"):
            value = attrs.get(key) or ""
            assert not value.startswith(("http://", "https://", "//")), f"{key}={value} needs the network"
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', ""
    ), "no URL besides the SVG namespaces"
    rows = _layer_rows(text)
    assert [attrs.get("class") for attrs in rows] == ["", "", "first", "div"]
    assert text.count('<span class="mark fail">FAIL</span>') == 3
    assert "<title>#3 Resize  decoder\n/decoder/Resize" in text, "hover title of the diverging layer"
    assert "first divergence: #3 /decoder/Resize (Resize)" in text, "the plot's marker label (layers count from 1)"
    assert "<dt>trtdiff</dt><dd>9.8.7</dd>" in text, "the version that made the report"


def test_first_divergence_box(gated: Report) -> None:
    text = render_html(gated)
    assert (
        '<div class="box"><b>First divergence</b>: <code>/decoder/Resize</code> (Resize, module <code>decoder</code>) '
        'on torch~onnxruntime — <a href="#layer-3">layer #3</a><br>cosine 0.999854, max-abs 1.04e-02, rel-err 2.64e-02 '
        "(cosine 0.999854 &lt; 0.9999; rel-err 2.64e-02 &gt; 0.001)<br>tensor <code>/decoder/Resize_output_0</code>"
        "<br>suspects (the node, then nodes feeding it): <code>/decoder/Resize</code>, "
        "then <code>/decoder/Concat</code>"
    ) in text
    assert 'title="cosine 0.999854 &lt; 0.9999; rel-err 2.64e-02 &gt; 0.001">0.999854</td>' in text


def test_check_rows(gated: Report) -> None:
    text = render_html(gated)
    assert (
        '<tr class="div"><td><span class="mark fail">FAIL</span></td><td><code>agreement/min-miou/torch~onnxruntime'
        '</code></td><td class="num">0.8875</td><td>miou ≥ 0.9</td><td>sample-2</td><td>sample-1, sample-2</td>'
        "<td>mIoU 0.8875 agreement with torch (min 0.9); worst sample sample-2 0.8100</td></tr>"
    ) in text
    assert "<td>mIoU drop 0.1000 relative to torch (max 0.05): 0.8000 -&gt; 0.7000</td>" in text
    assert "<tr><td>agreement with the reference</td><td>torch~onnxruntime</td><td class='num'>0.8875</td>" in text


def test_passing_and_single_sample(passing: Report) -> None:
    text = render_html(passing)
    assert "No divergence" in text and "verdict pass" in text and "mark fail" not in text
    assert [tag for tag, _ in _tags(text)].count("svg") == 1, "no per-sample plot for one sample"


def test_tensorrt_sections(trt_skipped: Report, trt_ran: Report) -> None:
    """TensorRT through the one function every compiled runtime goes through (render/runtimes.py, issue 31)."""
    assert "<h2>TensorRT</h2>\n<p>TensorRT: skipped — no CUDA GPU: torch.cuda.is_available() is False</p>" in (
        render_html(trt_skipped)
    )
    text = render_html(trt_ran)
    assert (
        "<h2>TensorRT</h2>\n<p>TensorRT: tensorrt 10.9.0, fp32, TF32 off, outputs unfused: 2 marked, 1 not returned</p>"
    ) in text
    assert "<p>marked engine: 123,456 bytes, 3 engine layers, built in 1.50s</p>" in text
    assert "fused 2 ONNX nodes into 1 layer" in text and "<p>note: built with 1 GiB workspace</p>" in text
    assert "<th>onnxruntime~tensorrt<br>cosine</th>" in text
    assert text.count("<td class='num'>—</td>") == 6, "the fused Relu has no TensorRT figures"


def test_text_is_escaped(passing: Report) -> None:
    report = dataclasses.replace(passing, model='<script>alert("x")</script>', notes=("a & <b>",))
    text = render_html(report)
    assert "<script>" not in text and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "a &amp; &lt;b&gt;" in text


def test_missing_matplotlib_is_an_option_error(passing: Report, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(OptionError) as raised:
        render_html(passing)
    assert raised.value.parameter == "html"
    assert str(raised.value) == "html: needs matplotlib; pip install 'trtdiff[html]'"


def test_import_does_not_load_matplotlib() -> None:
    code = "import sys, trtdiff.render.html; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_real_comparison(real_report: Report) -> None:
    """End to end: the page of a real comparison marks the decoder Resize as the first divergence."""
    text = render_html(real_report)
    assert "<code>/decoder/Resize</code>" in text
    rows = _layer_rows(text)
    assert len(rows) == len(real_report.layers)
    assert sum(attrs.get("class") in ("div", "first") for attrs in rows) == sum(
        layer.diverged for layer in real_report.layers
    )
    (first,) = [attrs["id"] for attrs in rows if attrs.get("class") == "first"]
    index = int(first.removeprefix("layer-"))
    assert real_report.layers[index - 1].onnx_node == "/decoder/Resize" and real_report.layers[index - 1].index == index
    assert f"first divergence: #{index} /decoder/Resize (Resize)" in text
    assert real_report.environment["torch"] in text


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


def _png_rows(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed (still filtered) scanlines of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, offset = [], 8
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset : offset + 4]), data[offset + 4 : offset + 8]
        if kind == b"IDAT":
            chunks.append(data[offset + 8 : offset + 8 + length])
        offset += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless check needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
)
@pytest.mark.slow
def test_chromium_renders_the_plots(gated_html: Path, tmp_path: Path) -> None:
    dom = _chromium(tmp_path, "--dump-dom", gated_html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") == 2 and "first divergence: #3 /decoder/Resize (Resize)" in dom.stdout
    assert "<code>/decoder/Resize</code>" in dom.stdout

    png = tmp_path / "report.png"
    shot = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,2000", gated_html.as_uri())
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    data = png.read_bytes()
    width, height, raw = _png_rows(data)
    assert (width, height) == (1280, 2000)
    assert len(set(raw[::97])) > 20, "a blank page decompresses to a handful of byte values"
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        pixels = image.convert("RGB").resize((320, 500))
        colors = pixels.getcolors(maxcolors=1 << 16) or []
    white = sum(n for n, (r, g, b) in colors if min(r, g, b) > 240)
    assert white < 0.97 * 320 * 500, "mostly blank"
    assert any(r > 180 and g < 80 and b < 80 for _, (r, g, b) in colors), "the red FAIL badge / divergence marker"
    assert any(b > 160 and r < 60 for _, (r, g, b) in colors), "the blue curve of torch~onnxruntime"


def test_culprits_marked_on_the_depth_plot(culprits: Report) -> None:
    text = render_html(culprits)
    svg = text[text.index("<svg") : text.index("</svg>")]
    assert "culprit: #3 /decoder/Resize (Resize, export problem)" in svg
    assert "culprit: #4 /head/Conv (Conv, runtime problem)" in svg
    assert "torch~onnxruntime local" in svg, "the local error's legend entry"
    assert "<title>#4 Conv  head\n/head/Conv\ntorch~onnxruntime: cosine 0.999225, rel-err 1.14e-01 DIVERGED\n" in svg
    assert "torch~onnxruntime local: cosine 0.999900, rel-err 7.10e-03</title>" in svg


def test_culprits_section(culprits: Report) -> None:
    text = render_html(culprits)
    assert text.index('<div class="box find"><b>Culprits</b>') < text.index('<div class="box"><b>First divergence')
    assert (
        "<tr><td class='num'>1</td><td><a href=\"#layer-3\"><code>/decoder/Resize</code></a></td><td>Resize</td>"
        "<td>decoder</td><td>torch~onnxruntime</td><td><span class='mark culprit'>EXPORT</span> export problem "
        "(the ONNX spec computes the same)</td><td class='num'>0.999854 / 2.64e-02</td>"
        "<td class='num'>0.999854 / 2.64e-02</td><td class='num'>0.999854 / 2.64e-02</td>"
        "<td><code>/decoder/Resize</code></td><td></td></tr>"  # no inspect rule's fix in this report
    ) in text
    assert (  # a report that does not say what fixing each culprit alone recovers: dashes there
        "<tr><td><code>/decoder/Resize</code></td><td>torch~onnxruntime</td><td class='num'>—</td>"
        "<td class='num'>—</td><td class='num'>1.14e-01 → 7.10e-03</td>"
        "<td class='num'>0.999225 → 0.999900</td><td class='num'>0.8040 → 0.9490</td>"
        "<td class='num'>0.1450 of 0.1540</td></tr>"
    ) in text
    rows = _layer_rows(text)
    assert [attrs.get("class") for attrs in rows] == ["", "", "first", "div"]
    assert text.count('<span class="mark culprit">CULPRIT</span>') == 2
    assert "<th>torch~onnxruntime<br>cosine</th><th>max |Δ|</th><th>rel-err ≤ 1e-3</th><th>local</th>" in text
    assert "<td class='num' title=\"local cosine 0.999900\">7.10e-03</td>" in text


def test_drift_and_inherited(drift: Report, inherited: Report) -> None:
    text = render_html(drift)
    assert (
        '<div class="box find"><b>Drift</b> on torch~onnxruntime: accumulated drift, no single culprit; largest '
        "local contributors: <code>/backbone/Conv</code> (rel-err 4.00e-04)"
    ) in text
    assert "<h2>Accumulated drift</h2>" in text and "<h2>Culprits</h2>" not in text
    assert "<tr><td><code>/backbone/Relu</code></td><td>Relu</td><td>backbone.stem.1</td>" in text
    assert "culprit:" not in text
    text = render_html(inherited)
    assert "rel-err 1.14e-01 &gt; 0.001) (inherited from <code>/decoder/Resize</code>)<br>" in text
    assert "<h3>Attribution</h3>" not in text, "no attribution in this report"


@pytest.mark.slow
def test_non_finite_box_and_badges(passing: Report) -> None:
    from nonfinite_reports import allowed_report, nan_report

    text = render_html(nan_report(passing))
    assert (
        '<div class="box"><b>Non-finite values</b> (NaN or Inf):<ul><li>the outputs of torch and onnxruntime hold '
        "NaN/Inf; they first appear at <code>/root/Sqrt</code> (Sqrt, module <code>root</code>): 256 NaN"
        ' — <a href="#layer-2">layer #2</a><br>tensor <code>/root/Sqrt_output_0</code></li></ul></div>'
    ) in text
    assert text.count("FIRST NaN/Inf in ") == 2 and "ok (NaN/Inf at the same positions)" in text
    assert '<div class="box find"><b>Non-finite values</b>' in render_html(allowed_report(nan_report(passing)))
    assert "Non-finite values" not in render_html(passing)


def test_attribution_alone_and_cumulative_with_the_fix(advised: Report) -> None:
    text = render_html(advised)
    assert (
        "<td><code>/decoder/Resize</code></td><td>re-export at opset 11 or higher (--opset 11): align_corners=False "
        "is then written as half_pixel</td></tr>"
    ) in text, "the culprits table's fix column"
    assert (
        "<tr><td><code>/head/Conv</code></td><td>torch~onnxruntime</td><td class='num'>1.14e-01 → 1.14e-01</td>"
        "<td class='num'>nothing measurable</td><td class='num'>1.14e-01 → 2.00e-07</td>"
        "<td class='num'>0.999225 → 1.000000</td><td class='num'>0.8040 → 0.9580</td>"
        "<td class='num'>0.1540 of 0.1540</td></tr>"
    ) in text
    closing = "<code>/decoder/Resize</code> alone carries 94% of the 0.1540 mIoU lost."
    assert f"</ol>{closing}<br></div>" in text, "the culprits box closes with it"
    assert f"</table>\n<p>{closing}</p>" in text, "and so does the attribution table"
    assert "-0.0004" not in text


def test_the_per_sample_plot_shows_the_figure_of_the_check_that_failed(gated: Report) -> None:
    """Issue 40, item 8: cosine held and rtol failed, yet the per-sample plot drew cosine alone."""
    from trtdiff.render.html_plots import sample_metrics, samples_svg

    cosine, rtol = gated.checks[:2]
    held = dataclasses.replace(cosine, passed=True, failing_samples=(), failed=0, limit=0.999)
    failed = dataclasses.replace(rtol, passed=False, failing_samples=("sample-0",), failed=1, limit=0.0001)
    report = dataclasses.replace(gated, checks=(held, failed, *gated.checks[2:]))
    assert sample_metrics(report) == ["rel_err"] and sample_metrics(gated) == ["cosine"]
    svg = samples_svg(report)
    assert "relative error, final outputs" in svg and "rtol 0.0001" in svg
    assert "1 − cosine" not in svg and "min-cosine" not in svg
    assert "out torch~onnxruntime: cosine 0.999950, rel-err 5.00e-04\nmIoU" in svg, "the hover title"
    both = dataclasses.replace(report, checks=(dataclasses.replace(cosine, limit=0.99999), failed))
    assert sample_metrics(both) == ["cosine", "rel_err"]
    assert "1 − cosine, final outputs" in samples_svg(both) and "rtol 0.0001" in samples_svg(both)


def _noise_ratios(report: Report, values: tuple[float, ...]) -> Report:
    """`report` compared in FP16: each layer's pairs judged by noise ratio (`values`, one per layer; its local
    error half that)."""
    layers = tuple(
        dataclasses.replace(
            layer,
            pairs={p: dataclasses.replace(m, noise_ratio=v) for p, m in layer.pairs.items()},
            local={p: dataclasses.replace(m, noise_ratio=v / 2) for p, m in layer.local.items()}
            if layer.local
            else None,
        )
        for layer, v in zip(report.layers, values, strict=True)
    )
    return dataclasses.replace(report, layers=layers)


def test_layers_show_the_judged_figure_under_its_limit(advised: Report, four: Report, passing: Report) -> None:
    """Issue 40, item 2: per pair the figure the verdict used, its limit in the head, where rel-err stood."""
    text = render_html(advised)
    assert "<th>torch~onnxruntime<br>cosine</th><th>max |Δ|</th><th>rel-err ≤ 1e-3</th><th>local</th>" in text
    assert render_html(four).count("<th>rel-err ≤ 1e-3</th><th>local</th>") == 6
    fp16 = render_html(_noise_ratios(advised, (0.3, 0.4, 41.0, 99.0)))
    assert "<th>torch~onnxruntime<br>cosine</th><th>max |Δ|</th><th>noise ratio ≤ 8</th><th>local</th>" in fp16
    assert "<td class='num' title=\"rel-err 2.64e-02\">41.0</td>" in fp16
    conv, *others = passing.layers
    pair = next(iter(conv.pairs))
    qdq = dataclasses.replace(conv, pairs={pair: dataclasses.replace(conv.pairs[pair], quant_steps=1.0)})
    mixed = render_html(dataclasses.replace(passing, layers=(qdq, *others)))
    assert "<th>quantization steps (st) ≤ 8 / rel-err ≤ 1e-3</th>" in mixed
    assert ">1.00st</td>" in mixed and ">2.20e-07</td>" in mixed


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless check needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
)
@pytest.mark.slow
def test_chromium_renders_the_judged_column_and_one_culprit_per_node(four: Report, tmp_path: Path) -> None:
    """Issue 40, items 2-3 as a browser shows them: the FP16 noise ratio under its limit in each pair's column,
    and the two culprit nodes of four backends as two list items naming their pairs."""
    path = tmp_path / "four.html"
    write_html(_noise_ratios(four, (0.0, 0.3, 0.4, 0.4, 41.0, 99.0)), path)
    dom = _chromium(tmp_path, "--dump-dom", path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<th>noise ratio ≤ 8</th>") == 6
    assert '<td class="num" title="rel-err 2.64e-02">41.0</td>' in dom.stdout
    finding = dom.stdout[dom.stdout.index('<div class="box find">') :]
    finding = finding[: finding.index("</div>")]
    assert finding.count("<li>") == 2
    assert "on torch~onnxruntime, torch~onnx-reference and torch~openvino: local rel-err" in finding
