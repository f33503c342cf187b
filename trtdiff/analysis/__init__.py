"""Compare the values: metrics per tensor, the comparison loop, the first divergence, culprits.

Takes opened backends, the PyTorch capture and its pairing; hands on layers with metrics, the
first divergence, culprits (local error per node, export or runtime verdict), drift and
attribution (what injecting the reference at a culprit recovers, in error and mIoU)."""
