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
from grader.handin.ipython import COLAB_COMMENTED, as_python

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


#: Lines a student leaves after reading the docs, and lines that only look like help (a comment, a string).
HELP_LINES = (
    "torch.tensor_split?",
    "ColumnParallelLinear??",
    "?split_batch",
    "??torch.distributed.all_reduce",
    "x = dist.all_gather?",
    "    nn.Linear?",
    "%time split_batch?",
    "# what does this do?",
    "x = '?'",
    "a = b  # why?",
    "print(a?)",
    "torch.tensor_split?  # docs",
)


@pytest.mark.parametrize("line", HELP_LINES)
def test_help_syntax_is_read_as_ipythons_input_transformer_reads_it(line: str) -> None:
    """Where IPython makes a line a ``pinfo`` call, it is a statement that does nothing here; elsewhere
    the line is left as written (checked against IPython's own transformer)."""
    transformer = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    source = f"if True:\n{line if line.startswith(' ') else '    ' + line}\n    pass\n"
    ipython = transformer.transform_cell(source)
    ours = as_python(source)
    assert ("pinfo" in ipython) == (ours.splitlines()[1].strip() == "..."), (ipython, ours)


@pytest.mark.parametrize("line", HELP_LINES[:7])
def test_help_syntax_in_a_definition_leaves_it_gradeable(tmp_path: Path, line: str) -> None:
    found = notebook.read(notebook_with(tmp_path / "hw12.ipynb", indented(BLOCKS["try"], line.strip())))
    assert found.unparsable == []
    space: dict[str, object] = {}
    found.execute(space)
    assert space["f"]() == 7  # type: ignore[operator]


#: Cell magics that run their body in the notebook's namespace (IPython's ``time``, ``capture``,
#: ``prun``, ``debug``), with the arguments students give them.
RUNS_PYTHON = ("%%time", "%%capture", "%%capture out --no-stderr", "%%prun -s cumulative", "%%debug", "\n  %%time")
#: Cell magics whose body is not Python in the notebook: another process, a file, a display, a timing function.
NOT_PYTHON = (
    "%%bash",
    "%%sh",
    "%%script python3",
    "%%writefile model.py",
    "%%html",
    "%%javascript",
    "%%timeit",
    "%%sql",
)


@pytest.mark.parametrize("magic", RUNS_PYTHON)
def test_a_cell_magic_that_runs_python_is_read_as_its_body(tmp_path: Path, magic: str) -> None:
    body = "import math\n\ndef f():\n    !ls\n    return 7\n"
    found = notebook.read(notebook_with(tmp_path / "hw12.ipynb", f"{magic}\n%%time\n{body}"))
    assert found.unparsable == [] and found.skipped == []
    space: dict[str, object] = {}
    found.execute(space)
    assert space["f"]() == 7  # type: ignore[operator]
    assert found.named("f").node.lineno == magic.count("\n") + 5  # the cell's own line: magics kept as lines


@pytest.mark.parametrize("magic", NOT_PYTHON)
def test_any_other_cell_magic_is_skipped_and_said_so(tmp_path: Path, magic: str) -> None:
    found = notebook.read(
        notebook_with(tmp_path / "hw12.ipynb", "def g():\n    return 1\n", f"{magic}\ndef f():\n    return 7\n")
    )
    assert found.definition("f") is None and found.definition("g") is not None
    name = magic.split()[0]
    assert found.skipped == [f"cell 2 is {name}: " + found.skipped[0].split(": ", 1)[1]]
    with pytest.raises(NotImplementedError, match=f"these cells are not read as Python: cell 2 is {name}"):
        found.named("f")


def test_an_exports_cell_magics_read_as_the_notebooks(tmp_path: Path) -> None:
    """nbconvert writes a cell magic as one ``run_cell_magic`` call, Colab comments the cell out."""
    body = "def f():\\n    return 7\\n"
    nbconvert = f"# In[1]:\n\n\nget_ipython().run_cell_magic('time', '', '{body}')\n\n\n# In[2]:\n\n\n"
    nbconvert += "get_ipython().run_cell_magic('bash', '', 'def g():\\n    return 1\\n')\n"
    colab = f'"""hw12.ipynb"""\n\n{COLAB_COMMENTED}\n# %%capture\n# def f():\n#     %env A=1\n# \n#     return 7\n\n'
    colab += f"{COLAB_COMMENTED}\n# %%writefile g.py\n# def g():\n#     return 1\n"
    for name, text in (("nbconvert", nbconvert), ("colab", colab)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "hw12.py").write_text(text)
        found = notebook.read(tmp_path / name / "hw12.py")
        space: dict[str, object] = {}
        found.execute(space)
        assert space["f"]() == 7 and "g" not in space, name  # type: ignore[operator]
        assert len(found.skipped) == 1, name
