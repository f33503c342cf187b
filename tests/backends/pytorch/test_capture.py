"""trtdiff.backends.pytorch.capture: the PyTorch reference, every computing aten op recorded once, with module paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from trtdiff.backends.pytorch.capture import TorchCapture, capture, run_outputs
from trtdiff.backends.store import TensorStore
from trtdiff.errors import ModelRunError, OptionError


class Net(nn.Module):
    """conv -> batch norm -> in-place ReLU -> conv, plus a Softshrink (no aten kind) and an add at the top level."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 2, 1)
        self.act = nn.Softshrink(0.1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv2(self.relu(self.bn(self.conv1(x))))
        return y, self.act(y) + 1.0


def _net() -> Net:
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # batch norm statistics that move the values (so ReLU zeroes some)
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


FEEDS = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}


@pytest.fixture(scope="module")
def net() -> Net:
    return _net()


@pytest.fixture(scope="module")
def captured(net: Net) -> TorchCapture:
    return capture(net, FEEDS)


def _expected(net: Net) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        x = torch.from_numpy(FEEDS["x"].copy())
        conv1 = net.conv1(x)
        bn = net.bn(conv1)
        relu = torch.relu(bn)
        conv2 = net.conv2(relu)
        shrunk = nn.functional.softshrink(conv2, 0.1)
        return {"conv1": conv1, "bn": bn, "relu": relu, "conv2": conv2, "act": shrunk, "add": shrunk + 1.0}


def test_every_computing_op_is_recorded_with_its_module_path(captured: TorchCapture) -> None:
    summary = [(r.index, r.kind, r.module_path) for r in captured.records]
    assert summary == [
        (0, "conv", "conv1"),
        (1, "batch_norm", "bn"),
        (2, "relu", "relu"),
        (3, "conv", "conv2"),
        (4, "module", "act"),
        (5, "add", ""),
    ]
    ops = [r.op for r in captured.records]
    assert ops[0] == ops[3] == "aten.convolution.default" and ops[2] == "aten.relu_.default"
    assert ops[4] == "module:Softshrink" and ops[5].startswith("aten.add")
    assert captured.paths_known and captured.device == "cpu"
    assert all(r.shape == ((1, 4, 8, 8) if r.index < 3 else (1, 2, 8, 8)) for r in captured.records)
    assert {r.dtype for r in captured.records} == {"float32"}
    assert [r.key for r in captured.records] == [f"torch:{i}" for i in range(6)]


def test_inputs_and_consumers_follow_the_data_flow(captured: TorchCapture) -> None:
    assert [r.inputs for r in captured.records] == [(), (0,), (1,), (2,), (), (4,)]
    assert captured.consumers == {0: [1], 1: [2], 2: [3], 4: [5]}


def test_module_calls_name_each_submodule_and_the_record_of_its_output(captured: TorchCapture) -> None:
    calls = [(c.path, c.type_name, c.output_record) for c in captured.module_calls]
    assert calls == [
        ("conv1", "Conv2d", 0),
        ("bn", "BatchNorm2d", 1),
        ("relu", "ReLU", 2),
        ("conv2", "Conv2d", 3),
        ("act", "Softshrink", 4),
    ]


def test_recorded_values_equal_the_forward_intermediates(net: Net, captured: TorchCapture) -> None:
    expected = _expected(net)
    for record, name in zip(captured.records, ["conv1", "bn", "relu", "conv2", "act", "add"], strict=True):
        np.testing.assert_allclose(
            captured.value(record.key), expected[name].numpy(), rtol=1e-6, atol=1e-6, err_msg=name
        )


def test_values_are_copied_before_in_place_ops_overwrite_them(net: Net, captured: TorchCapture) -> None:
    before_relu = captured.value("torch:1")
    after_relu = captured.value("torch:2")
    assert (before_relu < 0).any()  # ReLU(inplace=True) zeroed these in the very same tensor
    assert (after_relu >= 0).all()
    np.testing.assert_allclose(before_relu, _expected(net)["bn"].numpy(), rtol=1e-6, atol=1e-6)


def test_output_keys_hold_the_flattened_outputs(net: Net, captured: TorchCapture) -> None:
    assert captured.output_keys == ["torch:output:0", "torch:output:1"]
    assert captured.output_records == [3, 5]
    expected = _expected(net)
    np.testing.assert_allclose(captured.value("torch:output:0"), expected["conv2"].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(captured.value("torch:output:1"), expected["add"].numpy(), rtol=1e-6, atol=1e-6)


def test_values_go_to_the_given_store(net: Net) -> None:
    with TensorStore(memory_bytes=0) as store:  # everything spills to disk
        captured = capture(net, FEEDS, store=store)
        assert captured.store is store and len(store) == 6 + 2 and store.spilled == 8
        np.testing.assert_allclose(captured.value("torch:0"), _expected(net)["conv1"].numpy(), rtol=1e-6, atol=1e-6)


def test_hooks_are_removed_after_capture(net: Net, captured: TorchCapture) -> None:
    for module in net.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_a_traced_module_is_recorded_without_module_paths(net: Net) -> None:
    traced = torch.jit.trace(net, torch.from_numpy(FEEDS["x"]))
    captured = capture(traced, FEEDS)
    assert not captured.paths_known and captured.module_calls == []
    assert {r.module_path for r in captured.records} == {None}
    assert [r.kind for r in captured.records][:4] == ["conv", "batch_norm", "relu", "conv"]
    assert len(captured.output_keys) == 2


def test_tf32_flags_are_restored_after_the_pass(net: Net) -> None:
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        capture(net, FEEDS, tf32=True)
        run_outputs(net, [FEEDS["x"]], tf32=True)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


class Multi(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> dict[str, object]:
        return {"sum": a + b, "scale": 2, "prod": a * b}


def test_several_inputs_in_order_and_non_tensor_outputs_skipped() -> None:
    feeds = {"a": np.full((2,), 3.0, np.float32), "b": np.arange(2, dtype=np.float32)}
    captured = capture(Multi(), feeds)
    values = [captured.value(k) for k in captured.output_keys]
    assert len(values) == 2
    assert sorted(v.tolist() for v in values) == [[0.0, 3.0], [3.0, 4.0]]
    assert [r.kind for r in captured.records] == ["add", "mul"]


def test_run_outputs_returns_the_flattened_forward(net: Net) -> None:
    outputs = run_outputs(net, [FEEDS["x"]])
    expected = _expected(net)
    assert [o.shape for o in outputs] == [(1, 2, 8, 8), (1, 2, 8, 8)]
    np.testing.assert_allclose(outputs[0], expected["conv2"].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outputs[1], expected["add"].numpy(), rtol=1e-6, atol=1e-6)
    assert isinstance(outputs[0], np.ndarray)


class Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).view(7, -1)


def test_a_forward_that_raises_becomes_model_run_error() -> None:
    module = Broken().eval()
    with pytest.raises(ModelRunError, match=r"the model's forward raised RuntimeError: .*inputs x:1x3x8x8") as caught:
        capture(module, FEEDS)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert "\n" not in str(caught.value)
    for sub in module.modules():
        assert not sub._forward_hooks and not sub._forward_pre_hooks
    with pytest.raises(ModelRunError, match="the model's forward raised RuntimeError"):
        run_outputs(module, [FEEDS["x"]])


def test_wrong_input_count_becomes_model_run_error(net: Net) -> None:
    with pytest.raises(ModelRunError, match="TypeError"):
        capture(net, {"x": FEEDS["x"], "y": FEEDS["x"]})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error given where no GPU is visible")
def test_cuda_without_a_gpu_names_torch_device(net: Net) -> None:
    for call in (lambda: capture(net, FEEDS, device="cuda"), lambda: run_outputs(net, [FEEDS["x"]], device="cuda")):
        with pytest.raises(OptionError) as caught:
            call()
        assert (caught.value.parameter, caught.value.value) == ("torch_device", "cuda")


class InPlaceInput(nn.Module):
    """Scales its input in place, as some preprocessing inside forward() does."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2.0)
        return self.conv(x)


def test_capture_leaves_the_inputs_unchanged() -> None:
    feeds = {"x": np.ones((1, 3, 4, 4), np.float32)}
    capture(InPlaceInput().eval(), feeds)
    np.testing.assert_array_equal(feeds["x"], np.ones((1, 3, 4, 4), np.float32))


def test_run_outputs_leaves_the_inputs_unchanged() -> None:
    x = np.ones((1, 3, 4, 4), np.float32)
    run_outputs(InPlaceInput().eval(), [x])
    np.testing.assert_array_equal(x, np.ones((1, 3, 4, 4), np.float32))


class WritesThroughAView(nn.Module):
    """A convolution whose output is then zeroed in part through a view, in place."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y[:, :2].mul_(0.0)
        return y + 1.0


def test_a_value_kept_uncopied_is_copied_before_an_in_place_write_through_a_view() -> None:
    torch.manual_seed(0)
    model = WritesThroughAView().eval()
    captured = capture(model, FEEDS)
    conv = next(r for r in captured.records if r.kind == "conv")
    with torch.no_grad():
        expected = model.conv(torch.from_numpy(FEEDS["x"])).numpy()
    np.testing.assert_array_equal(captured.value(conv.key), expected)  # as the conv made it, not as zeroed later
    assert (expected[:, :2] != 0).any()


def test_what_visit_runs_is_not_recorded_as_the_models_ops() -> None:
    """A module's output is shown to `visit` from its forward hook, inside the recorder: torch work done there
    (the metrics on a GPU) must not become records, or every later record is shifted."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, batch_first=True).eval()

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = attention

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.attn(x, x, x, need_weights=False)[0]

    inputs = {"x": np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32)}
    plain = capture(Block(), inputs, attention="decomposed")
    seen: list[str] = []

    def visit(key: str, value: torch.Tensor) -> None:  # torch work, as the GPU metrics do
        seen.append(key)
        (value.double() - value.double()).abs().max().item()

    visited = capture(Block(), inputs, attention="decomposed", visit=visit, keep=frozenset())
    assert [r.op for r in visited.records] == [r.op for r in plain.records]
    assert any(r.kind == "module" for r in plain.records)  # the hook's path is exercised
    assert seen == [r.key for r in plain.records] + list(plain.output_keys)


def test_an_archive_records_the_same_ops_every_time_even_where_torchscript_would_fuse() -> None:
    """TorchScript's executor profiles an archive's first run and fuses later ones (on a GPU by default; here the
    CPU fuser is switched on to stand in for it): every recording must see the plain graph's ops, the same each time."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval()
    x = torch.randn(1, 3, 16, 16)
    archive = torch.jit.trace(model, x)
    was_on = torch._C._jit_can_fuse_on_cpu()
    torch._C._jit_override_can_fuse_on_cpu(True)
    try:
        runs = [[r.op for r in capture(archive, {"x": x.numpy()}, attention="decomposed").records] for _ in range(3)]
        outputs = [run_outputs(archive, [x.numpy()]) for _ in range(2)]
    finally:
        torch._C._jit_override_can_fuse_on_cpu(was_on)
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 4
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])


def test_a_traced_convolution_runs_with_tf32_as_asked_not_as_baked_in() -> None:
    """A trace writes allow_tf32=True into aten::_convolution; on a GPU ConvolutionTf32 (entered by every forward
    trtdiff runs there) rewrites it to the --tf32 choice. Checked here by what the next mode down receives."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from trtdiff.backends.pytorch.capture import ConvolutionTf32

    archive = torch.jit.trace(nn.Conv2d(3, 4, 3).eval(), torch.randn(1, 3, 8, 8))
    seen: list[bool] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten._convolution.default:
                seen.append(args[-1])
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Spy():
        archive(torch.randn(1, 3, 8, 8))
        with ConvolutionTf32(False):
            archive(torch.randn(1, 3, 8, 8))
        with ConvolutionTf32(True):
            archive(torch.randn(1, 3, 8, 8))
    assert seen == [True, False, True]


@pytest.mark.parametrize("given", ["module", "archive"])
def test_what_visit_raises_is_raised_as_it_is_not_as_the_models_error(given: str) -> None:
    """A streamed recording runs the ONNX backends' segments from `visit` (analysis.engine): their failure is theirs
    to report, not "the model's forward raised", in an eager module and inside a TorchScript archive alike."""
    from trtdiff.errors import BackendError

    model = _net() if given == "module" else torch.jit.trace(_net(), torch.from_numpy(FEEDS["x"]))
    failure = BackendError("ONNX Runtime failed at the third node")

    def visit(key: str, value: torch.Tensor) -> None:
        if key == "torch:1":
            raise failure

    with pytest.raises(BackendError) as caught:
        capture(model, FEEDS, attention="fused", visit=visit, keep=frozenset())
    assert caught.value is failure
