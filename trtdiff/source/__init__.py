"""What is compared: the model, its inputs and its ONNX file.

Takes what the user named (a model file or factory, input shapes or files, a data folder) and
hands on a loaded model, input arrays, the exported or given ONNX graph read once
(`onnx_graph`), and the pitfalls that graph shows (`pitfalls`: Resize modes, Softmax axes, ...)."""
