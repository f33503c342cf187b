"""trtdiff.analysis.upcast: a reduced-precision model's float32 twin computes what it computes, only wider."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from tests.precision_models import SHAPE, bf16_file, fp16_file, linear_relu
from trtdiff.analysis.upcast import as_float32, narrow


def _types(model: onnx.ModelProto) -> set[int]:
    graph = model.graph
    values = (*graph.input, *graph.output, *graph.value_info)
    found = {v.type.tensor_type.elem_type for v in values} | {t.data_type for t in graph.initializer}
    found |= {a.i for n in graph.node for a in n.attribute if a.name == "to"}
    return found


def test_an_fp16_and_a_bf16_graph_become_float32_and_give_the_values_to_float16_precision(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal(tuple(int(d) for d in SHAPE.split("x")), dtype=np.float32)
    fp32 = linear_relu()
    import torch

    with torch.no_grad():
        exact = fp32(torch.from_numpy(x)).numpy()
    for path in (fp16_file(fp32, tmp_path, "lr"), bf16_file(tmp_path)):
        narrow_model = onnx.load(str(path))
        assert any(narrow(t) for t in _types(narrow_model))
        wide = as_float32(narrow_model)
        onnx.checker.check_model(wide)
        assert not any(narrow(t) for t in _types(wide)) and TensorProto.FLOAT in _types(wide)
        assert narrow_model.graph.node[0].op_type == "Cast"  # the original is left as it was
        (got,) = ort.InferenceSession(wide.SerializeToString()).run(None, {"x": x})
        # the weights were rounded once, to FP16 or BF16: float32 arithmetic on them stays that close
        assert np.abs(got - exact).max() <= 2.0**-6 * np.abs(exact).max(), path.name
