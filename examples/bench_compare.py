"""Rerunnable benchmark: time, peak memory and pairing share of `trtdiff.compare` on the examples.

    python examples/bench_compare.py --shape 1x3x512x512 --opsets 10,13,18
    python examples/bench_compare.py --shape 1x3x512x512 --opsets 10 --examples resnet --culprits

Each configuration runs in a fresh process, so peak RSS (ru_maxrss) is its own. With
--culprits each configuration runs with and without the culprit step (--no-culprit) and
prints the cost ratio of the culprit step, both runs taken in this one invocation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
start = time.perf_counter()
import trtdiff
from trtdiff.cli.demo import build_example
example, shape, opset, culprit = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
model = build_example(example)
started = time.perf_counter()
report = trtdiff.compare(model, input_shapes=[shape], opset=opset, culprit=culprit)
compare_seconds = time.perf_counter() - started
print(json.dumps({
    "seconds": round(time.perf_counter() - start, 2),
    "compare_seconds": round(compare_seconds, 2),
    "culprits": [c.onnx_node for c in report.culprits],
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
    parser.add_argument("--culprits", action="store_true", help="also time the culprit step (with vs without)")
    args = parser.parse_args()
    for example in args.examples.split(","):
        for opset in args.opsets.split(","):
            settings = ["false", "null"] if args.culprits else ["null"]
            seconds = {}
            for culprit in settings:
                out = (
                    subprocess.run(
                        [sys.executable, "-c", CHILD, example, args.shape, opset, culprit],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    .stdout.strip()
                    .splitlines()[-1]
                )
                seconds[culprit] = json.loads(out)["compare_seconds"]
                print(f"{example:12} opset {opset:>2} {args.shape} culprit={culprit}: {out}")
            if args.culprits:
                print(f"culprit step cost ratio: {seconds['null'] / seconds['false']:.2f}")


if __name__ == "__main__":
    main()
