"""A quantized file's compare against its float twin's, on ModelOpt's fixtures (issue 37, docs/quantized.md).

Each figure is the best of `--repeat` in-process runs of `trtdiff.compare(model, onnx=file)`, after one
warm-up: the FP32 export ModelOpt quantized, then each quantized file made from it. What a quantized
file adds: its weights compared with the float weights (pairing.weights), each node's rounding model
(analysis.quant_noise), the scale checks. Run: python examples/bench_quantized.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
FOLDER = TESTS / "fixtures" / "modelopt"
TWINS = {
    "cnn_ts17_fp32.onnx": ("cnn", ["cnn_ts17_int8_fp32_max.onnx", "cnn_ts17_int8.onnx", "cnn_ts17_fp8.onnx"]),
    "llm_ts17_fp32.onnx": ("llm", ["llm_ts17_int8.onnx", "llm_ts17_fp8.onnx", "llm_ts17_int4_rtn_dq.onnx"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    from modelopt_models import MODELS  # the PyTorch models the fixtures came from

    import trtdiff

    def best(kind: str, name: str) -> float:
        runs = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            trtdiff.compare(MODELS[kind][0](), onnx=FOLDER / name)
            runs.append(time.perf_counter() - start)
        return min(runs)

    trtdiff.compare(MODELS["cnn"][0](), onnx=FOLDER / "cnn_ts17_fp32.onnx")  # warm-up: imports, first loads
    for float_file, (kind, quantized) in TWINS.items():
        floor = best(kind, float_file)
        print(f"{float_file:32s} {floor:6.3f} s (the floor)")
        for name in quantized:
            seconds = best(kind, name)
            print(f"{name:32s} {seconds:6.3f} s  {seconds / floor:4.2f}x")


if __name__ == "__main__":
    main()
