"""Train the DeepLabV3+ example on synthetic shapes and ship its weights and an eval set.

    python examples/train_shapes.py                 # about 3 minutes on 2 CPU cores
    python examples/train_shapes.py --epochs 2 --out /tmp/shapes   # a quick try

Writes, under --out (default trtdiff/examples/data):
    deeplab_shapes.pt              state dict, float16 (deeplabv3plus_shapes() loads it as float32)
    shapes_eval/images/*.png       labelled eval images (seed --eval-seed, disjoint from training)
    shapes_eval/labels/*.png       class index per pixel, palette PNG

Then it scores the model on the eval set as read back from the PNGs, in PyTorch and through
ONNX Runtime at opsets 13 and 10: bilinear Resize at opset 10 has no coordinate mode, so
its upsampling differs from PyTorch's and the masks move at object edges.

The shipped weights came from the defaults (1,500 images, 25 epochs, 2 threads): 152 s of
training on a 2-core machine. On the 24 shipped eval images: PyTorch mIoU 0.958, ONNX
Runtime opset 13 0.958 (no pixel changed), opset 10 0.804 (4.6% of the pixels changed
class, 72% of them on a label edge and 99% within 2 pixels of one).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trtdiff.analysis.segmentation import agreement, argmax_masks, changed_mask, edge_mask, score, share_at_edges
from trtdiff.examples import shapes


def augment(
    images: torch.Tensor, labels: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random flips and quarter turns of the whole batch: the classes do not depend on orientation."""
    k = int(torch.randint(0, 4, (1,), generator=generator))
    images, labels = torch.rot90(images, k, (2, 3)), torch.rot90(labels, k, (1, 2))
    if bool(torch.randint(0, 2, (1,), generator=generator)):
        images, labels = images.flip(3), labels.flip(2)
    return images.contiguous(), labels.contiguous()


def train(
    model: torch.nn.Module, images: np.ndarray, labels: np.ndarray, epochs: int, batch_size: int, lr: float, seed: int
) -> float:
    """Train with AdamW and a one-cycle schedule; returns the seconds it took."""
    x, y = torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))
    generator = torch.Generator().manual_seed(seed)
    steps_per_epoch = (len(x) + batch_size - 1) // batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=epochs * steps_per_epoch, pct_start=0.15
    )
    model.train()
    start = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        total, correct, seen = 0.0, 0, 0
        for i in range(0, len(x), batch_size):
            batch_x, batch_y = augment(x[order[i : i + batch_size]], y[order[i : i + batch_size]], generator)
            logits = model(batch_x)
            loss = F.cross_entropy(logits, batch_y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(batch_x)
            correct += int((logits.argmax(1) == batch_y).sum())
            seen += batch_y.numel()
        print(
            f"epoch {epoch + 1:2d}/{epochs}  loss {total / len(x):.4f}  pixel acc {correct / seen:.4f}  {time.perf_counter() - start:6.1f} s",
            flush=True,
        )
    model.eval()
    return time.perf_counter() - start


def onnx_logits(model: torch.nn.Module, images: np.ndarray, opset: int, folder: Path) -> np.ndarray:
    """Export `model` at `opset` with the TorchScript exporter and run it with ONNX Runtime."""
    import onnxruntime as ort

    path = folder / f"shapes_opset{opset}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(images),), str(path), opset_version=opset, input_names=["x"], dynamo=False
        )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": images})[0]


def report(model: torch.nn.Module, eval_dir: Path) -> None:
    """Print mIoU in PyTorch and ONNX Runtime (opsets 13 and 10) on the eval set read from PNG."""
    names, images, labels = shapes.read_eval_set(eval_dir)
    reference = shapes.predict(model, images)
    torch_score = score(argmax_masks(reference), labels, shapes.NUM_CLASSES)
    print(f"eval set: {len(names)} images from {eval_dir}")
    print(
        f"PyTorch        mIoU {torch_score.miou:.4f}  pixel acc {torch_score.pixel_accuracy:.4f}  per class {_classes(torch_score.per_class)}"
    )
    edges = edge_mask(labels, width=1)
    with tempfile.TemporaryDirectory() as tmp:
        for opset in (13, 10):
            candidate = onnx_logits(model, images, opset, Path(tmp))
            s = score(argmax_masks(candidate), labels, shapes.NUM_CLASSES)
            moved = agreement(reference, candidate)
            at_edges = share_at_edges(changed_mask(reference, candidate), edges)
            print(
                f"ORT opset {opset:2d}  mIoU {s.miou:.4f}  pixel acc {s.pixel_accuracy:.4f}  "
                f"changed pixels {moved.changed_pixels:.4%} (mIoU vs PyTorch {moved.miou:.4f}, {at_edges:.0%} of them at label edges)"
            )
    print(f"edge pixels (width 1) are {edges.mean():.1%} of all pixels")


def _classes(values: tuple[float, ...]) -> str:
    return " ".join(f"{name}={v:.3f}" for name, v in zip(shapes.CLASS_NAMES, values, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=shapes.DATA_DIR, help="folder for the weights and shapes_eval/")
    parser.add_argument("--images", type=int, default=1500, help="training images")
    parser.add_argument("--eval-images", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-2)
    parser.add_argument("--seed", type=int, default=0, help="seed of the training data and the weights")
    parser.add_argument(
        "--eval-seed", type=int, default=1, help="seed of the eval images (differs from --seed: disjoint sets)"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads; use 1 if another process keeps a core busy"
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    images, labels = shapes.make_shapes(args.images, seed=args.seed)
    print(
        f"generated {len(images)} training images in {time.perf_counter() - started:.1f} s; pixels per class {shapes.class_counts(labels)}"
    )
    model = shapes.build_shapes_model(seed=args.seed)
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters; torch threads {torch.get_num_threads()}")
    seconds = train(model, images, labels, args.epochs, args.batch_size, args.lr, args.seed)
    print(f"trained {args.epochs} epochs in {seconds:.1f} s")

    weights = args.out / shapes.WEIGHTS_PATH.name
    shapes.save_weights(model, weights)
    eval_dir = args.out / shapes.EVAL_DIR.name
    for stale in [*eval_dir.glob("images/*.png"), *eval_dir.glob("labels/*.png")]:
        stale.unlink()  # a set written before with more images must not leave extra files
    eval_images, eval_labels = shapes.make_shapes(args.eval_images, seed=args.eval_seed)
    shapes.write_eval_set(eval_dir, eval_images, eval_labels)
    print(f"wrote {weights} ({weights.stat().st_size / 1024:.0f} KiB) and {args.eval_images} eval images to {eval_dir}")
    report(shapes.deeplabv3plus_shapes(weights), eval_dir)  # scores the shipped float16 weights, as users get them
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
