"""The thread's hypotheses tested in one run: inspect (the usual suspects, no comparison),
sweep (opsets x exporters x precisions), simplify (before/after onnxslim).

Each takes the same options as a comparison and hands on its own report."""
