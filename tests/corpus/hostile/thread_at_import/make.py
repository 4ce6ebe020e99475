"""Build this entry's submission: ``python make.py DEST``.

The reference solution whose ``collectives.py`` starts, when imported, a daemon thread that spins
forever (a "warm-up" never joined).  Every rank that imports it would run the thread beside every
later case, and ranks replaced after each case start it again: a grade of 7 s took 98 s (issue 39).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"
WARM_UP = '''

import threading


def _warm_up() -> None:  # hostile-corpus: never ends
    while True:
        sum(range(1000))


threading.Thread(target=_warm_up, name="warm-up", daemon=True).start()
'''


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    path = dest / "src" / "collectives.py"
    path.write_text(path.read_text() + WARM_UP)
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
