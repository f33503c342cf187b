"""Rerunnable benchmark: time, peak memory and pairing share of `trtdiff.compare` on the examples.

    python examples/bench_compare.py --shape 1x3x512x512 --opsets 10,13,18

Each configuration runs in a fresh process, so peak RSS (ru_maxrss) is its own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = """
import json, resource, sys, time
start = time.perf_counter()
import trtdiff
from trtdiff.demo import build_example
example, shape, opset = sys.argv[1], sys.argv[2], int(sys.argv[3])
report = trtdiff.compare(build_example(example), input_shapes=[shape], opset=opset)
print(json.dumps({
    "seconds": round(time.perf_counter() - start, 2),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "passed": report.passed,
    "first_divergence": report.first_divergence.onnx_node if report.first_divergence else None,
    "exporter": report.exporter,
    "paired": f"{report.pairing.paired_with_torch}/{report.pairing.float_tensors}",
    "onnx_tensors": report.pairing.onnx_tensors,
    "timings": report.timings,
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="1x3x512x512")
    parser.add_argument("--opsets", default="10,13,18")
    parser.add_argument("--examples", default="resnet,mobilenetv2")
    args = parser.parse_args()
    for example in args.examples.split(","):
        for opset in args.opsets.split(","):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, example, args.shape, opset], check=True, capture_output=True, text=True
            ).stdout
            print(f"{example:12} opset {opset:>2} {args.shape}: {out.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
