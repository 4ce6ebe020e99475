"""Every output of one grading run, by name (``--out``) or by format (``--format``).

Files are written atomically (a temporary file in the same directory, then ``os.replace``), so a
reader such as Gradescope's harness or a batch run never sees half a file, and a crash leaves the
previous version in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.errors import named
from grader.render.classroom import render_classroom
from grader.render.gradescope import render_gradescope
from grader.render.markdown import render_markdown
from grader.render.terminal import render_terminal
from grader.results import GradeResult
from grader.text import valid_utf8

#: File name in ``--out`` -> the format it holds, canonical and human-readable first: a renderer
#: that refuses the result (Classroom without a max_score) must not cost the student the report.
#: ``junit.xml`` is the runner's own file, copied raw.
OUTPUT_FILES = {
    "results.json": "json",
    "summary.md": "markdown",
    "gradescope.json": "gradescope",
    "classroom.json": "classroom",
}


def write_outputs(result: GradeResult, out_dir: Path, junit_src: Path | None) -> list[Path]:
    """Write ``results.json`` (canonical), ``junit.xml``, ``gradescope.json``, ``classroom.json`` and
    ``summary.md`` into ``out_dir`` (``junit.xml`` only with ``junit_src``); returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if junit_src is not None:
        written.append(atomic_write(out_dir / "junit.xml", junit_src.read_bytes()))
    for name, fmt in OUTPUT_FILES.items():
        written.append(write_text(out_dir / name, render(result, fmt)))
    return written


def render(result: GradeResult, fmt: str, *, junit_src: Path | None = None, color: bool | None = None) -> str:
    """``result`` as text in one of ``grader.cli.FORMATS``.  ``junit`` needs the runner's file;
    ``color`` only concerns ``terminal`` (None: decide by the terminal).  The text always encodes as
    UTF-8, whatever bytes a submission's names held."""
    renderers: dict[str, Callable[[], str]] = {
        "json": result.to_json,
        "junit": lambda: _junit(junit_src),
        "gradescope": lambda: _json(render_gradescope(result)),
        "classroom": lambda: _json(render_classroom(result)),
        "markdown": lambda: render_markdown(result),
        "terminal": lambda: render_terminal(result, color=color),
    }
    if fmt not in renderers:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(renderers)}")
    return valid_utf8(renderers[fmt]())


def write_text(path: Path, text: str) -> Path:
    """``text`` as UTF-8 in ``path``, atomically; text no renderer made safe still cannot fail the write."""
    return atomic_write(path, valid_utf8(text).encode("utf-8"))


def atomic_write(path: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from other readers
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file: name it
            raise named(exc, path) from exc
        raise
    return path


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _junit(junit_src: Path | None) -> str:
    if junit_src is None:
        raise ValueError("the junit format needs the runner's junit.xml")
    return junit_src.read_text(encoding="utf-8")
