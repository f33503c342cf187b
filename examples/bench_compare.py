"""The benchmark: trtdiff against the work no tool can skip, in one run, on one machine.

    python examples/bench_compare.py                       # 256², 512², 1024²; CPU, and the GPU where present
    python examples/bench_compare.py --sizes 2048 --memory-limit 1GB --no-floor
    python examples/bench_compare.py --sizes 512 --sweep   # three opsets against one compare
    python examples/bench_compare.py --culprits --shape 1x3x512x512 --opsets 10 --examples resnet

The model is a DeepLabV3+-style network (trtdiff.examples.deeplabv3plus, width 32, 21
classes) saved as a traced TorchScript archive. The *floor* is what any layer-by-layer
comparison must do: load the archive, one forward, export ONNX (TorchScript exporter, the
opset trtdiff uses), and one ONNX Runtime run with every node output marked (graph
optimizations off, as trtdiff runs it). trtdiff runs `compare --backends torch,onnxruntime
--all --json`, on the CPU and, where torch sees a GPU, with `--torch-device cuda`.

`--lean-floor` also measures the floor ending as the trtdiff command ends, without tearing
down the interpreter, and gives trtdiff's wall ratio to that too. `--stats` adds `compare
--capture stats` on the CPU, against the *plain floor*: the same steps with one plain ONNX
Runtime run (the graph's outputs only), what a comparison of statistics cannot go below.

Every measurement is a fresh process (imports included), timed from start to exit; its
peak memory is its own maximum resident set (os.wait4). Python bytecode is cached as an
installed package has it (one warm-up run of each command first, not counted). Each size runs `--repeat` times,
floor and trtdiff interleaved, and the table gives medians and the ratios to the floor of
the same run. `--culprits` keeps the older measurement of the culprit step's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FLOOR = """
import io, sys
import numpy as np, onnx, onnxruntime as ort, torch
path, side, opset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plain = sys.argv[4:] == ["plain"]  # the graph's own outputs only: one plain run
model = torch.jit.load(path, map_location="cpu")
x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 3, side, side), dtype=np.float32))
with torch.no_grad():
    model(x)
buffer = io.BytesIO()
torch.onnx.export(model, (x,), buffer, opset_version=opset, dynamo=False)
proto = onnx.load_from_string(buffer.getvalue())
marked = {o.name for o in proto.graph.output}
for node in proto.graph.node if not plain else ():
    for name in node.output:
        if name and name not in marked:
            proto.graph.output.append(onnx.ValueInfoProto(name=name))
            marked.add(name)
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
outputs = session.run(None, {session.get_inputs()[0].name: x.numpy()})
print(sum(o.nbytes for o in outputs))
"""

LEAN_EXIT = """
import os
sys.stdout.flush()
os._exit(0)  # as the trtdiff command ends: no interpreter teardown (about 0.5 s once torch is imported)
"""

ARCHIVE = """
import sys, torch
from trtdiff.examples.deeplabv3plus import DeepLabV3Plus, ResNetBackbone, randomize_batchnorm
torch.manual_seed(0)
model = randomize_batchnorm(DeepLabV3Plus(ResNetBackbone(width=32), num_classes=21), 0).eval()
with torch.no_grad():
    traced = torch.jit.trace(model, torch.randn(1, 3, 256, 256))
torch.jit.save(traced, sys.argv[1])
"""

GPU = "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')"


@dataclass(frozen=True)
class Run:
    """One process: seconds from start to exit, its peak resident memory, and whether it succeeded."""

    seconds: float
    peak_mb: float
    ok: bool
    detail: str = ""


def measure(command: Sequence[str], folder: Path, source: str | None = None) -> Run:
    """Run `command` as a child process; wall time and its own peak RSS (ru_maxrss of that child).

    `source`: a source tree whose trtdiff the child imports (first on PYTHONPATH).
    """
    log = folder / "child.log"
    env = dict(os.environ)
    # Bytecode cached, as an installed package has it (pip compiles it), also where the environment
    # says not to write it: every child reads it from one folder, filled by the warm-up runs.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(source).resolve()), env.get("PYTHONPATH")) if p)
    with log.open("w") as out:
        start = time.perf_counter()
        child = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, cwd=folder, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text()
    return Run(seconds, usage.ru_maxrss / 1024, child.returncode in (0, 1), text[-2000:])


def trtdiff_command(archive: Path, side: int, device: str, extra: Sequence[str], report: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trtdiff",
        "compare",
        str(archive),
        "--input-shape",
        f"1x3x{side}x{side}",
        "--backends",
        "torch,onnxruntime",
        "--all",
        "--json",
        str(report),
        "--force",
        "--torch-device",
        device,
        *extra,
    ]


def compare_run(
    archive: Path, side: int, device: str, extra: Sequence[str], folder: Path, source: str | None = None
) -> Run:
    """One trtdiff compare; a clean model must pass (a failed verdict is reported, not timed as success)."""
    report = folder / "report.json"
    report.unlink(missing_ok=True)
    run = measure(trtdiff_command(archive, side, device, extra, report), folder, source)
    if not report.exists():
        return Run(run.seconds, run.peak_mb, False, run.detail)
    data = json.loads(report.read_text())
    reports = [entry["report"] or {"passed": False} for entry in data["sweep"]] if "sweep" in data else [data]
    passed = all(r["passed"] for r in reports)
    notes = "; ".join(note for r in reports for note in r.get("notes", ()))
    return Run(run.seconds, run.peak_mb, passed, f"{'passed' if passed else 'FAILED'}; {notes}")


def median(runs: Sequence[Run]) -> tuple[float, float]:
    return statistics.median(r.seconds for r in runs), statistics.median(r.peak_mb for r in runs)


def spread(runs: Sequence[Run]) -> str:
    seconds = sorted(r.seconds for r in runs)
    return f"{seconds[0]:.2f}-{seconds[-1]:.2f} s" if len(seconds) > 1 else ""


def cell(runs: Sequence[Run], floor: tuple[float, float] | None, lean: tuple[float, float] | None = None) -> str:
    if not runs:
        return "-"
    seconds, peak = median(runs)
    text = f"{seconds:.2f} s, {peak:.0f} MB"
    if floor is not None:
        text += f" ({seconds / floor[0]:.2f}x, {peak / floor[1]:.2f}x"
        text += f"; {seconds / lean[0]:.2f}x the lean floor)" if lean is not None else ")"
    if not all(r.ok for r in runs):
        text += " **not passed**"
    return text


def floor_table(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="trtdiff-bench-"))
    archive = Path(args.model) if args.model else folder / "deeplabv3plus_w32_c21.pt"
    if not args.model:
        subprocess.run([sys.executable, "-c", ARCHIVE, str(archive)], check=True)
    gpu = subprocess.run([sys.executable, "-c", GPU], capture_output=True, text=True, check=True).stdout.strip()
    devices = ["cpu"] + (["cuda"] if gpu and not args.cpu_only else [])
    extra = ["--memory-limit", args.memory_limit] if args.memory_limit else []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {cores} cores, GPU: {gpu or 'none'}; python {sys.version.split()[0]}; repeat {args.repeat}")
    columns = [(d, None) for d in devices] + ([(d, args.baseline) for d in devices] if args.baseline else [])
    warm_up = int(args.sizes.split(",")[0])  # fills the bytecode cache and the page cache; not counted
    measure([sys.executable, "-c", FLOOR, str(archive), str(warm_up), "17"], folder)
    for device, source in columns:
        compare_run(archive, warm_up, device, extra, folder, source)
    rows = []
    for side in (int(s) for s in args.sizes.split(",")):
        floors: list[Run] = []
        leans: list[Run] = []
        compares: dict[str, list[Run]] = {_name(d, b): [] for d, b in columns}
        sweeps: list[Run] = []
        plains: list[Run] = []
        stats: list[Run] = []
        for _ in range(args.repeat):
            if args.stats:
                plains.append(measure([sys.executable, "-c", FLOOR, str(archive), str(side), "17", "plain"], folder))
                stats.append(compare_run(archive, side, "cpu", [*extra, "--capture", "stats"], folder))
            if not args.no_floor:
                floors.append(measure([sys.executable, "-c", FLOOR, str(archive), str(side), "17"], folder))
                if args.lean_floor:
                    lean = [sys.executable, "-c", FLOOR + LEAN_EXIT, str(archive), str(side), "17"]
                    leans.append(measure(lean, folder))
            for device, source in columns:
                compares[_name(device, source)].append(compare_run(archive, side, device, extra, folder, source))
            if args.sweep:
                sweeps.append(compare_run(archive, side, "cpu", [*extra, "--opset", "11,13,17"], folder))
        base = median(floors) if floors else None
        lean_base = median(leans) if leans else None
        row = [f"{side}²", cell(floors, None)] + ([cell(leans, base)] if leans else [])
        row += [cell(runs, base, lean_base) for runs in compares.values()]
        if args.stats:
            row += [cell(plains, None), cell(stats, median(plains))]
        if args.sweep:
            one = median(compares[_name("cpu", None)])
            swept = median(sweeps)
            row.append(f"{swept[0]:.2f} s ({swept[0] / one[0]:.2f}x one compare)")
        rows.append(row)
        print("  row: | " + " | ".join(row) + " |", flush=True)
        for device, runs in compares.items():
            for run in runs:
                if not run.ok:
                    print(f"  {side}² {device}: {run.detail.strip()[-600:]}")
        for run in stats:
            if not run.ok:
                print(f"  {side}² --capture stats: {run.detail.strip()[-600:]}")
        measured = [("floor", floors), *compares.items(), ("plain floor", plains), ("--capture stats", stats)]
        noise = ", ".join(f"{name} {spread(r)}" for name, r in measured if r)
        print(f"  {side}²: spread of the runs: {noise}", flush=True)
    header = ["input", "floor"] + (["floor, lean exit"] if args.lean_floor else []) + [_name(d, None) for d in devices]
    header += [_name(d, args.baseline) for d in devices] if args.baseline else []
    header += (
        ["plain floor", "trtdiff --capture stats --torch-device cpu (ratios to the plain floor)"] if args.stats else []
    )
    header += ["sweep of opsets 11,13,17"] if args.sweep else []
    if args.memory_limit:
        first = 3 if args.lean_floor else 2
        limited = f" --memory-limit {args.memory_limit}"
        header[first:] = [h if h == "plain floor" else h + limited for h in header[first:]]
    print()
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\n(median wall seconds and peak memory; in brackets the ratios to the floor of the same run)")


def _name(device: str, source: str | None) -> str:
    return f"trtdiff{' (' + Path(source).name + ')' if source else ''} --torch-device {device}"


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


def culprit_cost(args: argparse.Namespace) -> None:
    """Each example and opset with and without the culprit step, and the cost ratio of that step."""
    for example in args.examples.split(","):
        for opset in args.opsets.split(","):
            seconds = {}
            for culprit in ("false", "null"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, example, args.shape, opset, culprit],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                line = out.splitlines()[-1]
                seconds[culprit] = json.loads(line)["compare_seconds"]
                print(f"{example:12} opset {opset:>2} {args.shape} culprit={culprit}: {line}")
            print(f"culprit step cost ratio: {seconds['null'] / seconds['false']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="256,512,1024", help="input sides, e.g. 256,512,1024")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (medians are printed)")
    parser.add_argument("--model", help="a TorchScript archive of 1x3xHxW input (default: the DeepLabV3+ above)")
    parser.add_argument("--memory-limit", help="pass --memory-limit to trtdiff (e.g. 1GB)")
    parser.add_argument("--no-floor", action="store_true", help="measure trtdiff only")
    parser.add_argument(
        "--lean-floor",
        action="store_true",
        help="also the floor ending as the trtdiff command does (no interpreter teardown), and the ratios to it",
    )
    parser.add_argument("--baseline", help="also measure the trtdiff of this source tree (e.g. an older checkout)")
    parser.add_argument("--cpu-only", action="store_true", help="no --torch-device cuda row, even with a GPU")
    parser.add_argument("--sweep", action="store_true", help="also a sweep of opsets 11,13,17 on the CPU")
    parser.add_argument("--stats", action="store_true", help="also --capture stats against the plain floor")
    parser.add_argument("--culprits", action="store_true", help="the culprit step's cost on the examples instead")
    parser.add_argument("--shape", default="1x3x512x512", help="with --culprits")
    parser.add_argument("--opsets", default="10,13,18", help="with --culprits")
    parser.add_argument("--examples", default="resnet,mobilenetv2", help="with --culprits")
    args = parser.parse_args()
    if args.culprits:
        culprit_cost(args)
    else:
        floor_table(args)


if __name__ == "__main__":
    main()
