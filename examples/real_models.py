"""Try trtdiff on real library models (random weights) where timm, torchvision and transformers exist.

    PYTHONPATH=$PWD python3 examples/real_models.py --out results.jsonl [--models convnext_atto,...]

Each model is exported at opset 17 (TorchScript exporter) and 18 (dynamo) and compared with
ONNX Runtime, in FP32 or, with `--precision fp16`, in FP16 (the worst noise ratio, accumulated
and of a node alone, is then recorded too); one JSON line per run: passed, the paired share of
float tensors, culprits, first divergence, seconds. A clean export of a correct model must pass: any failure here
is a false alarm to fix. Nothing is downloaded (random weights).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

SHAPE = "1x3x224x224"


def _timm(name: str, **kwargs: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, **kwargs)

    return build


def _torchvision(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        return getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)

    return build


def _segformer() -> torch.nn.Module:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    config = SegformerConfig(num_labels=5, hidden_sizes=[16, 32, 64, 128], decoder_hidden_size=64)
    model = SegformerForSemanticSegmentation(config)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=x).logits

    return Logits()


def _encoder_layer() -> torch.nn.Module:
    """PyTorch's own TransformerEncoderLayer behind a patch embedding (issue 38's first model)."""

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = torch.nn.Conv2d(3, 32, 4, stride=4)
            self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.head = torch.nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.layer(self.patch(x).flatten(2).transpose(1, 2)))

    return Block()


def _smp(encoder: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import segmentation_models_pytorch as smp

        return smp.DeepLabV3Plus(encoder_name=encoder, encoder_weights=None, classes=5)

    return build


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], str]] = {
    "resnet18": (_timm("resnet18"), SHAPE),
    "mobilenetv3_small_100": (_timm("mobilenetv3_small_100"), SHAPE),
    "efficientnet_b0": (_timm("efficientnet_b0"), SHAPE),
    "convnext_atto": (_timm("convnext_atto"), SHAPE),
    "vit_tiny_patch16_224": (_timm("vit_tiny_patch16_224"), SHAPE),
    "swin_tiny_patch4_window7_224": (_timm("swin_tiny_patch4_window7_224"), SHAPE),
    "deeplabv3_mobilenet_v3_large": (_torchvision("deeplabv3_mobilenet_v3_large"), "1x3x256x256"),
    "segformer": (_segformer, "1x3x128x128"),
    "resnet50": (_timm("resnet50"), SHAPE),
    "convnext_tiny": (_timm("convnext_tiny"), SHAPE),
    "vit_small_patch16_224": (_timm("vit_small_patch16_224"), SHAPE),
    "deeplabv3_resnet50": (_torchvision("deeplabv3_resnet50"), "1x3x512x512"),
    "lraspp_mobilenet_v3_large": (_torchvision("lraspp_mobilenet_v3_large"), "1x3x512x512"),
    "smp_deeplabv3plus_resnet101": (_smp("resnet101"), "1x3x512x512"),
    "smp_deeplabv3plus_mobilenet_v2": (_smp("mobilenet_v2"), "1x3x512x512"),
    "transformer_encoder_layer": (_encoder_layer, "1x3x32x32"),
}


def run_one(name: str, opset: int, exporter: str, device: str, precision: str = "fp32") -> dict[str, Any]:
    import trtdiff

    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    started = time.perf_counter()
    try:
        report = trtdiff.compare(
            model,
            input_shapes=[shape],
            opset=opset,
            exporter=exporter,
            torch_device=device,
            backends=["torch", "onnxruntime"],
            precision=precision,
        )
    except Exception as error:  # noqa: BLE001 - a survey: record and go on
        return {
            "model": name,
            "opset": opset,
            "exporter": exporter,
            "error": f"{type(error).__name__}: {error}",
            "trace": traceback.format_exc()[-1500:],
        }
    pairing = report.pairing
    first = report.first_divergence
    return {
        "model": name,
        "opset": report.opset,
        "exporter": report.exporter,
        "device": device,
        "passed": report.passed,
        "paired": f"{pairing.float_paired}/{pairing.float_tensors}",
        "share": round(pairing.float_paired / max(pairing.float_tensors, 1), 3),
        "culprits": [c.onnx_node for c in report.culprits],
        "first_divergence": f"{first.onnx_node} ({first.op_type})" if first else None,
        "diverged_layers": sum(layer.diverged for layer in report.layers),
        "seconds": round(time.perf_counter() - started, 1),
        "precision": precision,
        "noise_ratio": _worst(m.noise_ratio for layer in report.layers for m in layer.pairs.values()),
        "local_noise_ratio": _worst(m.noise_ratio for layer in report.layers for m in (layer.local or {}).values()),
    }


def _worst(ratios: Any) -> float | None:
    found = [r for r in ratios if r is not None]
    return round(max(found), 2) if found else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", default="17:torchscript,18:dynamo")
    parser.add_argument("--device", default="cpu", help="where the PyTorch reference runs")
    parser.add_argument("--out", default="real_models.jsonl")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "fp16"])
    args = parser.parse_args()
    with open(args.out, "w") as out:
        for name in args.models.split(","):
            for run in args.runs.split(","):
                opset, exporter = run.split(":")
                result = run_one(name, int(opset), exporter, args.device, args.precision)
                print(json.dumps({k: v for k, v in result.items() if k != "trace"}), flush=True)
                out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
