"""Tiny models and ONNX hand edits for the culprit tests (tests/analysis/test_culprits.py, test_pairing_composite.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper
from torch import nn

from trtdiff.source.export import export_onnx
from trtdiff.source.inputs import make_inputs
from trtdiff.source.loading import from_module

CNN_SHAPE = "1x3x64x64"
BLOCK_SHAPE = "1x16x32"
CHAIN_SHAPE = "1x8x16x16"


def _randomize_norms(model: nn.Module) -> None:
    """BatchNorm statistics and affine parameters away from their defaults, so folding them matters."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


class ConvBnRelu(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class TwiceRelu(nn.Module):
    """Two conv-bn pairs sharing one ReLU module (called twice: relu, then relu_1 in ONNX names)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + x)


class SmallCNN(nn.Module):
    """stem (stride 2) -> block (ReLU twice) -> down (stride 2) -> bilinear x2 -> add skip -> head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBnRelu(3, 8, stride=2)
        self.block = TwiceRelu(8)
        self.down = ConvBnRelu(8, 8, stride=2)
        self.fuse = ConvBnRelu(8, 8)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.block(self.stem(x))
        y = self.down(skip)
        y = F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.head(self.fuse(y + skip))


class TransformerBlock(nn.Module):
    """Pre-norm block: LayerNorm, q/k/v, attention written out (matmul, softmax), projection, GELU MLP."""

    def __init__(self, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(dim // heads)
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ln1(x)
        dh = d // self.heads  # a traced int: reshapes only, the scale is a Python float (no TracerWarning)
        q = self.q(h).reshape(b, t, self.heads, dh).transpose(1, 2)
        k = self.k(h).reshape(b, t, self.heads, dh).transpose(1, 2)
        v = self.v(h).reshape(b, t, self.heads, dh).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        attention = torch.softmax(scores, dim=-1)
        y = torch.matmul(attention, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class ConvChain(nn.Module):
    """Twelve bias-free 3x3 convolutions with ReLU: deep enough for tiny per-layer errors to add up."""

    def __init__(self, channels: int = 8, depth: int = 12) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1, bias=False) for _ in range(depth))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = self.relu(conv(x))
        return x


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "hardswish": F.hardswish,
}
ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "gelu": nn.GELU,
    "gelu-tanh": lambda: nn.GELU(approximate="tanh"),
    "silu": nn.SiLU,
    "hardswish": nn.Hardswish,
}


class ConvMlp(nn.Module):
    """ConvNeXt's block: depthwise conv, channels last, LayerNorm, Linear, activation, Linear on the permuted map.

    `functional` calls F.layer_norm and the activation function (no module of their own),
    else nn.LayerNorm and the activation's module.
    """

    def __init__(self, act: str = "gelu", functional: bool = False, dim: int = 16) -> None:
        super().__init__()
        self.act_name, self.functional = act, functional
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = ACTIVATION_MODULES[act]()
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        if self.functional:
            y = F.layer_norm(y, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
            y = ACTIVATIONS[self.act_name](self.fc1(y))
        else:
            y = self.act(self.fc1(self.norm(y)))
        return x + self.fc2(y).permute(0, 3, 1, 2)


MLP_SHAPE = "1x16x8x8"


def conv_mlp(act: str = "gelu", functional: bool = False) -> nn.Module:
    torch.manual_seed(0)
    model = ConvMlp(act, functional)
    with torch.no_grad():  # LayerNorm affine parameters away from 1 and 0
        model.norm.weight.add_(torch.randn_like(model.norm.weight) * 0.2)
        model.norm.bias.add_(torch.randn_like(model.norm.bias) * 0.1)
    return model.eval()


class ConvReluHead(nn.Module):
    """Conv, ReLU, a 1x1 conv head: the smallest model with layers to pair (input 1x3x8x8); `flat` flattens the
    output, so that it is no (N, C, H, W) map and has no mIoU."""

    def __init__(self, flat: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Conv2d(4, 2, 1)
        self.flat = flat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(self.relu(self.conv(x)))
        return y.flatten(1) if self.flat else y


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    model = SmallCNN()
    with torch.no_grad():
        _randomize_norms(model)
    return model.eval()


def transformer_block() -> nn.Module:
    torch.manual_seed(0)
    model = TransformerBlock()
    with torch.no_grad():  # LayerNorm affine parameters away from 1 and 0
        for norm in (model.ln1, model.ln2):
            norm.weight.add_(torch.randn_like(norm.weight) * 0.2)
            norm.bias.add_(torch.randn_like(norm.bias) * 0.1)
    return model.eval()


def conv_chain() -> nn.Module:
    torch.manual_seed(0)
    model = ConvChain()
    with torch.no_grad():  # near-orthogonal scale: activations keep their magnitude along the chain
        for conv in model.convs:
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
    return model.eval()


def export(model: nn.Module, shape: str, path: Path, opset: int, exporter: str = "torchscript") -> Path:
    """Export `model` for the seeded random input of `shape` (what trtdiff compares on)."""
    feeds = make_inputs(["x"], shapes=[shape], seed=0)
    export_onnx(from_module(model), feeds, opset=opset, exporter=exporter, path=path)
    return path


def save_archive(model: nn.Module, shape: str, path: Path) -> Path:
    """The model traced and saved as a TorchScript archive."""
    example = torch.from_numpy(make_inputs(["x"], shapes=[shape], seed=0)["x"])
    with torch.no_grad():
        traced = torch.jit.trace(model, (example,))
    torch.jit.save(traced, str(path))
    return path


def edited(source: Path, path: Path, edit: Callable[[onnx.ModelProto], str]) -> tuple[Path, str]:
    """`source` with `edit` applied, saved to `path`; the edited node's name."""
    model = onnx.load(str(source))
    name = edit(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path, name


def node(model: onnx.ModelProto, op_type: str, name_contains: str = "", index: int = 0) -> onnx.NodeProto:
    """The `index`-th node of `op_type` whose name contains `name_contains`."""
    found = [n for n in model.graph.node if n.op_type == op_type and name_contains in n.name]
    if len(found) <= index:
        names = [n.name for n in model.graph.node if n.op_type == op_type]
        raise AssertionError(f"no {op_type} #{index} with {name_contains!r} in its name; {op_type} nodes: {names}")
    return found[index]


def set_attribute(target: onnx.NodeProto, name: str, value: object) -> None:
    kept = [a for a in target.attribute if a.name != name]
    del target.attribute[:]
    target.attribute.extend([*kept, helper.make_attribute(name, value)])


def initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(i for i in model.graph.initializer if i.name == name)


def scale_initializer(model: onnx.ModelProto, name: str, factor: float) -> None:
    init = initializer(model, name)
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), name))


# The hand edits; each returns the edited node's name.


def dilate_first_conv(model: onnx.ModelProto) -> str:
    """Give the first Conv dilation 2 (and the padding that keeps its shape): a wrong file at one node."""
    target = node(model, "Conv")
    set_attribute(target, "dilations", [2, 2])
    set_attribute(target, "pads", [2, 2, 2, 2])
    return target.name


def resize_asymmetric(model: onnx.ModelProto) -> str:
    target = node(model, "Resize")
    set_attribute(target, "coordinate_transformation_mode", "asymmetric")
    return target.name


def conv_scaled(model: onnx.ModelProto) -> str:
    target = node(model, "Conv", "/down/")
    scale_initializer(model, target.input[1], 1.03)
    return target.name


def second_relu_leaky(model: onnx.ModelProto) -> str:
    target = node(model, "Relu", "/block/relu_1/")
    target.op_type = "LeakyRelu"
    set_attribute(target, "alpha", 0.1)
    return target.name


def layernorm_epsilon(model: onnx.ModelProto) -> str:
    """ln1's epsilon 1e-5 -> 1e-1: the LayerNormalization node, or the Add of the decomposed form."""
    fused = [n for n in model.graph.node if n.op_type == "LayerNormalization" and "/ln1/" in n.name]
    if fused:
        set_attribute(fused[0], "epsilon", 0.1)
        return fused[0].name
    add = next(n for n in model.graph.node if n.op_type == "Add" and "/ln1/" in n.name)
    for name in add.input:
        producer = next((n for n in model.graph.node if name in n.output and n.op_type == "Constant"), None)
        if producer is not None:
            value = helper.get_attribute_value(producer.attribute[0])
            producer.attribute[0].t.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(value), 0.1)))
            return add.name
        if any(i.name == name for i in model.graph.initializer):
            init = initializer(model, name)
            init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), 0.1), name))
            return add.name
    raise AssertionError(f"{add.name} adds no constant epsilon")


def softmax_to_sigmoid(model: onnx.ModelProto) -> str:
    target = node(model, "Softmax")
    target.op_type = "Sigmoid"
    del target.attribute[:]
    return target.name
