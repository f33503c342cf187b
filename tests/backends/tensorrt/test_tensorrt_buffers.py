"""Device and host memory for TensorRT (buffers.py) without TensorRT: what runs on any CUDA GPU too.

These need no TensorRT module (the listener's and allocator's logic lives in plain classes),
so on a GPU machine that TensorRT-RTX refuses (the H200) they still run on real device memory
and real CUDA streams; the GPU tests skip with the reason where torch sees no CUDA GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trtdiff.backends.tensorrt import buffers  # noqa: E402
from trtdiff.errors import BackendError  # noqa: E402

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")


def test_inputs_are_staged_at_non_null_addresses() -> None:
    """Defect 4: an empty input has data_ptr() 0 in torch; it is staged like an output instead."""
    assert torch.from_numpy(np.zeros((0, 3), np.float32)).data_ptr() == 0  # why staging is needed
    empty, address = buffers.stage_input(np.zeros((0, 3), np.float32), torch.float32, CPU)
    assert address != 0 and tuple(empty.shape) == (0, 3)
    values, address = buffers.stage_input(np.arange(6, dtype=np.float64).reshape(2, 3), torch.float32, CPU)
    assert address == values.data_ptr() and values.dtype == torch.float32 and values.tolist()[1] == [3, 4, 5]
    scalar, address = buffers.stage_input(np.array(7, np.int64), torch.int64, CPU)
    assert address != 0 and scalar.shape == () and int(scalar) == 7
    flags, _ = buffers.stage_input(np.array([True, False]), torch.bool, CPU)
    assert flags.tolist() == [True, False]


def test_host_debug_copy_without_cuda_and_unresolved_shapes() -> None:
    """Defect 5 on the CPU: the wait before a host read is a no-op for stream 0 where there is no CUDA."""
    buffers.synchronize(0)
    host = np.arange(4, dtype=np.int64)
    assert buffers.copy_debug_tensor(host.ctypes.data, "INT64", (4,), 0, on_host=True).tolist() == [0, 1, 2, 3]
    with pytest.raises(BackendError, match="unresolved dimensions"):
        buffers.copy_debug_tensor(host.ctypes.data, "INT64", (-1,), 0, on_host=True)
    with pytest.raises(BackendError, match="type FP4: no torch equivalent"):
        buffers.copy_debug_tensor(host.ctypes.data, "FP4", (4,), 0, on_host=True)


def test_collector_and_output_buffers_never_raise() -> None:
    """Defects 1 and 2: what TensorRT's callbacks do, recorded instead of raised (its wrapper would drop it)."""
    collector = buffers.DebugCollector()
    host = np.arange(3, dtype=np.float32)
    assert collector.process(host.ctypes.data, True, "FLOAT", (3,), "ok", 0)
    assert not collector.process(host.ctypes.data, True, "FLOAT", (-1,), "bad", 0)
    assert collector.process(host.ctypes.data, True, "INT4", (3,), "int4", 0)
    assert set(collector.tensors) == {"ok"} and len(collector.errors) == 1 and "int4" in collector.skipped
    outputs = buffers.OutputBuffers(CPU)
    assert outputs.reallocate("big", 1 << 62, 256) == 0 and outputs.errors[0].startswith("big: ")
    address = outputs.reallocate("t", 12, 64)
    assert address != 0 and address % 64 == 0
    outputs.notify("t", (3,))
    outputs.buffers["t"].view(torch.int32)[:] = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert outputs.result("t", torch.int32).tolist() == [1, 2, 3]
    outputs.notify("t", (5,))  # more than TensorRT asked memory for: not read past the buffer
    assert outputs.result("t", torch.int32) is None
    outputs.release()
    assert outputs.buffers == {}


def test_a_streamed_run_hands_each_wanted_copy_over_and_a_failed_one_gives_its_room_back() -> None:
    """One run per sample: with a sink the listener keeps nothing itself; unwanted tensors are never copied."""
    from trtdiff.backends.tensorrt.stream import TensorStream

    stream: TensorStream[object] = TensorStream(64, {"t0": "a", "t1": "b", "bad": "c", "dev": "d"}.get)
    collector = buffers.DebugCollector(budget=16)  # an unfused session's collector: group None copies every tensor
    collector.start(None, stream)
    memory = np.arange(4, dtype=np.float32)  # 16 bytes, valid only during each call
    assert collector.process(memory.ctypes.data, True, "FLOAT", (4,), "t0", 0)
    assert not collector.process(memory.ctypes.data, True, "FLOAT", (-1, 4), "bad", 0)
    if not torch.cuda.is_available():  # a device copy where torch has no CUDA fails after its room was reserved
        assert not collector.process(memory.ctypes.data, False, "FLOAT", (4,), "dev", 0)
    assert collector.process(memory.ctypes.data, True, "FLOAT", (4,), "unwanted", 0)
    memory[:] = 9
    assert collector.process(memory.ctypes.data, True, "FLOAT", (4,), "t1", 0)
    assert stream.held == 32 and collector.copied_bytes == 32 and collector.tensors == {}
    stream.finish()
    chunks = list(stream.chunks())
    assert [list(chunk) for chunk in chunks] == [["a", "b"]]
    assert chunks[0]["a"].tolist() == [0, 1, 2, 3] and chunks[0]["b"].tolist() == [9, 9, 9, 9]
    assert collector.errors[0].startswith("bad: ") and collector.calls == (5 if not torch.cuda.is_available() else 4)
    stream.close()
    assert collector.process(memory.ctypes.data, True, "FLOAT", (4,), "t0", 0)  # the comparison stopped: dropped
    assert collector.copied_bytes == 32


def test_a_budget_bounds_what_each_run_of_the_engine_copies() -> None:
    """Defect: unfused mode had no memory bound. The listener copies one budget-sized group per run.

    Called as TensorRT calls it, with real host memory: the same sequence of tensors each run
    (one engine, one input), and each run keeps only its group.
    """
    sizes = [64, 64, 200, 32, 32, 32]  # bytes of FLOAT tensors, in the order the engine reports them
    memory = [np.full(n // 4, i, dtype=np.float32) for i, n in enumerate(sizes)]
    collector = buffers.DebugCollector(budget=128)
    seen: list[list[str]] = []
    group = 0
    while True:
        collector.start(group)
        for i, array in enumerate(memory):
            assert collector.process(array.ctypes.data, True, "FLOAT", (array.size,), f"t{i}", 0)
        copied = collector.take()
        assert collector.copied_bytes <= 128 or len(copied) == 1  # a tensor over the budget comes alone
        seen.append(sorted(copied))
        if group + 1 >= collector.groups:
            break
        group += 1
    assert seen == [["t0", "t1"], ["t2"], ["t3", "t4", "t5"]] and collector.calls == 6
    everything = buffers.DebugCollector()
    for i, array in enumerate(memory):
        everything.process(array.ctypes.data, True, "FLOAT", (array.size,), f"t{i}", 0)
    assert everything.groups == 1 and len(everything.take()) == 6
    collector.start(-1)  # an unfused run that wants only the outputs copies nothing
    for i, array in enumerate(memory):
        collector.process(array.ctypes.data, True, "FLOAT", (array.size,), f"t{i}", 0)
    assert collector.take() == {} and collector.calls == 6
    half = np.array([1.5, -2.0], dtype=np.float32).view(np.uint32) >> 16  # bfloat16 bits of 1.5 and -2.0
    bits = half.astype(np.uint16)
    assert buffers.copy_debug_tensor(bits.ctypes.data, "BF16", (2,), 0, on_host=True).tolist() == [1.5, -2.0]


@needs_cuda
def test_host_debug_copy_waits_for_the_stream_on_a_gpu() -> None:
    """Defect 5 on a CUDA GPU: a host read sees what the stream wrote, not what was there before."""
    count = 64 << 20
    for _ in range(3):
        host = torch.zeros(count, dtype=torch.float32, pin_memory=True)
        device = torch.full((count,), 3.0, device="cuda")
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            host.copy_(device, non_blocking=True)  # still in flight when the "callback" runs
        copied = buffers.copy_debug_tensor(host.data_ptr(), "FLOAT", (count,), stream.cuda_stream, on_host=True)
        assert bool((copied == 3.0).all())


@needs_cuda
def test_device_buffers_on_a_gpu() -> None:
    """Defects 2, 4 and 11 on a CUDA GPU: staging, allocation and device debug copies on device memory."""
    gpu = torch.device("cuda", 0)
    stream = torch.cuda.Stream(gpu)
    with torch.cuda.stream(stream):
        empty, address = buffers.stage_input(np.zeros((0, 3), np.float32), torch.float32, gpu)
        staged, _ = buffers.stage_input(np.arange(6, dtype=np.float32), torch.float16, gpu)
    stream.synchronize()
    assert address != 0 and empty.device.type == "cuda" and staged.cpu().tolist() == [0, 1, 2, 3, 4, 5]
    outputs = buffers.OutputBuffers(gpu)
    address = outputs.reallocate("nz", 24, 256)
    assert address != 0 and address % 256 == 0 and outputs.buffers["nz"].device.type == "cuda"
    source = torch.arange(6, dtype=torch.float32, device=gpu)
    on_device, to_host = buffers.DebugCollector(to_host=False), buffers.DebugCollector()
    for name, dtype in (("f", "FLOAT"), ("h", "HALF"), ("b", "BF16"), ("i", "INT32")):
        typed = source.to(
            {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16, "INT32": torch.int32}[dtype]
        )
        assert on_device.process(typed.data_ptr(), False, dtype, (2, 3), name, stream.cuda_stream)
        assert to_host.process(typed.data_ptr(), False, dtype, (2, 3), name, stream.cuda_stream)
    copies = on_device.take()
    assert on_device.tensors == {} and all(copies[n].device.type == "cuda" for n in copies)
    assert all(copies[n].float().cpu().tolist() == [[0, 1, 2], [3, 4, 5]] for n in copies)
    host = to_host.take()  # the comparison runs on the host: copied there straight from the device
    assert all(isinstance(host[n], np.ndarray) and host[n].tolist() == [[0, 1, 2], [3, 4, 5]] for n in host)
    assert host["b"].dtype == np.float32 and to_host.copied_bytes == 6 * (4 + 2 + 2 + 4)
    before = torch.cuda.memory_reserved()
    del copies, outputs
    torch.cuda.empty_cache()  # what the backend does once a run's tensors are on the host
    assert torch.cuda.memory_reserved() <= before


@needs_cuda
def test_streamed_device_copies_on_a_producer_thread_on_a_gpu() -> None:
    """The streamed run's hand-over on a CUDA GPU: the listener copies device memory on a thread of its own, after
    the work its stream still had queued, while the main thread reads bounded chunks; the memory is reused."""
    from trtdiff.backends.tensorrt.stream import TensorStream, ThreadedRun

    gpu, count = torch.device("cuda", 0), 16 << 20  # 64 MB a tensor
    collector = buffers.DebugCollector()

    def engine_run(stream: TensorStream[object]) -> int:
        engine_stream = torch.cuda.Stream(gpu)  # TensorRT's stream, as the callback receives it
        collector.start(None, stream)
        with torch.cuda.device(gpu), torch.cuda.stream(engine_stream):
            scratch = torch.zeros(count, device=gpu)  # one activation buffer, reused layer after layer
            for step in range(6):
                torch.cuda._sleep(20_000_000)  # the layer is still running when the listener is called
                scratch.fill_(float(step + 1))
                address = scratch.data_ptr()
                assert collector.process(address, False, "FLOAT", (count,), f"t{step}", engine_stream.cuda_stream)
        return step

    run: ThreadedRun[object, int] = ThreadedRun(engine_run, 2 * count * 4)
    chunks = [{name: float(np.asarray(value).min()) for name, value in chunk.items()} for chunk in run.chunks()]
    assert chunks == [{"t0": 1.0, "t1": 2.0}, {"t2": 3.0, "t3": 4.0}, {"t4": 5.0, "t5": 6.0}]
    assert run.result == 5 and run.stream.peak == 2 * count * 4 and collector.errors == []
    assert not run.thread.is_alive()
