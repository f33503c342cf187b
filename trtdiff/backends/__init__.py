"""Backends: PyTorch (the reference) and the runtimes that execute the ONNX file."""
