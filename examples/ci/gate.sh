#!/usr/bin/env bash
# The numerics gate used by the workflow beside it: fails (exit 1) when the deployed model's
# mIoU or output cosine drifts. Set OPSET to the opset you ship (the trained example fails
# at 10 and passes at 13). Reports land in $REPORTS (JUnit, Markdown, HTML, JSON).
set -euo pipefail
OPSET="${OPSET:-13}"
REPORTS="${REPORTS:-reports}"
MODEL="${MODEL:-trtdiff.examples.shapes:deeplabv3plus_shapes}"
EVAL="${EVAL:-$(python -c 'from trtdiff.examples.shapes import EVAL_DIR; print(EVAL_DIR)')}"
mkdir -p "$REPORTS"
trtdiff compare "$MODEL" --opset "$OPSET" \
  --inputs "$EVAL/images" --labels "$EVAL/labels" \
  --min-miou 0.95 --max-miou-drop 0.01 --min-cosine 0.999 --rtol 0.05 \
  --junit "$REPORTS/junit.xml" --markdown "$REPORTS/summary.md" --html "$REPORTS/report.html" \
  --json "$REPORTS/report.json" --quiet
