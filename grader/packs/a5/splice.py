"""A report's snippets placed at their TODO sites in the grader's trusted starter (``starter/``).

Each question that asks for code has a site in ``pipeline_parallel.py`` or in ``test.py``'s ``main``.
A snippet is placed by its shape, whatever its formatting (statements are compared as ASTs):

- a ``def`` of the starter's function (Q5 ``distribute_layers``, Q7 ``pipeline_communicate``)
  replaces that function, under any heading or none;
- a whole loop or ``if`` replaces the starter's loop or ``if`` of that question (Q4, Q6, Q8, Q9, Q10);
  two loops under Q8 replace the forward and the backward loop;
- a ``def main`` (the whole of ``test.py``'s function, pasted with the question's TODO done) gives
  the question's part of it (its segment, ``SEGMENTS``);
- otherwise the lines are the TODO's: Q4's and Q10's loop body, Q8's steps 1-4, Q2's assertions,
  Q3's ``tensor_shapes``, Q5's body or only the lines it changed (``layers_in_current_stage = ...``:
  the starter's ``return`` is kept), Q7's four ``if ...: return`` lines in order, and a lone
  ``if cond:`` gives Q6's, Q8's step 4's or Q9's condition; an ``if`` pasted without the starter's
  ``else:`` keeps that ``else:``.

Lines of the starter a snippet repeats as context (``model = MyDummyModel(...)``) are recognised
and left as given.  What happened is said per question (:class:`Placement`); a snippet that cannot be
placed fails its own question only: its site keeps the starter's TODO, which fails that question's
cases with the reason.  Nothing here executes code.
"""

from __future__ import annotations

import ast
import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.handin.report import Report, read_report
from grader.packs.a5 import tree
from grader.packs.a5.questions import read
from grader.packs.a5.snippets import Parsed, defines, parse_blocks, same
from grader.packs.a5.tree import segment

STARTER = Path(__file__).resolve().parent / "starter"
#: the grader's own answers: read here, in the session, and never sent to a rank whole (``program``)
SOLUTION = Path(__file__).resolve().parent / "solution.md"
CODE_QUESTIONS = ("Q2", "Q3", "Q4", "Q5", "Q6", "Q7", "Q8", "Q9", "Q10")
#: the function whose definition is the whole answer, and where it lives
DEFINED = {"Q5": "distribute_layers", "Q7": "pipeline_communicate"}


class Unplaceable(Exception):
    """Why a question's snippet has no place: said to the student, charged to that question."""


@dataclass
class Placement:
    question: str
    placed: bool
    message: str  # what was found and where it went, or why not


@dataclass
class Spliced:
    """The starter with the snippets in: ``pipeline_parallel.py`` and ``test.py``'s main, as ASTs."""

    pipeline: ast.Module
    test: ast.Module
    placements: dict[str, Placement] = field(default_factory=dict)

    def main(self) -> ast.FunctionDef:
        return next(s for s in self.test.body if isinstance(s, ast.FunctionDef) and s.name == "main")


def starter(name: str) -> ast.Module:
    return ast.parse((STARTER / name).read_text(), name)


def _is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _assigns(stmt: ast.stmt, name: str) -> bool:
    """Whether ``stmt`` binds ``name`` (``name = ...``, ``a, name = ...``, ``name += ...``)."""
    if isinstance(stmt, ast.Assign):
        targets = [e for t in stmt.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    else:
        return False
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


#: The segments of ``main`` in order, each opened by the first statement that matches: the rank side
#: runs the segments a case needs (``bodies``).  A snippet placed over a segment's statements takes
#: that segment's name.
SEGMENTS: tuple[tuple[str, Callable[[ast.stmt], bool]], ...] = (
    ("init", lambda s: True),
    ("q2", lambda s: isinstance(s, ast.Assert)),
    ("data", lambda s: _assigns(s, "number_of_microbatches")),
    ("model", lambda s: _assigns(s, "output_tensors_no_pp")),
    ("q3", lambda s: _assigns(s, "tensor_shapes")),
    ("q4", lambda s: isinstance(s, ast.For)),
    ("stage", lambda s: _assigns(s, "model_stage")),
    ("q6", lambda s: isinstance(s, ast.If)),
    ("q8", lambda s: _assigns(s, "output_tensors_pp")),
    ("q9", lambda s: isinstance(s, ast.If)),
    ("q10", lambda s: isinstance(s, ast.For)),
    ("end", lambda s: isinstance(s, ast.Expr) and "barrier" in ast.dump(s)),
)


class _Main:
    """The statements of the starter's ``main``, each labelled with its segment."""

    def __init__(self, main: ast.FunctionDef) -> None:
        self.body = main.body
        #: the given statements as ``ast.dump`` s (``snippets.same``), taken before any is replaced: for
        #: recognising context lines, each dumped once instead of once per line compared with it
        self.given = frozenset(ast.dump(s) for s in main.body)
        order = iter(SEGMENTS)
        current, upcoming = next(order), next(order, None)
        for stmt in self.body:
            if upcoming is not None and upcoming[1](stmt):
                current, upcoming = upcoming, next(order, None)
            stmt.a5_segment = current[0]  # type: ignore[attr-defined]

    def replace(self, start: int, stop: int, statements: list[ast.stmt]) -> None:
        """``body[start:stop] = statements``, the new statements taking the replaced ones' segment."""
        label = segment(self.body[start])
        for stmt in statements:
            stmt.a5_segment = label  # type: ignore[attr-defined]
        self.body[start:stop] = statements

    def find(self, name: str, kind: type[ast.stmt] = ast.stmt, after: int = -1) -> int:
        """The first statement of segment ``name`` of type ``kind`` (after index ``after``)."""
        for i, stmt in enumerate(self.body):
            if i > after and segment(stmt) == name and isinstance(stmt, kind):
                return i
        raise Unplaceable(f"the starter's {name} site was already replaced")

    def is_given(self, stmt: ast.stmt) -> bool:
        return ast.dump(stmt) in self.given


def _context_dropped(statements: list[ast.stmt], main: _Main) -> list[ast.stmt]:
    return [s for s in statements if not main.is_given(s)]


# --- one placement per question -------------------------------------------------------------------


def _place_q2(statements: list[ast.stmt], main: _Main) -> str:
    first = main.find("q2")
    mine = _context_dropped(statements, main)
    if not any(isinstance(s, ast.Assert) for s in ast.walk(ast.Module(mine, []))):
        raise Unplaceable("no assert statement in it")
    main.replace(first, first + 2, mine)
    return "replaced the two `assert True  # TODO` lines of test.py"


def _place_q3(statements: list[ast.stmt], main: _Main) -> str:
    at = main.find("q3")
    mine = _context_dropped(statements, main)
    if len(mine) == 1 and isinstance(mine[0], ast.Expr) and isinstance(mine[0].value, ast.Tuple | ast.List):
        value = mine[0].value  # the shape written alone: the value of tensor_shapes
        mine = [
            ast.fix_missing_locations(
                ast.copy_location(ast.Assign([ast.Name("tensor_shapes", ast.Store())], value), value)
            )
        ]
    if not any(_assigns(s, "tensor_shapes") for s in mine):
        raise Unplaceable("it assigns no `tensor_shapes`")
    main.replace(at, at + 1, mine)
    return "replaced `tensor_shapes = (True, True, True)` in test.py"


def _place_q4(statements: list[ast.stmt], main: _Main) -> str:
    at = main.find("q4", ast.For)
    mine = _context_dropped(statements, main)
    loops = [s for s in mine if isinstance(s, ast.For)]
    if loops:
        main.replace(at, at + 1, mine)
        return "a whole loop: replaced test.py's baseline loop"
    loop = main.body[at]
    assert isinstance(loop, ast.For)
    append = loop.body[0]
    if not any(same(s, append) for s in mine):  # the given append goes after the forward pass
        forward = [i for i, s in enumerate(mine) if _assigns(s, "output")]
        where = forward[-1] + 1 if forward else len(mine)
        mine.insert(where, append)
    loop.body = mine
    return "the loop's lines: placed in the body of test.py's baseline loop"


def _condition(statements: list[ast.stmt]) -> ast.expr | None:
    """``if cond:`` written alone (its body completed with ``pass``): the condition."""
    if len(statements) == 1 and isinstance(statements[0], ast.If):
        body = statements[0].body
        if len(body) == 1 and isinstance(body[0], ast.Pass) and not statements[0].orelse:
            return statements[0].test
    return None


def _place_if(at: int, statements: list[ast.stmt], main: _Main, what: str) -> str:
    mine = _context_dropped(statements, main)
    cond = _condition(mine)
    site = main.body[at]
    assert isinstance(site, ast.If)
    if cond is not None:
        site.test = cond
        return f"the condition: replaced `if True:  # TODO` of {what}"
    kept = ""
    if len(mine) == 1 and isinstance(mine[0], ast.If) and not mine[0].orelse and site.orelse:
        mine[0].orelse = site.orelse  # the `else:` it did not change, so did not repeat
        kept = ", the starter's `else:` kept"
    main.replace(at, at + 1, mine)
    return f"replaced the `if True:` block of {what}{kept}"


def _place_q6(statements: list[ast.stmt], main: _Main) -> str:
    at = main.find("q6", ast.If)
    return _place_if(at, statements, main, "test.py's dataloader choice")


def _place_q8(statements: list[ast.stmt], main: _Main) -> str:
    forward = main.find("q8", ast.For)
    backward = main.find("q8", ast.For, forward)
    mine = _context_dropped(statements, main)
    loops = [s for s in mine if isinstance(s, ast.For)]
    if len(loops) >= 2:
        main.replace(forward, backward + 1, mine)
        return "whole loops: replaced test.py's forward and backward loops"
    if loops:
        main.replace(forward, forward + 1, mine)
        return "a whole loop: replaced test.py's forward loop"
    loop = main.body[forward]
    assert isinstance(loop, ast.For)
    given = [copy.deepcopy(s) for s in loop.body]
    lines = [s for s in mine if not any(same(s, g) for g in given)]
    losses = [i for i, s in enumerate(lines) if isinstance(s, ast.If) and _names(s) & {"mean", "loss", "backward"}]
    step4 = losses[-1] if losses else len(lines)  # the `if` that computes the loss is step 4's
    before, after = lines[:step4], lines[step4:]
    send = next(i for i, s in enumerate(given) if "send_forward" in ast.dump(s))
    todo = next(i for i, s in enumerate(given) if isinstance(s, ast.If) and _is_true(s.test))
    cond = _condition(after)
    if cond is not None:
        given[todo].test = cond  # type: ignore[attr-defined]
        after = []
    body = given[:send]
    body += before + given[send:todo] + (after or [given[todo]]) + given[todo + 1 :]
    loop.body = body
    return "the loop's lines: steps 1-3 before the send, step 4 at the loss's `if`, in test.py's forward loop"


def _place_q9(statements: list[ast.stmt], main: _Main) -> str:
    at = main.find("q9", ast.If)
    return _place_if(at, statements, main, "test.py's output check")


def _place_q10(statements: list[ast.stmt], main: _Main) -> str:
    at = main.find("q10", ast.For)
    mine = _context_dropped(statements, main)
    if any(isinstance(s, ast.For) for s in mine):
        main.replace(at, at + 1, mine)
        return "a whole loop: replaced test.py's gradient-check loop"
    main.body[at].body = mine  # type: ignore[attr-defined]
    return "the loop's lines: placed in the body of test.py's gradient-check loop"


def _place_q5(statements: list[ast.stmt], pipeline: ast.Module) -> str:
    target = defines(pipeline.body, "distribute_layers")[0]
    if any(isinstance(s, ast.Return) for s in ast.walk(ast.Module(statements, []))):
        target.body = statements
        return "the function's body: placed in pipeline_parallel.py's distribute_layers"
    # Only the lines the TODO changed: they take the place of the starter's lines binding the same
    # names, and the starter's other lines (its `return`) stay.
    rebound = _bound(statements)
    given = [i for i, s in enumerate(target.body) if any(_assigns(s, name) for name in rebound)]
    if not given:
        raise Unplaceable(
            "neither a `def distribute_layers`, its body with a `return`, nor lines that assign "
            "`layers_in_current_stage` as the starter's TODO does"
        )
    kept = [s for i, s in enumerate(target.body) if i not in given]
    target.body = kept[: given[0]] + statements + kept[given[0] :]
    return "the lines of the TODO: placed in pipeline_parallel.py's distribute_layers, before its `return`"


def _bound(statements: list[ast.stmt]) -> set[str]:
    """The plain names ``statements`` assign at their top level."""
    return {name for stmt in statements for name in _names(stmt) if _assigns(stmt, name)}


def _place_q7(statements: list[ast.stmt], pipeline: ast.Module) -> str:
    target = defines(pipeline.body, "pipeline_communicate")[0]
    sites = [s for s in ast.walk(target) if isinstance(s, ast.If) and _is_true(s.test)]
    mine = [
        s
        for s in ast.walk(ast.Module(statements, []))
        if isinstance(s, ast.If) and len(s.body) == 1 and isinstance(s.body[0], ast.Return | ast.Pass)
    ]
    if len(mine) != len(sites):
        raise Unplaceable(
            f"neither a `def pipeline_communicate` nor the {len(sites)} `if ...: return` lines in order "
            f"(found {len(mine)})"
        )
    for site, line in zip(sites, mine, strict=True):
        site.test = line.test
    return "the four conditions, in order: placed in pipeline_parallel.py's pipeline_communicate"


_IN_MAIN: dict[str, Callable[[list[ast.stmt], _Main], str]] = {
    "Q2": _place_q2,
    "Q3": _place_q3,
    "Q4": _place_q4,
    "Q6": _place_q6,
    "Q8": _place_q8,
    "Q9": _place_q9,
    "Q10": _place_q10,
}


def _place(question: str, parsed: Parsed, spliced: Spliced, main: _Main) -> str:
    function = DEFINED.get(question)
    statements = parsed.statements
    if function is not None:
        found = defines(statements, function)
        if len(found) > 1:
            raise Unplaceable(f"it defines {function} {len(found)} times")
        if found:
            old = defines(spliced.pipeline.body, function)[0]
            spliced.pipeline.body[spliced.pipeline.body.index(old)] = found[0]
            return f"`def {function}`: replaced pipeline_parallel.py's {function}"
        place = _place_q5 if question == "Q5" else _place_q7
        return place(statements, spliced.pipeline)
    if defines(statements, "main"):
        return _place_from_main(question, statements, main)
    if not _context_dropped(statements, main):
        raise Unplaceable("it only repeats lines the starter gives (the TODO is still to do)")
    return _IN_MAIN[question](statements, main)


def _place_from_main(question: str, statements: list[ast.stmt], main: _Main) -> str:
    """A whole ``def main`` under a question: that question's segment of it replaces the starter's."""
    found = defines(statements, "main")
    if len(found) > 1:
        raise Unplaceable(f"it defines main {len(found)} times")
    name = question.lower()
    theirs = [s for s in _Main(found[0]).body if segment(s) == name]
    if not theirs:
        raise Unplaceable(f"its main has no {question} part (the starter's TODO site was not found in it)")
    at = [i for i, s in enumerate(main.body) if segment(s) == name]
    if all(main.is_given(s) for s in theirs):
        raise Unplaceable(f"its main leaves {question}'s TODO as the starter gives it")
    main.replace(at[0], at[-1] + 1, theirs)
    return f"`def main`: its {question} part replaced test.py's"


def splice(report: Report, questions: tuple[str, ...] = CODE_QUESTIONS, others: Report | None = None) -> Spliced:
    """The starter with the report's snippets for ``questions`` placed, and for every other code
    question the snippet of ``others`` (the grader's own answers), or its TODO without it."""
    spliced = Spliced(starter("pipeline_parallel.py"), starter("test.py"))
    main = _Main(spliced.main())
    for question in CODE_QUESTIONS:
        if question not in questions:
            if others is not None:
                _place_trusted(question, others, spliced, main)
            continue
        answer = report.answer(question)
        blocks = answer.code if answer is not None else []
        from_unheaded = ""
        if not blocks and question in DEFINED:  # a def names its question, heading or not
            unheaded = [b for b in report.unheaded if defines(parse_blocks([b]).statements, DEFINED[question])]
            if len(unheaded) > 1:
                lines = ", ".join(str(b.line) for b in unheaded)
                spliced.placements[question] = Placement(
                    question, False, f"{DEFINED[question]} is defined in several blocks (lines {lines})"
                )
                continue
            blocks, from_unheaded = unheaded, " (found outside any question's heading)"
        if answer is None and not blocks:
            why = "answered more than once: none is graded" if question in report.duplicated else ""
            why = why or f"no answer under a {question} heading"
            spliced.placements[question] = Placement(question, False, why)
            continue
        parsed = parse_blocks(blocks)
        if not parsed.statements:
            where = f"the answer under its heading (line {answer.line})" if answer is not None else "the report"
            spliced.placements[question] = Placement(question, False, f"{where}: {parsed.problem}")
            continue
        where = ", ".join(str(n) for n in parsed.lines)
        try:
            how = _place(question, parsed, spliced, main)
        except Unplaceable as exc:
            spliced.placements[question] = Placement(question, False, f"the snippet at line {where}: {exc}")
            continue
        note = f"; {parsed.note}" if parsed.note else ""
        spliced.placements[question] = Placement(
            question, True, f"the snippet at line {where}{from_unheaded}: {how}{note}"
        )
    ast.fix_missing_locations(spliced.test)
    ast.fix_missing_locations(spliced.pipeline)
    return spliced


def _place_trusted(question: str, answers: Report, spliced: Spliced, main: _Main) -> None:
    """The grader's own answer to a question the case does not grade (one defect is charged once)."""
    answer = answers.answer(question)
    assert answer is not None, f"the grader's answers lack {question}"
    parsed = parse_blocks(answer.code)
    for stmt in parsed.statements:  # the grader's lines: a traceback through them names the starter, not the report
        stmt.a5_report = False  # type: ignore[attr-defined]
    _place(question, parsed, spliced, main)


@functools.cache
def _solution() -> Report:
    return read_report(SOLUTION.read_text())


def program(report: str | None, question: str) -> dict[str, str]:
    """A case's data for its ranks: the starter with the report's snippet for ``question`` and the
    grader's answers to the other questions, as statements (``tree``), under ``program``; or, when the
    snippet cannot be placed, why (``unplaced``).  The grader's answer to ``question`` is in neither.

    Every case of a question gets the same program, so it is spliced once per report and question:
    splicing took 41 ms, in the session, before each of A5's 33 cases (issue 23)."""
    return dict(_program(report, question))


@functools.lru_cache(maxsize=2 * len(CODE_QUESTIONS))  # one grading's questions, for a report or none
def _program(report: str | None, question: str) -> dict[str, str]:
    if report is None:
        return {"unplaced": "report.md is missing from the submission"}
    spliced = splice(read(report), (question,), others=_solution())
    placement = spliced.placements[question]
    if not placement.placed:
        return {"unplaced": f"{question}: {placement.message}"}
    statements = {"model": starter("model.py").body, "pipeline": spliced.pipeline.body, "main": spliced.main().body}
    return {"program": tree.dumps(statements)}
