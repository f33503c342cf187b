"""Example models defined in the repo (no torchvision): small DeepLabV3+ variants."""
