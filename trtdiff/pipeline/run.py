"""One comparison's run: its backends and pairs, how each pair is judged, its passes over the samples.

`Run` is what the stages after pairing read: the prepared comparison, the reference
(pipeline.reference: PyTorch's values, kept one way), the backends compared (the reference
first: `backends_run`), the engine that compares them chunk by chunk within the memory budget,
and what the culprit step reads (`analysis_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from trtdiff.analysis.diagnose import Inputs
from trtdiff.analysis.engine import BackendValues, Engine, Pass, ValueSource
from trtdiff.analysis.judge import Judge
from trtdiff.backends.store import to_host
from trtdiff.errors import OptionError, param
from trtdiff.options import CompareOptions
from trtdiff.pairing.qdq import has_qdq, quantizations
from trtdiff.pipeline.prepare import Prepared, Progress, onnx_feeds
from trtdiff.pipeline.progress import sample_step, sample_total
from trtdiff.pipeline.reference import Reference
from trtdiff.report import all_pairs

if TYPE_CHECKING:
    from trtdiff.analysis.repro import OnCulprits
    from trtdiff.report import BackendPair, QuantizedWeight
    from trtdiff.report.inspection import Interpolation
    from trtdiff.source.samples import Sample


@dataclass(frozen=True)
class Run:
    """One comparison's backends, pairs and passes; PyTorch's values through `reference` (pipeline.reference)."""

    prepared: Prepared
    options: CompareOptions
    reference: Reference
    backends: tuple[str, ...]
    name_of: Callable[[str], str] = str
    repro: OnCulprits | None = None
    region: tuple[str, ...] = ()  # `--capture stats`: the layers compared in full (pipeline.coarse)
    region_first: str | None = None  # the first suspicious layer, which the region is around

    @property
    def pairs(self) -> tuple[BackendPair, ...]:
        return all_pairs(self.backends)

    @property
    def summarized(self) -> bool:
        """Whether sample 0's layers are compared by statistics (`--capture stats`, pipeline.coarse)."""
        return self.reference.mode == "statistics"

    def engine(self) -> Engine:
        graph = self.prepared.graph
        return Engine(self.pairs, self.judge, tuple(graph.graph_outputs), self.sizes, self.reference.budget.chunk)

    @cached_property
    def sizes(self) -> dict[str, int]:
        """Expected bytes of sample 0's tensors, where the graph's types say."""
        graph = self.prepared.graph
        return {t: n for t in self.layer_tensors() if (n := graph.tensor_type(t).nbytes()) is not None}

    @cached_property
    def judge(self) -> Judge:
        """How each pair of values is judged: the thresholds, in quantization steps or noise ratio where they apply."""
        graph, reference = self.prepared.graph, self.reference
        floats = frozenset({"torch"}) if reference.capture is not None and has_qdq(graph) else frozenset()
        return Judge(self.options.thresholds, quantizations(graph), reference.reduced, floats)

    @cached_property
    def weights(self) -> tuple[QuantizedWeight, ...]:
        """A QDQ file's weight DequantizeLinears against the PyTorch parameters (analysis.quant); () without Q/DQ."""
        module, graph = self.prepared.loaded.module, self.prepared.graph
        if module is None or not has_qdq(graph):
            return ()
        from trtdiff.analysis.quant import quantized_weights

        parameters = {name: to_host(value.float()) for name, value in module.state_dict().items()}
        return quantized_weights(graph, parameters)

    def layer_tensors(self) -> tuple[str, ...]:
        """Sample 0's tensors: those paired with PyTorch, every one several backends share, the outputs."""
        graph, pairing = self.prepared.graph, self.reference.pairing
        paired = pairing.pairs if pairing is not None else {}
        several = len(self.prepared.backends) > 1
        outputs = set(graph.graph_outputs)
        return tuple(t for t in graph.node_outputs if t in paired or several or t in outputs)

    def analysis_inputs(self, say: Progress | None = None) -> Inputs:
        """What the culprit step reads from this comparison (`say`: its progress, where its steps may take long)."""
        prepared, budget = self.prepared, self.reference.budget
        return Inputs(
            prepared.graph,
            prepared.feeds,
            prepared.backends,
            self.reference.captured,
            self.options.runtime,
            prepared.engine,
            self.judge,
            self.interpolations,
            self.name_of,
            self.repro,
            chunk_bytes=budget.chunk,
            store_bytes=budget.store,
            say=say or (lambda _text: None),
        )

    def interpolations(self) -> list[Interpolation]:
        """The PyTorch model's upsampling calls on sample 0 (one forward pass), for the culprits' advice."""
        recorder = self.reference.recorder
        if recorder is None:
            return []
        from trtdiff.backends.pytorch.interpolations import record_interpolations

        return record_interpolations(recorder.module, self.prepared.model_feeds)

    def passes(self, samples: Iterator[Sample], say: Progress) -> Iterator[Pass]:
        """Sample 0 on every tensor (from the reference), then each later sample's final outputs."""
        graph = self.prepared.graph
        outputs = tuple(graph.graph_outputs)
        total = sample_total(self.options)
        for index, sample in enumerate(samples):
            if index:  # sample 0's time is the comparison's own step ("running ... and comparing every layer")
                say(sample_step(index, total, sample.name))
            source = self.reference.first_source() if index == 0 else self.reference.forward(sample)
            sources: list[ValueSource] = [source] if source is not None else []
            if index == 0:
                feeds = self.prepared.feeds
            else:
                feeds = onnx_feeds(graph, dict(zip(graph.graph_inputs, sample.values, strict=False)))
            sources += [BackendValues(backend, feeds) for backend in self.prepared.backends]
            yield Pass(sample, tuple(sources), self.layer_tensors() if index == 0 else outputs)


def backends_run(prepared: Prepared, reference: Reference) -> tuple[str, ...]:
    """The backends compared, the reference first; two are needed."""
    names = (("torch",) if reference.capture is not None else ()) + tuple(b.name for b in prepared.backends)
    if len(names) < 2:
        hint = (
            f"give the PyTorch model as MODEL with {param('onnx')} FILE"
            if reference.capture is None
            else f"add {param('backends')} onnxruntime"
        )
        raise OptionError(f"only {', '.join(names) or 'no backend'} can run here, and comparing needs two; {hint}")
    return names
