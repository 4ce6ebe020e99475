"""Build this entry's submission: ``python make.py DEST``.

The reference solution with its written answers and diagram moved out of the top level: the only
``written_answers_task1.md`` is a symlink to /etc/passwd in a folder whose name is not UTF-8
(``old\\xff``), the only ``all_to_all_schematic.png`` a FIFO in a folder named with a newline and a
terminal escape, beside files whose names hold other odd bytes.  Both are refused, and the refusals
name those folders in every output: writing them as they came failed summary.md, gradescope.json
and classroom.json with UnicodeEncodeError.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    (dest / "written_answers_task1.md").unlink()
    (dest / "all_to_all_schematic.png").unlink()
    top = os.fsencode(dest)
    old = os.path.join(top, b"old\xff")
    os.mkdir(old)
    os.symlink(b"/etc/passwd", os.path.join(old, b"written_answers_task1.md"))
    weird = os.path.join(top, b"weird\n\x1b[2J\xe2\x80\xae")  # newline, clear-screen, right-to-left override
    os.mkdir(weird)
    os.mkfifo(os.path.join(weird, b"all_to_all_schematic.png"))
    for name in (b"notes\xfe\xfd.txt", b"\x1b[31mred.md", b"tab\there.py", b"\xc3("):
        with open(os.path.join(top, name), "wb") as fh:
            fh.write(b"not graded\n")
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
