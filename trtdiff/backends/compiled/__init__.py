"""What every compiled (fusing) runtime shares: the plain-against-marked check and the bisection of marks.

TensorRT (backends.tensorrt) and OpenVINO (backends.openvino) both compile a model twice:
the plain one that ships and a marked one that returns intermediate tensors. Marking can
change what the compiler fuses, and so the numbers; `answer.AnswerCheck` compares the two
models' final outputs on every run and `answer.minimal_marks` narrows the marks that change
them. Runtime-specific calls (building an engine, compiling a model) stay in each backend
and are handed in as callables. Nothing here imports a runtime.
"""

from __future__ import annotations
