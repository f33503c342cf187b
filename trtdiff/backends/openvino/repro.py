"""What a repro bundle's README says to replay a culprit's subgraph in OpenVINO, which has no command for it.

The OpenVINO spec's `repro_readme` hook (backends.registry.repro_readme_lines): a Python
snippet compiling the standalone subgraph as trtdiff compiled it (the CPU plugin, the
inference precision of the graph's own types).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtdiff.backends.openvino.runtime import HINTS
from trtdiff.source.fp16 import graph_precision

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo


def readme_lines(graph: GraphInfo, subgraph: str) -> list[str]:
    """A Python snippet replaying the `subgraph` file in OpenVINO, compiled as trtdiff did for `graph`."""
    hint = HINTS[graph_precision(graph)]
    return [
        f"With OpenVINO (CPU plugin, inference precision {hint} as trtdiff compiled it; another device's name "
        "for `--openvino-device`):",
        "",
        "```python",
        "import numpy as np, openvino as ov",
        "core = ov.Core()",
        f"compiled = core.compile_model(core.read_model('{subgraph}'), 'CPU',",
        f"                              {{'INFERENCE_PRECISION_HINT': '{hint}'}})",
        "feeds = dict(np.load('inputs.npz'))",
        "got = np.asarray(compiled(feeds)[compiled.output(0)]).ravel()",
        "want = np.load('outputs/reference.npy').ravel()",
        "print('cosine', got @ want / np.linalg.norm(got) / np.linalg.norm(want),",
        "      'rel-err', np.abs(got - want).max() / np.abs(want).max())",
        "```",
        "",
    ]
