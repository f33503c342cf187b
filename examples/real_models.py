"""Try trtdiff on real library models (random weights) where timm, torchvision and transformers exist.

    PYTHONPATH=$PWD python3 examples/real_models.py --out results.jsonl [--models convnext_atto,...]

Each model is exported at opset 17 (TorchScript exporter) and 18 (dynamo) and compared with
ONNX Runtime, in FP32 or, with `--precision fp16`, in FP16 (the worst noise ratio, accumulated
and of a node alone, is then recorded too); one JSON line per run: passed, the paired share of
float tensors, culprits, first divergence, seconds. A clean export of a correct model must pass: any failure here
is a false alarm to fix. Nothing is downloaded (random weights). The decoders (`gpt2_kv_cache`, `llama_kv_cache`)
are one step of a small GPT-2 and Llama from transformers' own classes with the KV cache as inputs (int64 token
and position ids). `--calibrate-bn` measures each BatchNorm's statistics on random inputs first, as training
leaves them (calibrate_batch_norm): without it a deep network of random weights can hold values no FP16 can.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
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


class _CachedStep(torch.nn.Module):
    """One decoding step of a Hugging Face causal LM with its KV cache as inputs (issue 38): token ids, int64
    position ids and the past keys/values stacked in one tensor (layers, key|value, batch, heads, tokens, dim);
    out: the logits and the present keys/values, stacked the same way."""

    def __init__(self, model: torch.nn.Module, layers: int) -> None:
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, past: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[i, 0], past[i, 1], i)
        mask = torch.ones(input_ids.shape[0], past.shape[-2] + input_ids.shape[1], dtype=torch.int64)
        out = self.model(
            input_ids=input_ids, position_ids=position_ids, past_key_values=cache, attention_mask=mask, use_cache=True
        )
        cache = out.past_key_values
        layers = getattr(cache, "layers", None)  # transformers >= 4.56; before: key_cache and value_cache
        kv = [
            (layers[i].keys, layers[i].values) if layers is not None else (cache.key_cache[i], cache.value_cache[i])
            for i in range(self.layers)
        ]
        return out.logits, torch.stack([torch.stack(pair) for pair in kv])


def _decoder(kind: str) -> Callable[[], torch.nn.Module]:
    """A small GPT-2 or Llama (2 layers, width 64; Llama with grouped-query attention and rotary positions)."""

    def build() -> torch.nn.Module:
        import transformers as hf

        if kind == "gpt2":
            config = hf.GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4)
            return _CachedStep(hf.GPT2LMHeadModel(config), 2)
        config = hf.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64,
        )  # fmt: skip
        return _CachedStep(hf.LlamaForCausalLM(config), 2)

    return build


def _decoder_inputs(heads: int, dim: int) -> Callable[[Path], Path]:
    """Inputs of one 3-token step after a 5-token prompt, as an .npz keyed by input name (`--input`)."""

    def write(path: Path) -> Path:
        rng = np.random.default_rng(0)
        np.savez(
            path,
            input_ids=rng.integers(0, 128, (1, 3)),
            position_ids=np.arange(5, 8)[None],
            past=rng.standard_normal((2, 2, 1, heads, 5, dim), dtype=np.float32),
        )
        return path

    return write


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], str | Callable[[Path], Path]]] = {
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
    "gpt2_kv_cache": (_decoder("gpt2"), _decoder_inputs(4, 16)),
    "llama_kv_cache": (_decoder("llama"), _decoder_inputs(2, 16)),
}


def calibrate_batch_norm(model: torch.nn.Module, shape: str, batches: int = 4) -> torch.nn.Module:
    """`model` with each BatchNorm's running statistics measured on random inputs, as training leaves them.

    A BatchNorm as constructed holds mean 0 and variance 1, whatever its input: through a deep network of random
    weights the values then grow layer by layer (smp's DeepLabV3+ ResNet-101 reaches 81,359, past float16's
    range), where a trained network's BatchNorms keep them near unit scale. Measuring the statistics (a cumulative
    average over `batches` forwards in training mode, no weight changed) gives random weights a trained network's
    scale of values."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average
    sizes = [int(d) for d in shape.split("x")]
    sizes[0] = max(sizes[0], 2)  # a pooled branch (ASPP's) holds one value per channel and sample: two samples
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(*sizes))
    return model.eval()


def run_one(
    name: str, opset: int, exporter: str, device: str, precision: str = "fp32", calibrate: bool = False
) -> dict[str, Any]:
    import trtdiff

    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    if calibrate and isinstance(shape, str):
        model = calibrate_batch_norm(model, shape)
    started = time.perf_counter()
    try:
        feeds = {"input_shapes": [shape]} if isinstance(shape, str) else {"input_files": [str(shape(_scratch()))]}
        report = trtdiff.compare(
            model,
            **feeds,
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
        "calibrated": calibrate,
        "noise_ratio": _worst(m.noise_ratio for layer in report.layers for m in layer.pairs.values()),
        "local_noise_ratio": _worst(m.noise_ratio for layer in report.layers for m in (layer.local or {}).values()),
    }


def _scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="real_models.")) / "inputs.npz"


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
    parser.add_argument(
        "--calibrate-bn", action="store_true", help="measure BatchNorm statistics first (calibrate_batch_norm)"
    )
    args = parser.parse_args()
    with open(args.out, "w") as out:
        for name in args.models.split(","):
            for run in args.runs.split(","):
                opset, exporter = run.split(":")
                result = run_one(name, int(opset), exporter, args.device, args.precision, args.calibrate_bn)
                print(json.dumps({k: v for k, v in result.items() if k != "trace"}), flush=True)
                out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
