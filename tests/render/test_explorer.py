"""trtdiff.render.explorer: Model Explorer node data keyed by the ONNX adapter's node ids, loaded by its own
classes, and the page in a real browser."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from culprit_reports import culprit_report
from onnx import TensorProto, helper

from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.render.explorer import (
    CULPRIT,
    GREEN,
    NOT_COMPARED,
    RED,
    STATUS_COLOURS,
    coverage,
    node_ids,
    onnx_beside,
    overlay_paths,
    overlays,
    write_model_explorer,
)
from trtdiff.render.files import ReportFiles
from trtdiff.report import Report

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")


def _graph() -> onnx.ModelProto:
    """The nodes of the renderer tests' reports, plus a Constant and an unnamed Shape node."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["/backbone/Conv_output_0"], name="/backbone/Conv"),
        helper.make_node("Relu", ["/backbone/Conv_output_0"], ["/backbone/Relu_output_0"], name="/backbone/Relu"),
        helper.make_node("Constant", [], ["/Constant_output_0"], name="/Constant", value_float=2.0),
        helper.make_node("Shape", ["/backbone/Relu_output_0"], ["shape"]),  # unnamed: <node_3> in Model Explorer
        helper.make_node(
            "Resize", ["/backbone/Relu_output_0", "", "s"], ["/decoder/Resize_output_0"], name="/decoder/Resize"
        ),
        helper.make_node("Conv", ["/decoder/Resize_output_0", "w2"], ["/head/Conv_output_0"], name="/head/Conv"),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("/head/Conv_output_0", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph)


def test_overlays_give_every_compared_node_its_figures_and_mark_the_culprits(diverged: Report) -> None:
    report = culprit_report(diverged)
    model = _graph()
    assert node_ids(model)["Shape_3"] == "<node_3>" and node_ids(model)["/decoder/Resize"] == "/decoder/Resize"
    status, accumulated, local, cosine = overlays(report, model)
    compared = {layer.onnx_node for layer in report.layers}
    for overlay in (accumulated, local, cosine):
        assert set(overlay.results) == compared
    assert accumulated.results["/decoder/Resize"].value == pytest.approx(0.0264)
    assert accumulated.results["/decoder/Resize"].colour == RED and accumulated.results["/head/Conv"].colour == RED
    assert accumulated.results["/backbone/Conv"].colour == GREEN
    assert local.results["/decoder/Resize"].colour == RED and local.results["/backbone/Relu"].colour == GREEN
    assert cosine.results["/head/Conv"].value == pytest.approx(0.999225)
    assert cosine.thresholds[0][0] < report.thresholds.min_cosine <= cosine.thresholds[1][0]
    assert set(status.results) == set(node_ids(model).values())  # every node, the unnamed one by its adapter id
    assert status.results["<node_3>"].value == NOT_COMPARED and status.results["/Constant"].value == NOT_COMPARED
    assert status.results["/decoder/Resize"].value == CULPRIT == status.results["/head/Conv"].value
    assert status.results["/backbone/Conv"].value == 1
    assert coverage(status, model) == 1.0 and coverage(accumulated, model) == pytest.approx(4 / 6)
    assert dict(status.thresholds) == {float(code): colour for code, colour in enumerate(STATUS_COLOURS)}


def test_the_files_load_with_model_explorers_own_classes(
    diverged: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dacite = pytest.importorskip("dacite", reason="Model Explorer (the explorer extra) is not installed")
    builder = pytest.importorskip("model_explorer.node_data_builder", reason="the explorer extra is not installed")
    report = culprit_report(diverged)
    written = write_model_explorer(report, tmp_path / "me.json", _graph())
    assert written == overlay_paths(tmp_path / "me.json")
    assert [p.name for p in written] == ["me.json", "me.error.json", "me.local.json", "me.cosine.json"]
    for path in written:
        data = json.loads(path.read_text())
        loaded = dacite.from_dict(builder.GraphNodeData, data, config=dacite.Config(strict=True))
        assert loaded.name.startswith("trtdiff: ") and loaded.results
        assert all(isinstance(r, builder.NodeDataResult) for r in loaded.results.values())
        assert json.loads(loaded.to_json_string()) == data  # the builder writes back what was read
    with_builder = [p.read_text() for p in written]
    monkeypatch.setitem(sys.modules, "model_explorer", None)  # as if the extra were not installed
    write_model_explorer(report, tmp_path / "plain.json", _graph())
    assert [p.read_text() for p in overlay_paths(tmp_path / "plain.json")] == with_builder


def test_node_data_overwrites_only_earlier_node_data(diverged: Report, tmp_path: Path) -> None:
    path = tmp_path / "me.json"
    ReportFiles(model_explorer=str(path)).validate()
    write_model_explorer(diverged, path)
    onnx_beside(path).write_bytes(b"an earlier export")
    ReportFiles(model_explorer=str(path)).validate()  # earlier trtdiff node data and its ONNX file: written again
    (tmp_path / "me.local.json").write_text('{"mine": 1}')
    with pytest.raises(OptionError, match=r"me\.local\.json exists and is not trtdiff node data"):
        ReportFiles(model_explorer=str(path)).validate()
    other = tmp_path / "other.json"
    onnx_beside(other).write_bytes(b"the user's model")
    with pytest.raises(OptionError, match=r"other\.onnx exists and belongs to no earlier trtdiff node data"):
        ReportFiles(model_explorer=str(other)).validate()


def _compare(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["compare", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.slow
def test_deeplab_at_opset_10_colours_the_graph(tmp_path: Path) -> None:
    """The issue's example: node data for the embedded DeepLabV3+ at opset 10, the ONNX file kept beside it."""
    dacite = pytest.importorskip("dacite", reason="Model Explorer (the explorer extra) is not installed")
    builder = pytest.importorskip("model_explorer.node_data_builder", reason="the explorer extra is not installed")
    me, out = tmp_path / "me.json", tmp_path / "r.json"
    factory = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
    code, _, _ = _compare(
        factory, "--opset", "10", "--input-shape", "1x3x64x64", "--model-explorer", str(me), "--json", str(out)
    )
    assert code == 1
    report = Report.from_json(out.read_text())
    assert report.onnx_path == str(onnx_beside(me)) and onnx_beside(me).is_file()
    model = onnx.load(str(onnx_beside(me)))
    ids = node_ids(model)
    loaded = [
        dacite.from_dict(builder.GraphNodeData, json.loads(p.read_text()), config=dacite.Config(strict=True))
        for p in overlay_paths(me)
    ]
    status, accumulated, _, _ = loaded
    compared = {ids[layer.onnx_node] for layer in report.layers}
    assert compared <= set(accumulated.results)  # every compared node has its error
    non_constant = {ids[n.name] for n in model.graph.node if n.op_type != "Constant"}
    assert non_constant <= set(status.results)  # every node but Constants has a value (they have one too)
    assert len(set(status.results) & set(ids.values())) / len(ids) >= 0.9
    culprits = {c.onnx_node for c in report.culprits}
    assert culprits == {"/decoder/Resize", "/Resize"}
    for node in culprits:
        assert status.results[node].value == CULPRIT and accumulated.results[node].bgColor == RED
    agreeing = [layer.onnx_node for layer in report.layers if not layer.diverged and layer.onnx_node not in culprits]
    assert agreeing and all(accumulated.results[n].bgColor == GREEN for n in agreeing)
    code, _, _ = _compare(
        factory, "--opset", "10", "--input-shape", "1x3x64x64", "--model-explorer", str(me), "--no-culprit"
    )
    assert code == 1  # run again: the earlier node data and its ONNX file are replaced


def _playwright_chromium() -> str | None:
    """Why the browser test cannot run here, or None."""
    if not CHROMIUM.exists():
        return "needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    for module in ("playwright", "model_explorer", "model_explorer_onnx"):
        if __import__("importlib").util.find_spec(module) is None:
            return f"needs {module} (pip install -e '.[test]')"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_playwright_chromium() is not None, reason=str(_playwright_chromium()))
def test_trtdiff_view_shows_the_node_data_in_a_real_browser(tmp_path: Path, diverged: Report) -> None:
    """`trtdiff view` serves Model Explorer; Chromium, driven by Playwright, loads the graph and every overlay."""
    from playwright.sync_api import sync_playwright

    model_path = tmp_path / "model.onnx"
    onnx.save(_graph(), str(model_path))
    report = dataclasses.replace(culprit_report(diverged), onnx_path=str(model_path))
    report_path = tmp_path / "r.json"
    report.write_json(report_path)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "trtdiff.cli.app", "view", str(report_path), "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        url = _served_url(server)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM),
                args=[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--use-gl=swiftshader",
                    "--enable-unsafe-swiftshader",
                ],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            page.get_by_text("trtdiff: accumulated error").first.wait_for(timeout=60_000)
            text = page.inner_text("body")
            page.screenshot(path=str(tmp_path / "view.png"))
            browser.close()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)  # the server this test started, and its threads' process group
        server.wait(timeout=30)
    assert "model.onnx" in text and "main_graph" in text
    for name in ("accumulated error", "local error", "cosine", "status"):
        assert f"trtdiff: {name}" in text
    worst = max(m.rel_err for layer in report.layers for m in layer.pairs.values())
    assert repr(worst) in text  # the aggregated stats read the values of the node data


def _served_url(server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None
    deadline = time.monotonic() + 90
    seen = []
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if not line and server.poll() is not None:
            break
        seen.append(line)
        found = re.search(r"(http://\S+/\?data=\S+)", line)
        if found:
            return found.group(1)
    raise AssertionError("Model Explorer did not start:\n" + "".join(seen))


def test_view_says_in_one_line_what_is_missing(tmp_path: Path, diverged: Report) -> None:
    report_path = tmp_path / "r.json"
    diverged.write_json(report_path)
    result = CliRunner().invoke(main, ["view", str(report_path)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    if shutil.which("model-explorer") or __import__("importlib").util.find_spec("model_explorer"):
        assert "keeps no ONNX file (the export was temporary)" in result.stderr
    else:
        assert "pip install 'trtdiff[explorer]'" in result.stderr
