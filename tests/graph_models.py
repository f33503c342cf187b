"""Tiny models whose ONNX graph is not one PyTorch op per node, with one hand edit each (issue: culprits there).

Each case is a model, the input shape it is compared at, how it is exported, and an edit of
the exported file that changes one node (or region); `expected` is the node the culprit must
be named at. The clean export of every case is its twin: it must pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from culprit_models import node, scale_initializer, set_attribute
from onnx import helper, numpy_helper
from torch import nn

from trtdiff.source.inputs import make_inputs


class IfBranch(nn.Module):
    """A scripted `if` on a tensor: the then-branch holds a Conv whose weights live in the outer graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.inner = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if bool(y.mean() > -100.0):
            y = self.inner(torch.relu(y)) * 2.0
        else:
            y = y + 1.0
        return self.head(y)


class LoopNet(nn.Module):
    """A scripted `for` over a count read from the input (one step per channel): exported as an ONNX Loop."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        for _ in range(x.size(1)):
            y = torch.relu(y) * 0.5 + 1.0
        return self.head(y)


class GroupNormNet(nn.Module):
    """GroupNorm, which the TorchScript exporter writes as InstanceNormalization + Reshape + Mul + Add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.head = nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            self.norm.weight.copy_(torch.linspace(0.5, 1.5, 8))
            self.norm.bias.copy_(torch.linspace(-0.2, 0.2, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x))))


class ReflectPad(nn.Module):
    """A reflect Pad in front of a Conv: the Pad has no PyTorch op of its own kind in the recording."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (1, 1, 1, 1), mode="reflect"))


class RoundToInt(nn.Module):
    """round(x * 4) as int64, back to float: an integer tensor PyTorch computed too."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = torch.round(x * 4.0).to(torch.int64)
        return self.conv(steps.to(torch.float32) / 4.0)


class ArgmaxGather(nn.Module):
    """An integer path: argmax over channels picks which feature to keep."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.conv(x)
        index = features.argmax(dim=1, keepdim=True)
        return torch.gather(features, 1, index) * 2.0


class BakedBatch(nn.Module):
    """`int(y.size(0))` in a reshape: the trace writes the batch as a constant (`baked=False`: kept symbolic).

    A softmax over the reshaped rows, then back to the conv's shape: at another batch than
    exported the baked graph's softmax runs over both samples at once, with no error raised.
    """

    def __init__(self, baked: bool = True) -> None:
        super().__init__()
        self.baked = baked
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        batch = int(y.size(0)) if self.baked else y.size(0)
        return self.head(y.reshape(batch, 4, -1).softmax(-1).reshape(y.shape))


def _seeded(model: nn.Module) -> nn.Module:
    return model.eval()


# The hand edits; each returns the name of the node the culprit must be named at.


def _replace_scalar(graph: onnx.GraphProto, old: float, new: float) -> bool:
    """Replace the float scalar `old` (a Constant node or an initializer of `graph`) by `new`; whether one was."""
    for inner in graph.node:
        if inner.op_type == "Constant":
            value = numpy_helper.to_array(inner.attribute[0].t)
            if value.dtype.kind == "f" and value.size == 1 and float(value) == old:
                inner.attribute[0].t.CopyFrom(numpy_helper.from_array(np.full_like(value, new)))
                return True
    for init in graph.initializer:
        value = numpy_helper.to_array(init)
        if value.dtype.kind == "f" and value.size == 1 and float(value) == old:
            init.CopyFrom(numpy_helper.from_array(np.full_like(value, new), init.name))
            return True
    return False


def if_then_constant(model: onnx.ModelProto) -> str:
    """The then-branch's `* 2.0` becomes `* 2.5`: a fault inside an If branch, named at the If."""
    target = node(model, "If")
    then = next(a.g for a in target.attribute if a.name == "then_branch")
    assert _replace_scalar(then, 2.0, 2.5), "no constant 2.0 in the then-branch"
    return target.name


def head_scaled(model: onnx.ModelProto) -> str:
    """The head Conv's weights x1.5, after an If: the If must not break the culprit pass."""
    target = [n for n in model.graph.node if n.op_type == "Conv"][-1]  # a scripted model's nodes carry no module scope
    scale_initializer(model, target.input[1], 1.5)
    return target.name


def loop_body_constant(model: onnx.ModelProto) -> str:
    """The loop body's `* 0.5` becomes `* 0.6`: a fault inside a Loop, named at the Loop as a whole."""
    target = node(model, "Loop")
    body = next(a.g for a in target.attribute if a.name == "body")
    assert _replace_scalar(body, 0.5, 0.6), "no constant 0.5 in the loop body"
    return target.name


def groupnorm_gamma(model: onnx.ModelProto) -> str:
    """GroupNorm's per-channel scale x1.5 (the Mul after the InstanceNormalization): named at the region's output."""
    mul = node(model, "Mul", "/norm/")
    for name in mul.input:
        if any(i.name == name for i in model.graph.initializer):
            scale_initializer(model, name, 1.5)
            break
    else:
        producer = next(n for n in model.graph.node if n.op_type == "Constant" and set(n.output) & set(mul.input))
        value = numpy_helper.to_array(producer.attribute[0].t)
        producer.attribute[0].t.CopyFrom(numpy_helper.from_array((value * 1.5).astype(value.dtype)))
    return node(model, "Add", "/norm/").name


def groupnorm_epsilon(model: onnx.ModelProto) -> str:
    """The InstanceNormalization inside GroupNorm takes epsilon 0.5: an edit inside the region, named at its output."""
    set_attribute(node(model, "InstanceNormalization", "/norm/"), "epsilon", 0.5)
    return node(model, "Add", "/norm/").name


def pad_constant(model: onnx.ModelProto) -> str:
    """reflect -> constant: the Pad is the culprit, not the Conv after it."""
    target = node(model, "Pad")
    set_attribute(target, "mode", "constant")
    return target.name


def round_removed(model: onnx.ModelProto) -> str:
    """The Round before the int64 Cast is bypassed: the Cast truncates where PyTorch rounded."""
    round_node = node(model, "Round")
    cast = next(n for n in model.graph.node if n.op_type == "Cast" and round_node.output[0] in n.input)
    cast.input[0] = round_node.input[0]
    model.graph.node.remove(round_node)
    return cast.name


def argmax_to_argmin(model: onnx.ModelProto) -> str:
    target = node(model, "ArgMax")
    target.op_type = "ArgMin"
    return target.name


@dataclass(frozen=True)
class Case:
    """One kind of fault: the model, its input shape, the export, the edit, and dynamic axes where any."""

    name: str
    build: Callable[[], nn.Module]
    shape: str
    edit: Callable[[onnx.ModelProto], str]
    opset: int = 13
    scripted: bool = False
    run_shape: str | None = None  # compared at another shape than exported (a dynamic axis)


CASES = (
    Case("if-branch", IfBranch, "1x3x16x16", if_then_constant, scripted=True),
    Case("if-then-head", IfBranch, "1x3x16x16", head_scaled, scripted=True),
    Case("loop-body", LoopNet, "1x3x16x16", loop_body_constant, scripted=True),
    Case("loop-then-head", LoopNet, "1x3x16x16", head_scaled, scripted=True),
    Case("groupnorm", GroupNormNet, "1x3x16x16", groupnorm_gamma),
    Case("groupnorm-epsilon", GroupNormNet, "1x3x16x16", groupnorm_epsilon),
    Case("pad-mode", ReflectPad, "1x3x16x16", pad_constant),
    Case("cast-truncates", RoundToInt, "1x3x16x16", round_removed),
    Case("argmax", ArgmaxGather, "1x3x16x16", argmax_to_argmin),
)


def export_case(case: Case, folder: Path, dynamic_batch: bool = False) -> Path:
    """The clean export of `case` (TorchScript exporter; scripted first where the case has control flow)."""
    torch.manual_seed(0)
    model = _seeded(case.build())
    example = torch.from_numpy(make_inputs(["x"], shapes=[case.shape], seed=0)["x"])
    exported: nn.Module = torch.jit.script(model) if case.scripted else model
    path = folder / f"{case.name}.onnx"
    axes = {"x": {0: "batch"}} if dynamic_batch else None
    torch.onnx.export(
        exported, (example,), str(path), opset_version=case.opset, dynamo=False, input_names=["x"], dynamic_axes=axes
    )
    return path


__all__ = ["CASES", "BakedBatch", "Case", "export_case", "helper"]
