"""Measure the CUDA reference path: FP32 vs TF32 PyTorch on the GPU against ONNX Runtime on the CPU.

python examples/bench_cuda_reference.py [--shape 1x3x512x512]
"""

from __future__ import annotations

import argparse
import time

import torch

import trtdiff
from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="1x3x512x512")
    args = parser.parse_args()
    model = deeplabv3plus_resnet()
    print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    for device, tf32 in (("cpu", False), ("cuda", False), ("cuda", True)):
        if device == "cuda" and not torch.cuda.is_available():
            continue
        start = time.perf_counter()
        report = trtdiff.compare(model, input_shapes=[args.shape], opset=13, torch_device=device, tf32=tf32)
        seconds = time.perf_counter() - start
        worst = max(layer.pairs["torch~onnxruntime"].rel_err for layer in report.layers)
        first = report.first_divergence
        print(
            f"{device:4} tf32={tf32!s:5} passed={report.passed!s:5} worst rel-err {worst:.2e} "
            f"first divergence {first.onnx_node if first else '-'}  {seconds:.2f}s  timings {report.timings}"
        )


if __name__ == "__main__":
    main()
