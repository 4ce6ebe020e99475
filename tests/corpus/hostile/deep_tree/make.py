"""Build this entry's submission: ``python make.py DEST``.

The reference solution without its diagram at the top, and a folder nested 1,100 levels deep with
an ``all_to_all_schematic.png`` at the bottom.  Looking for the missing diagram walked the whole
tree, and a recursive walk (``os.walk`` on Python 3.11) died with RecursionError: no result at all.
The tree is made one level at a time (``os.makedirs`` recurses too) and is too deep for
``shutil.rmtree``: remove it with ``rm -rf``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"
LEVELS = 1100


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    diagram = (dest / "all_to_all_schematic.png").read_bytes()
    (dest / "all_to_all_schematic.png").unlink()
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(LEVELS):  # relative to the last level: the full path would pass PATH_MAX
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("all_to_all_schematic.png", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        with os.fdopen(out, "wb") as fh:
            fh.write(diagram)
    finally:
        os.close(fd)
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
