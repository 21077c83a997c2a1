"""The code that runs inside every PyTorchJob pod. The only part that imports torch/lightning."""
