"""A benchmark script of ``scripts/`` as a module, for the tests of its arithmetic: its functions without
running its ``main()``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(filename: str) -> ModuleType:
    """``scripts/<filename>`` imported under its name with ``_`` for ``-`` (``bench-service.py``:
    ``bench_service``), registered in ``sys.modules``, where its dataclasses look their module up."""
    name = Path(filename).stem.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / filename)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
