#!/usr/bin/env bash
# The numerics gate the workflow and the composite action beside it run: fails (exit 1) when the
# deployed model's mIoU or output cosine drifts. Set OPSET to the opset you ship (the trained
# example fails at 10 and passes at 13). Reports land in $REPORTS: JUnit, Markdown, HTML, JSON and
# Model Explorer's node data with the ONNX file it colours (`trtdiff view $REPORTS/report.json`).
#
# trtdiff is found on PATH, else in ./.venv (no need to activate it), else where $TRTDIFF says;
# without it the script says so in one line and exits 2.
set -euo pipefail
OPSET="${OPSET:-13}"
REPORTS="${REPORTS:-reports}"
MODEL="${MODEL:-trtdiff.examples.shapes:deeplabv3plus_shapes}"
TRTDIFF="${TRTDIFF:-$(command -v trtdiff || true)}"
if [ -z "$TRTDIFF" ] && [ -x .venv/bin/trtdiff ]; then
  TRTDIFF=.venv/bin/trtdiff
fi
if [ -z "$TRTDIFF" ] || [ ! -x "$TRTDIFF" ]; then
  echo "gate.sh: trtdiff is not installed here (not on PATH, not in ./.venv, TRTDIFF unset): pip install 'trtdiff[html]'" >&2
  exit 2
fi
# The Python beside trtdiff (in its environment, a pipx link followed), to find the example's images.
PYTHON="$(dirname "$(readlink -f "$TRTDIFF")")/python"
EVAL="${EVAL:-$("$PYTHON" -c 'from trtdiff.examples.shapes import EVAL_DIR; print(EVAL_DIR)')}"
mkdir -p "$REPORTS"
"$TRTDIFF" compare "$MODEL" --opset "$OPSET" \
  --inputs "$EVAL/images" --labels "$EVAL/labels" \
  --min-miou 0.95 --max-miou-drop 0.01 --min-cosine 0.999 --rtol 0.05 \
  --junit "$REPORTS/junit.xml" --markdown "$REPORTS/summary.md" --html "$REPORTS/report.html" \
  --json "$REPORTS/report.json" --model-explorer "$REPORTS/model-explorer.json" --quiet
