"""Build this entry's submission: ``python make.py DEST``.

The reference solution whose five collectives each spin forever (a busy loop using a whole CPU)
when called at world size 2 or more; at world size 1 they return the input as it is.  Every Task 1
case but world size 1 hangs, so the grading is as long as hangs make it: each function times out
once per world size and its other cases at that world size are not run.  Task 2 runs with the
grader's known-good collectives in their place.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"
SPIN = "    while dist.get_world_size() > 1:  # hostile-corpus: spins forever\n        pass\n"


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    path = dest / "src" / "collectives.py"
    source = path.read_text()
    # the first statement of each my_* function: after its signature and docstring
    pattern = re.compile(r'(def my_\w+\(.*?\) -> torch\.Tensor:\n    """.*?"""\n)', re.DOTALL)
    spun, count = pattern.subn(lambda m: m.group(1) + SPIN, source)
    assert count == 5, count
    path.write_text(spun)
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
