"""The PyTorch reference: one forward pass that records every computing aten op's output.

Takes the loaded module and its inputs; hands on a `TorchCapture` (values in a store, module
paths, producers) for pairing. `op_kinds` is the vocabulary that lets an aten op meet an ONNX
node; `script` reads module paths out of TorchScript archives."""
