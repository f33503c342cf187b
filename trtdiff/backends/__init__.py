"""Backends: PyTorch (the reference) and the runtimes that execute the ONNX file.

`registry` names every backend and is the one place they are opened; `base` gives them one
lifecycle (open, run, close; a context manager). Importing this package imports no runtime.
"""
