"""What every compiled (fusing) runtime shares: the marking check and its bisection, the fusion map, precision.

TensorRT (backends.tensorrt) and OpenVINO (backends.openvino) both compile a model twice:
the plain one that ships and a marked one that returns intermediate tensors. Marking can
change what the compiler fuses, and so the numbers; `answer.AnswerCheck` compares the two
models' final outputs on every run, `answer.judged` states the check and bisects the marks
(`answer.minimal_marks`) where asked. `fusion` holds the layers each runtime reads back
(which ONNX nodes each computes, which fusions the marked model splits), `precision` each
layer's type as built or run against the one asked. Runtime-specific calls (building an
engine, compiling a model, reading its layers) stay in each backend and are handed in as
callables. Nothing here imports a runtime.
"""

from __future__ import annotations
