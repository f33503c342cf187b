"""The CI gate: thresholds turned into checks over samples, and the verdict.

Takes the layers, the per-sample results and the segmentation summary; hands on one
`ThresholdCheck` per (threshold, backend pair), which decide `Report.passed` and the exit code."""
