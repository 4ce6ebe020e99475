"""An autograder for parallel PyTorch assignments (Gloo, CPU): see docs/ARCHITECTURE.md."""

__version__ = "0.1.0"
