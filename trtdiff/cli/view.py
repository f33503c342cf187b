"""`trtdiff view REPORT.json`: Model Explorer on the report's ONNX file, coloured by the report's node data.

The node data is made from the report now (trtdiff.render.explorer) into a temporary folder,
so a report is enough; the ONNX file must still be where the report says (or beside the
report). Model Explorer's own local server serves the page; Ctrl-C stops it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from trtdiff.errors import MissingPackageError, OptionError, ReportFileError
from trtdiff.options import ViewOptions

INSTALL = "pip install 'trtdiff[explorer]' (Google's ai-edge-model-explorer and its ONNX adapter model-explorer-onnx)"
DEFAULT_PORT = 8080  # Model Explorer's own default: from it, the first free port up to 8099


def view(path: str, options: ViewOptions) -> None:
    """Serve Model Explorer with the report's ONNX file and node data until interrupted."""
    from trtdiff.render.explorer import onnx_file, read_onnx, write_model_explorer
    from trtdiff.render.saved import read_saved
    from trtdiff.report import Report

    missing = [name for name in ("model_explorer", "model_explorer_onnx") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingPackageError(f"Model Explorer is not installed ({', '.join(missing)}): {INSTALL}")
    saved = read_saved(path)
    if not isinstance(saved, Report):
        raise ReportFileError(
            f"{path}: a sweep keeps no ONNX file per combination; compare the combination to look at with "
            "--model-explorer PATH, then view that report"
        )
    onnx_path = onnx_file(saved, path)
    if onnx_path is None:
        where = f" ({saved.onnx_path} is not there)" if saved.onnx_path else " (the export was temporary)"
        raise ReportFileError(
            f"{path}: the report keeps no ONNX file{where}; compare again with --model-explorer PATH "
            "or --save-onnx PATH"
        )
    if options.port is not None and _in_use(options.host, options.port):
        raise OptionError("is in use; choose another port, or leave it out", parameter="port", value=options.port)
    model = read_onnx(onnx_path, path)  # before serving: a file that is no ONNX model is one line, not a traceback
    from model_explorer import config, server

    with tempfile.TemporaryDirectory(prefix="trtdiff-view-") as folder:
        stem = Path(folder) / f"{Path(path).with_suffix('').name}-nodes"
        overlays = write_model_explorer(saved, f"{stem}.json", model)
        settings = config().add_model_from_path(str(onnx_path))
        for overlay in reversed(overlays):  # Model Explorer shows the last one added: the accumulated error
            settings.add_node_data_from_path(str(overlay))
        no_browser = options.no_browser or no_display()
        if no_browser and not options.no_browser:
            print(
                "trtdiff: no display here, so no browser opens; open the address below in a browser on this "
                "machine, or forward its port (ssh -L PORT:localhost:PORT) and open it on yours",
                file=sys.stderr,
            )
        server.start(
            host=options.host,
            port=options.port or DEFAULT_PORT,
            config=settings,
            extensions=["model_explorer_onnx"],
            no_open_in_browser=no_browser,
        )


def no_display(environ: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    """Whether no graphical browser can open here: Linux or BSD without an X or Wayland display or $BROWSER.

    Python's webbrowser then finds no browser (or only a console one, which would take over the
    terminal the server reports to) and Model Explorer would serve on without a word.
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if platform.startswith(("win", "darwin", "cygwin")):
        return False
    return not any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"))


def _in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex((host, port)) == 0
