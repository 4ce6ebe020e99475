"""Hand-in readers: one extraction of the handout's definitions for scripts, notebooks and their
exports, with the same feedback for a missing, duplicated, renamed or unparsable definition."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from grader.handin import Chunk, Extraction, extract, hand_in_file, notebook, script

REPO = Path(__file__).resolve().parents[1]


def write_notebook(path: Path, *cells: str, markdown: str = "# Part 1") -> Path:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(markdown), *(new_code_cell(source) for source in cells)]
    nbformat.write(nb, path)
    return path


def test_a_notebooks_code_cells_are_read_in_document_order_and_the_last_definition_wins(tmp_path: Path) -> None:
    path = write_notebook(tmp_path / "hw12.ipynb", "def f():\n    return 1", "x = f()", "def f():\n    return 2")
    found = notebook.read(path)
    space: dict[str, object] = {}
    found.execute(space)
    assert space["f"]() == 2  # type: ignore[operator]
    assert "x" not in space  # module-level statements never run
    (note,) = found.notes(("f",))
    assert "hw12.ipynb, cell 1 line 1, hw12.ipynb, cell 3 line 1" in note and "the last one" in note


def write_script(path: Path, source: str) -> Path:
    path.write_text(source)
    return path


@pytest.mark.parametrize(
    ("reader", "write", "name"),
    [(notebook.read, write_notebook, "hw12.ipynb"), (script.read, write_script, "assignment4.py")],
    ids=["notebook", "script"],
)
def test_a_hand_in_read_again_unchanged_is_parsed_once_and_an_edited_one_again(
    tmp_path: Path, reader: Callable[[Path], Extraction], write: Callable[[Path, str], Path], name: str
) -> None:
    path = write(tmp_path / name, "def f():\n    return 1")
    first = reader(path)
    assert reader(path) is first  # a rank's later cases reuse the parse
    write(path, "def f():\n    return 2")
    space: dict[str, object] = {}
    reader(path).execute(space)
    assert space["f"]() == 2  # type: ignore[operator]


def test_executing_an_extraction_again_compiles_nothing_and_shares_no_state() -> None:
    chunk = Chunk("class Box:\n    items = []\n\ndef f():\n    return 1\n", "hw12.ipynb, cell 1", "hw12.ipynb, cell 1")
    found = extract([chunk], "hw12.ipynb")
    first: dict[str, object] = {}
    second: dict[str, object] = {}
    found.execute(first)
    first["Box"].items.append("case 1")  # type: ignore[attr-defined]
    found.execute(second)
    assert second["f"].__code__ is first["f"].__code__  # type: ignore[attr-defined]  # compiled once
    assert second["f"] is not first["f"]
    assert second["Box"].items == []  # type: ignore[attr-defined]  # a case's class is its own


def test_execution_counts_and_outputs_are_not_evidence(tmp_path: Path) -> None:
    nb = new_notebook()
    first, second = new_code_cell("def f():\n    return 'first'"), new_code_cell("def f():\n    return 'second'")
    first.execution_count, second.execution_count = 9, 1  # the student ran the first cell last
    first.outputs = [new_output("stream", name="stdout", text="first wins\n")]
    nb.cells = [first, second]
    nbformat.write(nb, tmp_path / "hw12.ipynb")
    space: dict[str, object] = {}
    notebook.read(tmp_path / "hw12.ipynb").execute(space)
    assert space["f"]() == "second"  # type: ignore[operator]


def test_magics_are_not_python_and_a_cell_magic_skips_its_cell(tmp_path: Path) -> None:
    path = write_notebook(
        tmp_path / "hw12.ipynb", "!pip install -q x\n%matplotlib inline\ndef f():\n    return 3", "%%bash\necho hi"
    )
    found = notebook.read(path)
    assert found.unparsable == []
    statement = found.named("f")
    assert statement.node.lineno == 3  # the magic lines were blanked, not removed: line numbers hold


def test_a_cell_with_a_syntax_error_is_reported_with_line_and_caret_and_the_rest_is_read(tmp_path: Path) -> None:
    path = write_notebook(tmp_path / "hw12.ipynb", "def ok():\n    return 1", "def broken(:\n    pass")
    found = notebook.read(path)
    assert found.named("ok")
    (problem,) = found.unparsable
    assert problem.startswith("hw12.ipynb, cell 2 line 1:") and "def broken(:" in problem and "^" in problem
    with pytest.raises(NotImplementedError, match=r"could not be read: hw12\.ipynb, cell 2 line 1"):
        found.named("broken")


def test_a_missing_definition_suggests_a_rename(tmp_path: Path) -> None:
    found = notebook.read(
        write_notebook(tmp_path / "hw12.ipynb", "def split_batches(x, rank, world_size):\n    return x")
    )
    with pytest.raises(NotImplementedError, match=r"defines no split_batch.*did you rename it to split_batches"):
        found.named("split_batch")


@pytest.mark.parametrize("marker", ["# In[3]:", "# In[ ]:", "# %%"])
def test_a_notebook_exported_as_a_script_is_split_into_the_same_cells(tmp_path: Path, marker: str) -> None:
    text = (
        f"#!/usr/bin/env python\n{marker}\n\nget_ipython().system('pip install x')\n"
        f"def f():\n    return 1\n\n{marker}\n\ndef f():\n    return 2\n"
    )
    (tmp_path / "hw12.py").write_text(text)
    found = notebook.read(tmp_path / "hw12.py")
    space: dict[str, object] = {}
    found.execute(space)
    assert space["f"]() == 2  # type: ignore[operator]
    assert found.notes() and "cell 2" in found.notes()[0]


def test_a_file_that_is_no_notebook_says_so(tmp_path: Path) -> None:
    (tmp_path / "hw12.ipynb").write_text('{"cells": [')
    with pytest.raises(notebook.NotebookError, match=r"hw12\.ipynb is not a readable notebook"):
        notebook.read(tmp_path / "hw12.ipynb")


def test_the_script_reader_reads_a4s_hand_in_as_one_chunk_without_running_it() -> None:
    found = script.read(REPO / "reference" / "a4" / "assignment4.py")
    assert {"single_step", "data_parallel_single_step", "FullColumnParallelLinear"} <= {
        s.name for s in found.statements
    }
    assert found.unparsable == []


def test_code_compiled_from_a_chunk_carries_the_students_file_cell_and_line() -> None:
    chunk = Chunk("def f():\n    raise ValueError('x')\n", "hw12.ipynb, cell 4", "/sandbox/hw12.ipynb, cell 4")
    space: dict[str, object] = {}
    extract([chunk], "hw12.ipynb").execute(space)
    with pytest.raises(ValueError) as info:
        space["f"]()  # type: ignore[operator]
    frame = info.traceback[-1]
    assert (str(frame.path), frame.lineno + 1) == ("/sandbox/hw12.ipynb, cell 4", 2)
    assert hand_in_file("hw12.ipynb, cell 4") == "hw12.ipynb"  # the policy's key for the cell's code


def test_the_template_and_reference_notebooks_define_every_name_the_handout_asks_for() -> None:
    names = {"DistributedContext", "split_batch", "dp_step", "ColumnParallelLinear", "RowParallelLinear"}
    for tree in ("student_template", "reference"):
        found = notebook.read(REPO / tree / "hw12" / "hw12.ipynb")
        assert names <= {s.name for s in found.statements}, tree
        assert found.unparsable == [] and found.notes() == [], tree
