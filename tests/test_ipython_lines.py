"""IPython's syntax is read, never run, wherever it stands (issue 37): ``!``, ``%`` and ``get_ipython()``
lines at a cell's top level or inside a ``try:``, ``if``, ``for``, ``with``, ``def`` or ``class`` body are
an expression that does nothing, as IPython's input transformer reads them, and the definition
around them is still graded."""

from __future__ import annotations

import ast
import itertools
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grader.handin import notebook
from grader.handin.ipython import as_python

#: What students type in Colab cells, each as a line of its own (``{marker}`` is a file the magic would make).
MAGICS = (
    "!touch {marker}",
    "!pip install -q torch && touch {marker}",
    "%env MARKER={marker}",
    "%time open('{marker}', 'w')",
    "files = !touch {marker}",
    "out, err = %sx touch {marker}",
    "get_ipython().system('touch {marker}')",
    "!touch {marker} \\\n   && echo continued",
)

#: Blocks a magic line stands in, its line at ``{line}``; ``f()`` must return 7 whatever the magic.
BLOCKS = {
    "def body": "def f():\n    {line}\n    return 7\n",
    "try": "def f():\n    try:\n        {line}\n    except Exception:\n        {line}\n    return 7\n",
    "if": "def f():\n    if True:\n        {line}\n    else:\n        {line}\n    return 7\n",
    "for": "def f():\n    for _ in range(2):\n        {line}\n    return 7\n",
    "with": "import contextlib\ndef f():\n    with contextlib.nullcontext():\n        {line}\n    return 7\n",
    "nested def": "def f():\n    def g():\n        {line}\n    g()\n    return 7\n",
    "class body": "class C:\n    {line}\n    value = 7\ndef f():\n    return C.value\n",
    "top level": "{line}\ndef f():\n    return 7\n",
}


def notebook_with(path: Path, *cells: str) -> Path:
    nb = new_notebook()
    nb.cells = [new_code_cell(source) for source in cells]
    nbformat.write(nb, path)
    return path


def indented(template: str, line: str) -> str:
    """``template`` with ``line`` at each ``{line}``, a continuation line indented with it."""
    out = []
    for row in template.splitlines(keepends=True):
        if "{line}" in row:
            indent = row[: len(row) - len(row.lstrip())]
            row = row.replace("{line}", textwrap.indent(line, indent).lstrip(" ") if "\n" in line else line)
        out.append(row)
    return "".join(out)


@pytest.mark.parametrize(("block", "magic"), list(itertools.product(BLOCKS, MAGICS)))
def test_a_magic_in_any_block_leaves_the_definition_gradeable_and_never_runs(
    tmp_path: Path, block: str, magic: str
) -> None:
    marker = tmp_path / "ran"
    source = indented(BLOCKS[block], magic.format(marker=marker))
    found = notebook.read(notebook_with(tmp_path / "hw12.ipynb", source))
    assert found.unparsable == []
    space: dict[str, object] = {}
    found.execute(space)
    assert space["f"]() == 7  # type: ignore[operator]
    assert not marker.exists()


def test_every_line_keeps_its_number() -> None:
    source = "def f():\n    try:\n        !ls \\\n          -la\n    except Exception:\n        pass\n    return 1\n"
    out = as_python(source)
    assert out.splitlines() == [
        *("def f():", "    try:", "        ...", ""),
        *("    except Exception:", "        pass", "    return 1"),
    ]


def test_only_a_logical_lines_start_is_ipythons() -> None:
    """A ``%`` that continues an expression and a ``!`` inside a string are Python, left as written."""
    source = 'x = (10\n     % 3)\ndoc = """\n!not a command\n%not a magic\n"""\nok = a != b\ns = "it\'s"  # !\n'
    assert as_python(source) == source


def test_an_exported_notebooks_get_ipython_call_over_several_lines_is_one_statement() -> None:
    source = "if True:\n    get_ipython().run_line_magic(\n        'time', 'f()')\nx = 1\n"
    assert as_python(source) == "if True:\n    ...\n\nx = 1\n"
    ast.parse(as_python(source))
