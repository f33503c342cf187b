"""Rerunnable benchmark: `trtdiff build` of a large generated graph against TensorRT's bare parse and build.

    python examples/bench_trt_build.py                 # 1,000 x (Constant + Add + Relu), unnamed: 3,000 nodes
    python examples/bench_trt_build.py --blocks 2000 --named

The graph is x -> Add(x, c0) -> Relu -> Add(., c1) -> Relu ... -> y with each c_i a Constant
node (float32 of --shape). Both measurements run in fresh processes, one after the other in
this invocation, on the same ONNX file:

- bare: import TensorRT, `OnnxParser.parse_from_file`, `build_serialized_network` (no marks);
- trtdiff: the whole `trtdiff build FILE --json OUT` command (its imports, planning the marks,
  the marked and the plain builds, reading both plans, writing the report).

It prints both wall times and their ratio (the issue asks for at most 3x), and trtdiff's own
timings from the JSON report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BARE = """
import sys, time
start = time.perf_counter()
try:
    import tensorrt as trt
except ImportError:
    import tensorrt_rtx_bindings as trt
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
assert parser.parse_from_file(sys.argv[1])
config = builder.create_builder_config()
assert builder.build_serialized_network(network, config) is not None
print(round(time.perf_counter() - start, 3))
"""


def make_graph(path: Path, blocks: int = 1000, shape: tuple[int, ...] = (1, 64), named: bool = False) -> Path:
    """`blocks` times Constant + Add + Relu in a chain (3 * blocks nodes), unnamed unless `named`."""
    nodes = []
    previous = "x"
    for i in range(blocks):
        out = "y" if i == blocks - 1 else f"r{i}"
        value = numpy_helper.from_array(np.full(shape, 0.001 * i, np.float32))
        names = ({"name": f"const{i}"}, {"name": f"add{i}"}, {"name": f"relu{i}"}) if named else ({}, {}, {})
        nodes += [
            helper.make_node("Constant", [], [f"c{i}"], value=value, **names[0]),
            helper.make_node("Add", [previous, f"c{i}"], [f"a{i}"], **names[1]),
            helper.make_node("Relu", [f"a{i}"], [out], **names[2]),
        ]
        previous = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=1000, help="Constant+Add+Relu blocks (3 nodes each)")
    parser.add_argument("--named", action="store_true", help="give every node a name")
    parser.add_argument("--extra", default="", help="extra trtdiff build options, e.g. '--trt-mark-budget 1MB'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-trt-") as folder:
        path = make_graph(Path(folder) / "chain.onnx", args.blocks, named=args.named)
        start = time.perf_counter()
        inner = float(
            subprocess.run(
                [sys.executable, "-c", BARE, str(path)], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
        bare = time.perf_counter() - start
        report = Path(folder) / "build.json"
        command = [sys.executable, "-m", "trtdiff", "build", str(path), "--json", str(report), *args.extra.split()]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        whole = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"trtdiff build failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        data = json.loads(report.read_text())
    trt = data["tensorrt"]
    print(f"graph: {3 * args.blocks} nodes ({'named' if args.named else 'unnamed'}), {len(trt['name_map'])} mapped")
    print(f"bare TensorRT parse + build: {bare:.2f} s (process), {inner:.2f} s inside")
    print(f"trtdiff build:               {whole:.2f} s (process); its timings {data.get('timings')}")
    print(f"ratio: {whole / bare:.2f}x  (engines {trt.get('engines')}, runs per sample {trt.get('runs_per_sample')})")


if __name__ == "__main__":
    main()
