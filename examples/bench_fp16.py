"""An FP16 compare against the same model's FP32 compare, in one process, with each step's time (issue 38).

    PYTHONPATH=$PWD python examples/bench_fp16.py [--model deeplabv3_resnet50] [--shape 1x3x512x512]
        [--device cuda] [--repeat 2] [--profile 25]

`--model demo` is trtdiff's own DeepLabV3+ (no extra package); the others are examples/real_models.py's
(timm, torchvision, transformers, smp where installed; random weights). One FP32 compare first (it warms
the process up; not counted), then `--repeat` rounds of one FP32 and one FP16 compare; each line gives the
verdict, the seconds and the report's `timings`, largest first; the last line the medians and FP16 over FP32.
With a GPU and onnxruntime-gpu, ONNX Runtime runs on CUDA and computes FP16. `--profile N` then runs one
more FP16 compare under cProfile (not counted) and prints its N costliest functions by their own time:
one run on a borrowed GPU host gives both the figures and where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

import trtdiff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--shape", default="1x3x512x512")
    parser.add_argument("--device", default="cpu", help="where the PyTorch reference runs")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="profile one more FP16 compare")
    args = parser.parse_args()

    def build() -> torch.nn.Module:
        if args.model == "demo":
            from trtdiff.cli.demo import build_example

            return build_example("resnet")
        sys.path.insert(0, str(Path(__file__).parent))
        from real_models import MODELS

        torch.manual_seed(0)
        return MODELS[args.model][0]().eval()

    def compare(precision: str) -> trtdiff.Report:
        return trtdiff.compare(
            build(),
            input_shapes=[args.shape],
            precision=precision,
            backends=["torch", "onnxruntime"],
            torch_device=args.device,
        )

    seconds_of: dict[str, list[float]] = {"fp32": [], "fp16": []}
    for round_, precision in enumerate(("fp32", *["fp32", "fp16"] * args.repeat)):
        started = time.perf_counter()
        report = compare(precision)
        seconds = time.perf_counter() - started
        if round_:
            seconds_of[precision].append(seconds)
        steps = sorted(report.timings.items(), key=lambda kv: -kv[1])[:8]
        print(
            f"{precision}{'' if round_ else ' (warm-up)'} {'PASS' if report.passed else 'FAIL'} {seconds:.1f} s: "
            + ", ".join(f"{name} {value:.2f}" for name, value in steps),
            flush=True,
        )
    fp32, fp16 = (statistics.median(seconds_of[p]) for p in ("fp32", "fp16"))
    print(f"{args.model} {args.shape}: FP32 {fp32:.1f} s, FP16 {fp16:.1f} s, FP16/FP32 {fp16 / fp32:.2f}x (medians)")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(compare, "fp16")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
