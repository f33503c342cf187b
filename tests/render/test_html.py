"""The HTML report of real comparisons: self-contained structure, and what headless Chromium renders."""

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

SHAPES = ["1x3x64x64"]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def reports(gated_reports: dict[str, Report]) -> dict[str, Report]:
    return gated_reports


@pytest.fixture(scope="module")
def failing_html(reports: dict[str, Report], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    write_html(reports["failing"], path)
    return path


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the rows of the layer table."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def test_self_contained_structure(reports: dict[str, Report], failing_html: Path) -> None:
    report = reports["failing"]
    text = failing_html.read_text()
    tags = _tags(text)
    names = [tag for tag, _ in tags]
    assert names.count("svg") == 2, "depth plot and per-sample plot"
    assert "script" not in names and "link" not in names and "img" not in names and "iframe" not in names
    for _, attrs in tags:
        for key in ("src", "href", "xlink:href"):
            value = attrs.get(key) or ""
            assert not value.startswith(("http://", "https://", "//")), f"{key}={value} needs the network"
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', ""), "no URL besides the SVG namespaces"
    assert "<code>/decoder/Resize</code>" in text
    rows = [attrs for tag, attrs in tags if tag == "tr" and (attrs.get("id") or "").startswith("layer-")]
    assert len(rows) == len(report.layers)
    assert sum(attrs.get("class") in ("div", "first") for attrs in rows) == sum(l.diverged for l in report.layers)
    assert [attrs["id"] for attrs in rows if attrs.get("class") == "first"] == ["layer-41"]
    assert text.count('<span class="mark fail">FAIL</span>') == len(report.failed_checks)
    assert "<title>#41 Resize  decoder\n/decoder/Resize" in text, "hover title of the diverging layer"
    assert "first divergence: #41 /decoder/Resize (Resize)" in text, "the plot's marker label"
    assert report.environment["torch"] in text and report.environment["onnxruntime"] in text


def test_passing_and_single_sample(reports: dict[str, Report]) -> None:
    report = reports["passing"]
    text = render_html(report)
    assert "No divergence" in text and "verdict pass" in text and "mark fail" not in text
    single = render_html(dataclasses.replace(report, samples=report.samples[:1]))
    assert [tag for tag, _ in _tags(single)].count("svg") == 1, "no per-sample plot for one sample"


def test_text_is_escaped(reports: dict[str, Report]) -> None:
    report = dataclasses.replace(reports["passing"], model='<script>alert("x")</script>', notes=("a & <b>",))
    text = render_html(report)
    assert "<script>" not in text and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "a &amp; &lt;b&gt;" in text


def test_missing_matplotlib_is_an_option_error(reports: dict[str, Report], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(OptionError, match=r"--html: needs matplotlib; pip install 'trtdiff\[html\]'"):
        render_html(reports["passing"])


def test_import_does_not_load_matplotlib() -> None:
    code = "import sys, trtdiff.render.html; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


def _png_rows(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed (still filtered) scanlines of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, offset = [], 8
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset:offset + 4]), data[offset + 4:offset + 8]
        if kind == b"IDAT":
            chunks.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless check needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install chromium)")
def test_chromium_renders_the_plots(failing_html: Path, tmp_path: Path) -> None:
    dom = _chromium(tmp_path, "--dump-dom", failing_html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") == 2 and "first divergence: #41 /decoder/Resize (Resize)" in dom.stdout
    assert "<code>/decoder/Resize</code>" in dom.stdout

    png = tmp_path / "report.png"
    shot = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,2000", failing_html.as_uri())
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    data = png.read_bytes()
    width, height, raw = _png_rows(data)
    assert (width, height) == (1280, 2000)
    assert len(set(raw[:: 97])) > 20, "a blank page decompresses to a handful of byte values"
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
