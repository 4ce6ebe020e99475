"""Build this entry's submission: ``python make.py DEST``.

The reference solution whose ``my_allgather`` sleeps for an hour at world size 2 or more before
doing anything: no CPU, no message, so no deadlock to detect, only the case's time budget.  Each
world size costs one timeout; the other allgather cases at that world size are not run, and
nothing else changes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"
SIGNATURE = "def my_allgather(tensor: torch.Tensor) -> torch.Tensor:\n"


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    path = dest / "src" / "collectives.py"
    source = path.read_text()
    assert source.count(SIGNATURE) == 1
    sleep = "    if dist.get_world_size() > 1:\n        import time\n\n        time.sleep(3600)  # hostile-corpus: sleeps\n"
    head, _, tail = source.partition(SIGNATURE)
    docstring_end = tail.index('"""', tail.index('"""') + 3) + 4
    path.write_text(head + SIGNATURE + tail[:docstring_end] + sleep + tail[docstring_end:])
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
