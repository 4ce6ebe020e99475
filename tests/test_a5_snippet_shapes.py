"""Every snippet shape a student makes from the starter is placed (issue 37).

The corpus is made the way students work: start from the starter, change only the TODO lines, and
paste into the report at three sizes: the changed lines only, the block around them, the whole
function.  The starter is the pack's copy of the course's (``grader/packs/a5/starter``: the same
names, TODO sites and given lines; the course's own files are not copied into the project), and the
changed lines are written as for the course's GPU nodes (``.cuda(non_blocking = True)``,
``torch.cuda.synchronize()``).  Every size of every question must splice into exactly the program
the whole function gives, so it scores as the full answer does; the fidelity entry
``a5_starter_changed_lines`` grades the smallest sizes end to end.
"""

from __future__ import annotations

import ast
import copy
import functools
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.handin.report import read_report
from grader.packs.a5.splice import STARTER, splice
from grader.packs.a5.tree import CPU_DEVICE

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = read_report((ROOT / "grader/packs/a5/solution.md").read_text())
TEST_PY = (STARTER / "test.py").read_text()
PIPELINE_PY = (STARTER / "pipeline_parallel.py").read_text()


@dataclass(frozen=True)
class Todo:
    """One question's TODO done in the starter: ``(starter's lines, the student's lines)`` pairs."""

    file: str  # the starter file it is in
    edits: tuple[tuple[str, str], ...]
    function: str  # the function it is in


TODOS = {
    "Q2": Todo(
        "test.py",
        (
            (
                "    assert True  # TODO\n    assert True  # TODO\n",
                "    assert number_of_layers % pp == 0, 'balanced stages'\n"
                "    assert global_batch_size // micro_batch_size >= pp, 'enough micro-batches'\n",
            ),
        ),
        "main",
    ),
    "Q3": Todo(
        "test.py",
        (
            (
                "    tensor_shapes = (True, True, True)  # TODO\n",
                "    tensor_shapes = (micro_batch_size, sequence_length, hidden_size)\n",
            ),
        ),
        "main",
    ),
    "Q4": Todo(
        "test.py",
        (
            (
                "        # Q4: 1. Fetch a batch of data from the dataloader\n        # TODO\n"
                "        # 2. Move it to the GPU\n        # TODO\n"
                "        # 3. Compute the forward pass\n        # TODO\n",
                "        batch = next(train_dl_iterator)\n        batch = batch.cuda(non_blocking = True)\n"
                "        output = model(batch)\n",
            ),
            ("        # 4. Compute the backward pass\n        # TODO\n", "        output.mean().backward()\n"),
        ),
        "main",
    ),
    "Q5": Todo(
        "pipeline_parallel.py",
        (
            (
                "    # TODO\n    layers_in_current_stage = [0, 1, 2, 3]\n",
                "    base, extra = divmod(num_layers, pp_world_size)\n"
                "    start = pp_rank * base + min(pp_rank, extra)\n"
                "    layers_in_current_stage = list(range(start, start + base + (1 if pp_rank < extra else 0)))\n",
            ),
        ),
        "distribute_layers",
    ),
    "Q6": Todo(
        "test.py",
        (
            (
                "    if True:  # TODO\n        train_dl_iterator = iter(input)\n",
                '    if device_mesh["pp"].get_local_rank() == 0:\n        train_dl_iterator = iter(input)\n',
            ),
        ),
        "main",
    ),
    "Q7": Todo(
        "pipeline_parallel.py",
        (  # the four sites in order: each edit changes the first TODO left
            ("        if True: return None  # TODO\n", "        if pp_is_first_stage: return None\n"),
            ("        if True: return  # TODO\n", "        if pp_is_last_stage: return\n"),
            ("        if True: return None  # TODO\n", "        if pp_is_last_stage: return None\n"),
            ("        if True: return  # TODO\n", "        if pp_is_first_stage: return\n"),
        ),
        "pipeline_communicate",
    ),
    "Q8": Todo(
        "test.py",
        (
            (
                "        # Q8: 1. Fetch a batch from the dataloader if needed\n        # TODO\n"
                "        # 2. Move the batch from the dataloader OR the activations from the previous PP stage"
                " to the GPU\n"
                "        # TODO\n        # 3. Compute the forward pass\n        # TODO\n",
                "        if train_dl_iterator is not None:\n            stage_input = next(train_dl_iterator)\n"
                "        else:\n            stage_input = input_tensor\n"
                "        stage_input = stage_input.to(device_id, non_blocking = True)\n"
                "        output = model_stage(stage_input)\n",
            ),
            (
                "        if True:  # TODO\n            output = True  # TODO\n",
                '        if device_mesh["pp"].get_local_rank() == pp - 1:\n            output = output.mean()\n',
            ),
        ),
        "main",
    ),
    "Q9": Todo(
        "test.py",
        (
            (
                "    if True:  # TODO\n        for output_no_pp",
                '    if device_mesh["pp"].get_local_rank() == pp - 1:\n        for output_no_pp',
            ),
        ),
        "main",
    ),
    "Q10": Todo(
        "test.py",
        (
            (
                "        torch.testing.assert_close()  # TODO\n        torch.testing.assert_close()  # TODO\n",
                "        reference = model.layers[pp_stage_layer.layer_idx]\n"
                "        torch.testing.assert_close(pp_stage_layer.fc1.weight.grad, reference.fc1.weight.grad)\n"
                "        torch.testing.assert_close(pp_stage_layer.fc2.weight.grad, reference.fc2.weight.grad)\n",
            ),
        ),
        "main",
    ),
}


def done(todo: Todo) -> str:
    """The starter file with the question's TODO lines changed, and nothing else."""
    text = TEST_PY if todo.file == "test.py" else PIPELINE_PY
    for old, new in todo.edits:
        assert text.count(old) >= 1, old
        text = text.replace(old, new, 1)
    return text


def changed_lines(todo: Todo) -> str:
    """Only the lines the student changed, as pasted: every edit's lines that the starter's lacked."""
    lines = [line for old, new in todo.edits for line in new.splitlines() if line not in old.splitlines()]
    return textwrap.dedent("\n".join(lines) + "\n")


def function(todo: Todo) -> str:
    """The whole function holding the TODO, decorators included, as it is in the edited file."""
    text = done(todo)
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == todo.function)
    lines = text.splitlines(keepends=True)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return "".join(lines[first - 1 : node.end_lineno])


def block(todo: Todo) -> str:
    """The block around the changed lines, as pasted: the innermost loop or ``if`` holding them, up
    to the end of the branch holding the last (an ``else:`` after it is not repeated); a function's
    body without its ``def`` line; at ``main``'s top level, the lines with one given line either side."""
    text = done(todo)
    lines = text.splitlines(keepends=True)
    first = text[: text.index(todo.edits[0][1])].count("\n") + 1
    last = text[: text.index(todo.edits[-1][1]) + len(todo.edits[-1][1].rstrip())].count("\n") + 1
    tree = ast.parse(text)
    holding = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.For | ast.If | ast.FunctionDef) and n.lineno <= first and last <= (n.end_lineno or 0)
    ]
    inner = max(holding, key=lambda n: n.lineno)
    if isinstance(inner, ast.FunctionDef) and inner.name == "main":
        statements = [s for s in inner.body if s.lineno <= last and (s.end_lineno or 0) >= first]
        at = inner.body.index(statements[0])
        span = inner.body[max(at - 1, 0) : inner.body.index(statements[-1]) + 2]
        return textwrap.dedent("".join(lines[span[0].lineno - 1 : span[-1].end_lineno]))
    if isinstance(inner, ast.FunctionDef):
        return textwrap.dedent("".join(lines[inner.body[0].lineno - 1 : inner.end_lineno]))
    branch = next(b for b in (inner.body, inner.orelse) if b and b[0].lineno <= last <= (b[-1].end_lineno or 0))
    return textwrap.dedent("".join(lines[inner.lineno - 1 : branch[-1].end_lineno]))


SIZES = {"changed lines": changed_lines, "block": block, "function": function}


class _Meaning(ast.NodeTransformer):
    """What runs, compared: a docstring is no code (a pasted body is dedented, its docstring with it),
    and a device argument through the rank's ``cpu_device`` is that argument where it is the CPU's."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        return None if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) else node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        wrapped = isinstance(node.func, ast.Name) and node.func.id == CPU_DEVICE
        return node.args[0] if wrapped and ast.unparse(node.args[0]) == "'cpu'" else node


def meaning(node: ast.AST) -> str:
    return ast.dump(_Meaning().visit(copy.deepcopy(node)))


@functools.cache  # the whole function's program is every size's yardstick: spliced once per question
def program(question: str, snippet: str) -> tuple[str, str]:
    """The spliced starter for ``question`` with ``snippet`` pasted under its heading, as what runs."""
    spliced = splice(read_report(f"## {question}\n\n```python\n{snippet}```\n"), (question,), others=SOLUTION)
    placement = spliced.placements[question]
    assert placement.placed, f"{question}: {placement.message}\n{snippet}"
    return meaning(spliced.pipeline), meaning(spliced.main())


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("question", TODOS)
def test_every_size_of_a_starter_derived_snippet_splices_as_the_whole_function_does(question: str, size: str) -> None:
    todo = TODOS[question]
    assert program(question, SIZES[size](todo)) == program(question, function(todo))


@pytest.mark.parametrize("question", TODOS)
def test_the_whole_function_does_the_todo_and_changes_nothing_else(question: str) -> None:
    """The corpus is honest: the spliced program differs from the untouched starter's (the TODO is
    done), and the function pasted with its TODO untouched is refused as repeating the starter."""
    todo = TODOS[question]
    untouched = Todo(todo.file, (), todo.function)
    spliced = splice(read_report(f"## {question}\n\n```python\n{function(untouched)}```\n"), (question,), SOLUTION)
    assert not spliced.placements[question].placed or program(question, function(todo)) != (
        meaning(spliced.pipeline),
        meaning(spliced.main()),
    )


def test_q5s_assignment_alone_keeps_the_starters_return_and_q6s_if_keeps_its_else() -> None:
    q5 = splice(read_report(f"## Q5\n\n```python\n{changed_lines(TODOS['Q5'])}```\n"), ("Q5",), SOLUTION)
    body = next(s for s in q5.pipeline.body if isinstance(s, ast.FunctionDef) and s.name == "distribute_layers").body
    assert isinstance(body[-1], ast.Return) and ast.unparse(body[-1]) == "return layers_in_current_stage"
    assert "before its `return`" in q5.placements["Q5"].message
    q6 = splice(read_report(f"## Q6\n\n```python\n{block(TODOS['Q6'])}```\n"), ("Q6",), SOLUTION)
    site = next(s for s in q6.main().body if isinstance(s, ast.If) and "get_local_rank() == 0" in ast.unparse(s.test))
    assert ast.unparse(site.orelse[0]) == "train_dl_iterator = None"
    assert q6.placements["Q6"].message.endswith("the starter's `else:` kept")
