"""The Report: what a comparison found, as frozen dataclasses that round-trip through JSON.

Every stage reads these types and renderers read nothing else, so they sit at the bottom of
the house: `model` (the Report and its parts), `tensorrt` (what was built or run),
`runtime` (what any compiled runtime, OpenVINO today, compiled, fused and ran in),
`serialization` (dataclasses <-> JSON). This face re-exports the model, so
`trtdiff.report.Report` is the name callers use."""

from trtdiff.options import Thresholds as Thresholds
from trtdiff.report.model import (
    READABLE_SCHEMAS as READABLE_SCHEMAS,
    SCHEMA_VERSION as SCHEMA_VERSION,
    Attribution as Attribution,
    BackendPair as BackendPair,
    BuildReport as BuildReport,
    CheckMetric as CheckMetric,
    CheckScope as CheckScope,
    Contributor as Contributor,
    Culprit as Culprit,
    Drift as Drift,
    EngineLayerInfo as EngineLayerInfo,
    ErrorFigures as ErrorFigures,
    FirstDivergence as FirstDivergence,
    FusionSplit as FusionSplit,
    Layer as Layer,
    LayerPrecision as LayerPrecision,
    MarkingCheck as MarkingCheck,
    NonFinite as NonFinite,
    NotReturned as NotReturned,
    OutputsMode as OutputsMode,
    PairingMethod as PairingMethod,
    PairingSummary as PairingSummary,
    PairMetrics as PairMetrics,
    PlainEngine as PlainEngine,
    QuantizedWeight as QuantizedWeight,
    Reason as Reason,
    ReasonMetric as ReasonMetric,
    Report as Report,
    RuntimeSummary as RuntimeSummary,
    SampleResult as SampleResult,
    SegmentationSummary as SegmentationSummary,
    TensorRTStatus as TensorRTStatus,
    TensorRTSummary as TensorRTSummary,
    Threshold as Threshold,
    ThresholdCheck as ThresholdCheck,
    Verdict as Verdict,
    all_pairs as all_pairs,
    number as number,
)
