"""What an assignment is to the engine: data and a few functions the engine calls, never names.

An :class:`AssignmentPack` holds everything that is one assignment's: its matrix of cases (pure
data), the session-side preparation of each case's inputs and expected values, the rank-side module
whose bodies call the student's functions, the student modules and functions each kind of case
exercises, its default rubric, and what its reports draw.  The engine (all of ``grader/`` outside
``grader/packs/``) reads these and nothing else about an assignment; an import-linter contract
(``pyproject.toml``, run by ``scripts/test.sh``) keeps it from importing a pack.

Packs are found by name.  The entry point group ``grader.packs`` lists the installed ones, so a
course can ship its own pack as a separate distribution; ``module:attribute`` names one that is not
installed (the toy pack of the engine's own tests).  The group ``grader.default_pack`` has one entry,
``pack``: the pack ``grader grade`` uses when neither a rubric nor ``--pack`` names one.  See
docs/ARCHITECTURE.md, "Writing a pack", for a worked example.

What a pack's rank-side bodies raise is the engine's too: :class:`BadReturn` (a student function
returned what the handout does not promise) and :class:`StuckThreads` (the threads runtime's
hang).  They live in ``grader.runtimes``, which every rank imports (this module is the session's),
and are named here so that the whole contract is read in one place.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.runtimes import BadReturn as BadReturn  # re-exported: the contract in one place
from grader.runtimes import RankSide
from grader.runtimes import StuckThreads as StuckThreads

PACKS = "grader.packs"
DEFAULT_PACK = "grader.default_pack"


@dataclass(frozen=True)
class Layout:
    """Where torchrun puts a case's ranks: ``nodes`` hosts with ``per_node`` processes each.

    What a rank is told about its place (``LOCAL_RANK``, ``GROUP_RANK``, ``LOCAL_WORLD_SIZE``, ...)
    depends on it, and a handout's code may read it: on the A4 handout's 4 nodes x 1 process,
    ``LOCAL_RANK`` is 0 on every rank.  Ranks are numbered node by node, as torchrun numbers them.
    """

    nodes: int
    per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node

    def __str__(self) -> str:
        return f"{self.nodes}x{self.per_node}"


_KEEP_EVENTS, _MUST_COMMUNICATE, _MUST_USE, _NAN_HINT, _PROCESSES = (
    "keep_events",
    "must_communicate",
    "must_use",
    "nan_hint",
    "processes",
)


def engine_params(
    *,
    keep_events: bool = False,
    must_communicate: bool = False,
    must_use: str = "",
    nan_hint: str = "",
    processes: int | None = None,
) -> dict[str, Any]:
    """The entries of :attr:`Case.params` the engine reads, typed; a pack merges them into its own.

    ``keep_events``: keep the ranks' message events (trace checks and diagrams).  ``must_communicate``:
    at world size > 1, ranks that agree without a point-to-point message bypassed send/recv.
    ``must_use``: a student function every rank must exchange data through, and the only one data may
    reach a rank through (anything received otherwise is NaN, and a NaN result is ``not_parallel``).
    ``nan_hint``: said when a wrong output holds NaN.  ``processes``: how many rank processes run the
    case, when fewer than its world size (the threads runtime runs a world of N threads in one)."""
    given = {
        _KEEP_EVENTS: keep_events,
        _MUST_COMMUNICATE: must_communicate,
        _MUST_USE: must_use,
        _NAN_HINT: nan_hint,
        _PROCESSES: processes,
    }
    return {key: value for key, value in given.items() if value}


@dataclass(frozen=True)
class Case:
    """One case of a matrix: run by one rank group, decided by one verdict.

    ``params`` go to the rank-side body as they are.  The engine itself reads a few of them, written
    with :func:`engine_params` and read through the typed properties below.
    """

    test: str  # the pytest function of the pack's test file, e.g. "test_allreduce"
    id: str  # its parametrize id, e.g. "ws3-float64-7"
    world_size: int
    kind: str  # which rank-side body runs it (the pack's ``BODIES``)
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    layout: Layout | None = None
    #: why the case weighs nothing in every rubric, while it still runs and is reported: it exercises
    #: nothing its family grades (world size 1), or the handout never runs it so (A4's other launches)
    degenerate: str | None = None

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout.world_size != self.world_size:
            raise ValueError(f"{self.name}: layout {self.layout} is not {self.world_size} ranks")

    @property
    def launch(self) -> Layout:
        """The layout the case runs under: its own, else every rank on one node."""
        return self.layout or Layout(1, self.world_size)

    @property
    def name(self) -> str:
        """The JUnit testcase name pytest writes, which rubric patterns match: ``test[id]``."""
        return f"{self.test}[{self.id}]"

    @property
    def processes(self) -> int:
        """How many rank processes run this case (``engine_params(processes=)``, else one per rank)."""
        return int(self.params.get(_PROCESSES, self.world_size))

    @property
    def keep_events(self) -> bool:
        return bool(self.params.get(_KEEP_EVENTS))

    @property
    def must_communicate(self) -> bool:
        return bool(self.params.get(_MUST_COMMUNICATE))

    @property
    def must_use(self) -> str:
        return str(self.params.get(_MUST_USE) or "")

    @property
    def nan_hint(self) -> str:
        return str(self.params.get(_NAN_HINT) or "")

    def rank_groups(self, handoffs: Collection[str]) -> list[tuple[bool, int]]:
        """The rank groups this case runs in, as (fresh, processes): a group of its size, and for a kind
        that hands off (``AssignmentPack.handoffs``) a second one of fresh ranks of that size."""
        return [(False, self.processes)] + ([(True, self.processes)] if self.kind in handoffs else [])

    def seed(self, salt: str) -> int:
        """The 32-bit seed of this case's inputs under a grading's salt: the same case and salt always
        give the same inputs, and no rank can derive them without the salt.

        32 bits, because that is all a seed is worth here: torch's CPU generator (mt19937) keeps only
        the low 32 bits of ``manual_seed`` (a seed of 2**40 + 5 draws what 5 draws), so a wider value
        would only claim entropy it does not have.  32 bits suffice where it matters: a rank that sees
        its own inputs would have to try ~2**32 generator seeds to rebuild a peer's, hours of CPU
        against a case limit of seconds, and the salt itself (from which the seed is hashed) never
        reaches a rank."""
        return int.from_bytes(hashlib.sha256(f"{salt}|{self.name}".encode()).digest()[:4], "little")


@dataclass
class Prepared:
    """What the session sends to each rank and what it expects back from each (never sent)."""

    inputs: list[dict[str, Any]]  # per rank: name -> tensor
    expected: list[dict[str, Any]]  # per rank: name -> tensor
    tensor_bytes: int = 0  # one rank's main input: the unit trace metrics and time budgets are judged in
    tolerance: dict[str, float] = field(default_factory=dict)  # rtol/atol elementwise, or norm (whole tensor)
    #: for a contract with more than one right answer: the problem with the ranks' outputs ("" when
    #: right), decided in the session instead of comparing with ``expected`` (before, and apart from,
    #: the pack's :attr:`AssignmentPack.judge`, which decides what only the assignment knows to check)
    outputs_problem: Callable[[list[dict[str, Any]]], str] | None = None


def exact_sum(tensors: list[Any]) -> Any:
    """What a sum-reduction of ``tensors`` (one per rank) should give: summed in rank order, in float64
    for floating tensors (and returned in float64; the caller rounds it to the case's dtype), exactly
    for integer ones.  One pass per tensor into one accumulator: stacking them first took three times
    as long for A9's 1M-element cases, with bit-for-bit the same result."""
    import torch  # the session's, never the command's: it grades without torch

    first = tensors[0]
    total = first.to(torch.float64 if first.is_floating_point() else first.dtype, copy=True)  # never an input
    for tensor in tensors[1:]:
        total += tensor
    return total


class Refused(Exception):
    """What the first step of a :class:`Handoff` returned breaks the pack's rule for what may cross:
    the case is ``not_parallel``, and the message says which rule."""


@dataclass(frozen=True)
class Handoff:
    """A kind whose state crosses from one step to the next only through the session.

    The session runs the ``first`` kind in the world size's group, gives ``carry`` the prepared
    inputs and what each rank returned, and runs the kind's own body with what ``carry`` returns in a
    group of fresh rank processes that run nothing else: nothing the first step kept (an attribute,
    a closure, a module global, a file) reaches the second.  ``carry`` sees every rank's return, so
    it can hold the group to a rule (raise :class:`Refused`)."""

    first: str
    carry: Callable[[Case, list[dict[str, Any]], list[dict[str, Any]]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Diagram:
    """A time-vs-rank diagram in each student's report: the messages one student function sent in
    one trace probe (a case whose params have ``keep_events``)."""

    case: str  # the probe's case name
    function: str  # the student function whose messages are drawn
    title: str


@dataclass(frozen=True)
class CodePiece:
    """One piece of a hand-in's graded code, as the similarity check compares it (``grader.similarity``):
    a definition the rubric grades, a notebook's definition, a report's snippet."""

    label: str  # where it is, for the instructor: "collectives.py: my_broadcast", "report.md, Q5 (line 55)"
    source: str


@dataclass(frozen=True)
class AssignmentPack:
    """One assignment, as data and functions the engine calls.

    The session never imports the pack's rank-side module (``bodies``): only rank processes do,
    through the zygote.  Its ``BODIES`` maps each case kind to ``body(student, params, tensors) ->
    tensors``; ``student.module(name)`` imports a student module, ``student.stand_ins`` is where a
    body registers a grader function that runs in the place of a student's.
    """

    id: str
    title: str
    rubric: Path  # the default rubric
    test_file: Path  # one-line pytest tests, one per case family: they make the JUnit names
    bodies: str  # the rank-side module's name
    cases: Callable[[], list[Case]]  # the matrix: pure data, no torch
    prepare: Callable[[Case, str], Prepared]  # session side: a case's inputs and expected values, for a salt
    module_of: Mapping[str, str]  # kind -> the student module its cases import ("src.collectives")
    function_of: Mapping[str, str]  # kind -> the student function it exercises
    #: kind -> functions that, once they failed a case, the grader's own versions replace in this kind's
    #: cases (so one defect is charged once); the body does the replacing (``params["trusted"]``)
    stand_ins: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: student module -> names a placeholder offers when it failed to import (each raises, saying why),
    #: so that a module importing it can still be graded
    placeholders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    imports_before: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # module -> modules it needs
    attributed: tuple[str, ...] = ()  # student functions the messages a rank sends are attributed to
    #: whether a rank imports a case's student module before the case: False for a hand-in whose module
    #: level must never run (A4's script starts NCCL on GPUs); its bodies read definitions out of the source
    imports: bool = True
    #: the runtime its ranks run on (``grader.runtimes.RANK_MODULES``): "torchdist", or "threads", whose
    #: harness every rank of the pack then imports before its bodies
    runtime: str = "torchdist"
    diagram: Diagram | None = None
    handoffs: Mapping[str, Handoff] = field(default_factory=dict)  # kind -> its two steps (see Handoff)
    #: student module -> the submission files that may hold it, first preferred (HW12's notebook, or
    #: the same notebook exported as a script); by default the module's path (``file_of``)
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: session side, after a case passed the engine's checks: ``judge(case, prepared, replies, messages)``
    #: with every rank's reply tensors and the point-to-point messages measured on the wire in the order
    #: they crossed it (``(src, dst, bytes)``; None when the traffic was not measured).  Returns None, or
    #: (verdict value, message) for what only the assignment knows to check (a pipeline schedule's order)
    judge: (
        Callable[[Case, Prepared, list[dict[str, Any]], list[tuple[int, int, int]] | None], tuple[str, str] | None]
        | None
    ) = None
    #: session side: notes for the student about how the hand-in was read (where each snippet of a report
    #: was placed), from the submission's files and never by running them; scoring adds them to the result
    feedback: Callable[[Path], list[str]] | None = None
    #: session side, before a case runs: ``case_data(case, submission root)`` -> params added to the
    #: case's for its ranks, made from the submission's files without running them (a report's snippets
    #: spliced into the grader's starter, so that the rank is sent code, never the grader's answers)
    case_data: Callable[[Case, Path], dict[str, Any]] | None = None
    #: session side: ``review(root)`` -> kind -> the student's words where that kind's code was asked
    #: for and none was given (A5: a question answered in prose only), read from the files alone.  An
    #: item all of whose cases are of such kinds and earn nothing waits for an instructor
    #: (``pending_review``, the words quoted) instead of scoring 0 unread.
    review: Callable[[Path], dict[str, str]] | None = None
    #: session side: ``words(deliverable's path, question)`` -> the student's own words under that question,
    #: for a manual item's ``answer`` (A5: no code, answer form or pasted question text; issue 57).  None:
    #: every word under the question's heading counts
    words: Callable[[Path, str], str] | None = None
    #: what the similarity check compares of a submission: ``compared(submission root)`` -> its graded code;
    #: None: the definitions ``function_of`` names, out of the files of ``module_of``'s modules
    compared: Callable[[Path], list[CodePiece]] | None = None
    #: what is never evidence of copying: the handout's starter.  A folder is read as a hand-in (what
    #: ``compared`` takes out of it), a file is taken whole
    starter: tuple[Path, ...] = ()
    search_path: tuple[str, ...] = ()  # where a pack found by module path was imported from

    @property
    def rank_side(self) -> RankSide:
        """What its ranks import, by name: the runtime's rank-side modules, the bodies, and where they live."""
        return RankSide(self.bodies, self.runtime, self.search_path)

    def case_params(self, case: Case, root: Path) -> dict[str, Any]:
        """What a case's ranks are told: its params, and what ``case_data`` makes of the submission."""
        if self.case_data is None:
            return dict(case.params)
        return {**case.params, **self.case_data(case, root)}

    def case_ids(self) -> list[str]:
        return [case.name for case in self.cases()]

    def degenerate(self) -> dict[str, str]:
        """Case name -> why it weighs nothing (:attr:`Case.degenerate`)."""
        return {case.name: case.degenerate for case in self.cases() if case.degenerate}

    def cases_of(self, test: str) -> list[Case]:
        return [case for case in self.cases() if case.test == test]

    def module_to_import(self, kind: str) -> str:
        """The student module a rank imports before it runs a case of ``kind`` ("" for a pack whose
        student modules must never be imported: its bodies read definitions out of the source)."""
        return self.module_of[kind] if self.imports else ""

    def file_of(self, module: str) -> str:
        """The submission path of a student module: ``src.collectives`` -> ``src/collectives.py``."""
        return self.files_of(module)[0]

    def files_of(self, module: str) -> tuple[str, ...]:
        """Every submission path that may hold a student module, first preferred."""
        return tuple(self.files.get(module, ())) or (module.replace(".", "/") + ".py",)


@functools.lru_cache(maxsize=16)
def load_pack(ref: str | None = None) -> AssignmentPack:
    """The pack named ``ref``: an installed pack's name, ``module:attribute``, or None for the default."""
    if ref is None:
        found = [ep for ep in entry_points(group=DEFAULT_PACK) if ep.name == "pack"]
        if not found:
            raise UserError("no default assignment pack is installed: name one with --pack or a rubric")
        return _checked(found[0].load(), found[0].value)
    if ":" in ref:
        module_name, _, attribute = ref.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserError(f"assignment pack {ref!r}: cannot import {module_name}: {exc}") from exc
        pack = _checked(getattr(module, attribute, None), ref)
        root = _import_root(module)
        return pack if root is None else _with_search_path(pack, root)
    installed = {ep.name: ep for ep in entry_points(group=PACKS)}
    if ref not in installed:
        known = ", ".join(sorted(installed)) or "none"
        raise UserError(f"no assignment pack named {ref!r} is installed (installed: {known})")
    return _checked(installed[ref].load(), ref)


def lazy(target: str) -> Callable[..., Any]:
    """A pack's session hook named ``"module:function"``, imported at its first call: a pack declares
    hooks that need torch (``prepare``, ``judge``, a handoff's ``carry``) without importing torch when
    it is loaded (``grader rubric validate`` needs none), and without a wrapper of its own."""
    module, _, name = target.partition(":")

    def hook(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    hook.__name__ = hook.__qualname__ = name
    hook.__doc__ = f"{target}, imported at its first call"
    return hook


def bundled_rubric(pack_id: str) -> Path:
    """A bundled pack's default rubric: ``rubrics/<id>.yaml`` of a source checkout, else the copy an
    installed wheel packages as ``grader/rubrics/<id>.yaml`` (one file either way, edited in the repo)."""
    package = Path(__file__).resolve().parent
    in_tree = package.parent / "rubrics" / f"{pack_id}.yaml"
    return in_tree if in_tree.exists() else package / "rubrics" / f"{pack_id}.yaml"


def bundled_starter(pack_id: str) -> Path:
    """A bundled pack's starter, as students get it: ``student_template/<id>`` of a source checkout (the
    instructor's install, ``scripts/install.sh``; a wheel does not ship it)."""
    return Path(__file__).resolve().parent.parent / "student_template" / pack_id


def _checked(value: Any, ref: str) -> AssignmentPack:
    if not isinstance(value, AssignmentPack):
        raise UserError(f"assignment pack {ref!r} is not an AssignmentPack")
    return value


def _import_root(module: Any) -> str | None:
    """The sys.path entry a module was imported from, when it is not an installed one."""
    file = getattr(module, "__file__", None)
    if file is None:
        return None
    root = Path(file).resolve().parent
    for _ in range(module.__name__.count(".") + (Path(file).name == "__init__.py")):
        root = root.parent
    return None if any(Path(p).resolve() == root for p in sys.path if "site-packages" in p) else str(root)


def _with_search_path(pack: AssignmentPack, root: str) -> AssignmentPack:
    from dataclasses import replace

    return replace(pack, search_path=(root,))
