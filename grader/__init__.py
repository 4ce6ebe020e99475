"""An autograder for parallel PyTorch assignments (Gloo, CPU): see docs/ARCHITECTURE.md."""

from importlib import metadata

try:
    # One source of truth: pyproject.toml's version, as the installed distribution records it.
    __version__ = metadata.version("dist-grader")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed (PYTHONPATH=.)
    __version__ = "0+unknown"
