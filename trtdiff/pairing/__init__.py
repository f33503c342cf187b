"""Which PyTorch value each ONNX tensor stands for: by structure (module path, kind, order),
never by position alone.

Takes the ONNX graph and the PyTorch capture; hands on a `Pairing` (ONNX tensor -> recorded
value key and method). Values that no single aten op produced are derived by evaluating the
ONNX node in PyTorch on recorded inputs (`derive`, `evaluate`)."""
