"""Copy only the files the rubric names from a submission into a fresh sandbox directory.

A submission may arrive as a directory (a student repo with ``src/``, or a flat directory), a
``.zip``/``.tar.gz``/``.tgz``/``.tar`` archive, a git URL, a bare git repository, or a local git
checkout.  Whatever the form, the sandbox receives the rubric's student files at the paths the rubric
names (every folder on the way gets a fresh empty ``__init__.py``: A9's ``src/``) and its deliverables
at the top, and nothing else: a shipped
``conftest.py``, ``pytest.ini``, ``sitecustomize.py``, ``.pth`` file or ``torch/`` package never
reaches it, because nothing is copied by pattern.

Where the files are looked for (the *search rule*):

1. A student file named ``src/collectives.py`` by the rubric is taken from ``<root>/src/collectives.py``,
   else from ``<root>/collectives.py`` (flat layout).
2. ``<root>`` is the submission itself when it holds any student file in either layout.  Otherwise
   every directory down to :data:`SEARCH_DEPTH` levels (hidden directories, ``__MACOSX`` and
   ``__pycache__`` skipped) that does is a candidate, and the shallowest one wins: this finds the
   single repo directory a GitHub Classroom download or a zipped folder wraps the work in.  Two
   candidates at the same depth are a :class:`~grader.errors.UserError` (a class folder passed for
   one submission).
3. Where the rubric says what the hand-in holds (``hand_in``: HW12's notebook, A4's script, A5's
   report), names decide nothing: ``<root>`` is the submission (below any folders that only wrap
   one folder), every file below it with a student file's suffix is a candidate, whatever its
   name, folder or archive, and :mod:`grader.candidates` takes one by what it holds (never the
   pack's untouched starter over other work).  A note names the candidates, what decided and where
   the taken file is, unless it was the only one and at ``<root>`` under the rubric's own name; one
   from a subfolder or chosen over others is flagged (``SubmissionInfo.chosen``).  Without any, the
   student file is missing and the problem lists what the submission held.
4. A deliverable is taken from ``<root>/<name>``, else from the one file of that name anywhere
   below ``<root>``.  Deliverables sharing a stem (``x.md``/``x.pdf``) are alternatives: one of
   them present is enough.  A deliverable with a student file's name (A5's ``report.md``) is that
   student file, found by rule 3.

Nothing is ever read through a symbolic link: every path component is opened with ``O_NOFOLLOW``
relative to its parent (:mod:`grader.nolinks`), so ``src -> /elsewhere`` is refused like
``collectives.py -> /elsewhere``.  A hard link, FIFO, device or socket is refused too, and so is
every such member of an archive (:mod:`grader.archives`).

Nothing in a submission runs here either: a git repository is read as data by
:mod:`grader.gitread`, never by ``git``, which would run programs the repository's config names.
Every walk is breadth first and bounded (:data:`MAX_DEPTH`, :data:`MAX_ENTRIES`), every name that
reaches a message is made printable (:func:`grader.text.shown`), and what was refused or cut short
is a problem in plain words: no submission makes the intake fail for any other reason than that
nothing can be graded.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from grader import archives, candidates, gitread
from grader.errors import UserError
from grader.filenames import entries_named, name_matches
from grader.nolinks import Refused, open_nofollow
from grader.results import FILE_CHOSEN, FILE_IN_SUBFOLDER, ChosenFile, SubmissionInfo
from grader.submission_time import SubmittedAt, resolve
from grader.text import shown

if TYPE_CHECKING:
    from grader.rubric import Rubric
    from grader.rubric.model import HandIn

SEARCH_DEPTH = 3  # levels searched for the directory that holds the student files
MAX_DEPTH = 64  # folder levels searched for a deliverable, and kept from an archive
MAX_ENTRIES = 50_000  # files and folders looked at in one submission
_SKIP_DIRS = frozenset({"__MACOSX", "__pycache__", "node_modules"})


@dataclass(frozen=True)
class Intake:
    sandbox: Path  # = dest: src/<student files>, src/__init__.py, <deliverables>
    info: SubmissionInfo
    present: frozenset[str]  # rubric names (student files and deliverables) that were copied
    problems: list[str]  # plain-English reasons a named file is absent, also in ``info.problems``
    #: the rubric's student files that were found and copied, sorted: what static analysis reads and
    #: the matrix imports (every command asks this, never ``present`` again)
    student_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Copied:
    digest: str  # "sha256:<hex>"
    rubric_name: str  # as the rubric spells it, e.g. "src/collectives.py"
    found: str  # where it was in the submission, e.g. "collectives.py" (flat layout)


@dataclass
class _Budget:
    """Byte limits of the copy (and of an archive's extraction: ``archives.Bounds``)."""

    max_file: int
    max_total: int
    used: int = 0  # bytes copied into the sandbox
    looked_at: int = 0  # directory entries scanned, against MAX_ENTRIES
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how a file was found, when not by its name
    chosen: list[ChosenFile] = field(default_factory=list)  # files from a subfolder or chosen over others

    def note(self, problem: str) -> None:
        """Record a problem once, however many times it is met."""
        if problem not in self.problems:
            self.problems.append(problem)


def take(
    source: str | Path,
    rubric: Rubric,
    dest: Path,
    submitted_at: SubmittedAt | None = None,
    trust_commit_time: bool = False,
) -> Intake:
    """:func:`materialize` with what ``rubric`` names and allows: how every command that reads a
    submission (grade, check, batch's cache key, bench) takes it, so none can disagree with another."""
    return materialize(
        source,
        student_files=list(rubric.student_files),
        deliverables=[d.any_of for d in rubric.deliverables.values()],
        dest=dest,
        max_file_bytes=rubric.limits.file_size_mb << 20,
        max_total_bytes=rubric.limits.submission_mb << 20,
        submitted_at=submitted_at,
        trust_commit_time=trust_commit_time,
        hand_in=rubric.hand_in,
        starters=candidates.starter_prints(rubric),
    )


def materialize(
    source: str | Path,
    student_files: list[str],
    deliverables: list[tuple[str, ...]],
    dest: Path,
    max_file_bytes: int,
    max_total_bytes: int,
    submitted_at: SubmittedAt | None = None,
    trust_commit_time: bool = False,
    hand_in: HandIn | None = None,
    starters: frozenset[str] = frozenset(),
) -> Intake:
    """Build the sandbox ``dest`` (created; must not exist or be empty) from ``source``.

    ``deliverables`` holds each deliverable's alternative names (``("answers.md", "answers.pdf")``),
    reported missing only when none of them is there.  ``submitted_at`` is the most trusted time
    given by the caller (``grader.submission_time``); without one, the commit's date counts only
    with ``trust_commit_time``.  ``hand_in`` finds the student files by what they hold, and
    ``starters`` tells the pack's starter files apart (the search rule's 3).  Raises
    :class:`UserError` only when nothing can be graded: the source does not exist, is an unreadable
    archive, cannot be fetched, or holds several submissions.
    """
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty: the sandbox must be fresh")
    budget = _Budget(max_file_bytes, max_total_bytes)
    with tempfile.TemporaryDirectory(prefix="grader-intake-") as tmp:
        wanted = student_files + [n for d in deliverables for n in d]
        if hand_in is not None:  # a git repository exports every file of a student file's kind
            wanted += sorted({"*" + PurePosixPath(name).suffix for name in student_files})
        top, head = _unpack(str(source), Path(tmp), budget, wanted)
        root = _root(top, student_files, budget, hand_in)
        files = _copy_all(root, student_files, deliverables, dest, budget, hand_in, starters)
        if head is None and os.path.lexists(top / ".git"):  # a checkout: graded as in its working tree
            head = _checkout_head(top, root, files, budget)
    digests = {name: copied.digest for name, copied in sorted(files.items())}
    lines = "".join(f"{name}:{digest}\n" for name, digest in digests.items())
    when = resolve(submitted_at, head.committed_at if head else None, trust_commit_time)
    info = SubmissionInfo(
        source=shown(str(source)),
        files=digests,
        digest="sha256:" + hashlib.sha256(lines.encode()).hexdigest(),
        commit=head.commit if head else None,
        submitted_at=when.value,
        problems=list(budget.problems),
        submitted_at_source=when.source,
        notes=list(budget.notes),
        chosen=list(budget.chosen),
    )
    present = frozenset(copied.rubric_name for copied in files.values())
    found = tuple(sorted(f for f in student_files if f in present))
    return Intake(sandbox=dest, info=info, present=present, problems=list(budget.problems), student_files=found)


def watched(directory: Path, rubric: Rubric) -> frozenset[Path]:
    """The files of the submission ``directory`` that :func:`take` reads for ``rubric``, and the places
    it looks first for those it does not find there (``<root>/<name>``, flat or in the rubric's
    layout): what ``grader grade --watch`` polls for a change.  Nothing is copied; a candidate the
    hand-in rule did not choose, or a deliverable that may appear deeper, is not among them."""
    student_files = list(rubric.student_files)
    deliverables = [d.any_of for d in rubric.deliverables.values()]
    budget = _Budget(rubric.limits.file_size_mb << 20, rubric.limits.submission_mb << 20)
    root = _root(directory, student_files, budget, rubric.hand_in)
    located = _locate(root, student_files, deliverables, budget, rubric.hand_in, candidates.starter_prints(rubric))
    first = {root / place for name, _, _ in located for place in (name, PurePosixPath(name).name) if "*" not in name}
    return frozenset(first | {root / found for _, found, _ in located if found is not None})


# --- where the submission comes from -------------------------------------------------------------


def _unpack(source: str, tmp: Path, budget: _Budget, wanted: list[str]) -> tuple[Path, gitread.Head | None]:
    """Return (directory to search, the commit when the files came out of one) for any form of ``source``."""
    path = Path(source)
    if gitread.is_url(source) or (path.is_dir() and gitread.is_bare_repository(path)):
        names = sorted({PurePosixPath(w).name for w in wanted})
        head = gitread.export(source, tmp / "export", names, budget.max_file, budget.max_total)
        for note in head.notes:
            budget.note(note)
        return tmp / "export", head
    if not path.exists():
        raise UserError(f"{shown(source)} does not exist")
    if path.is_dir():
        return path, None
    out = tmp / "archive"
    out.mkdir()
    extraction = archives.Bounds(budget.max_file, budget.max_total, MAX_DEPTH)
    archives.extract(path, out, extraction, wanted)
    for problem in extraction.problems:
        budget.note(problem)
    return out, None


def _checkout_head(top: Path, root: Path, files: dict[str, _Copied], budget: _Budget) -> gitread.Head:
    """The checkout's last commit, and which copied files differ from it: the commit recorded is
    then not exactly what ran."""
    where = {name: str((root / copied.found).relative_to(top)) for name, copied in files.items()}
    head = gitread.read_head(top, sorted(where.values()))
    for note in head.notes:
        budget.note(note)
    if head.commit is not None:
        for name, copied in sorted(files.items()):
            if head.blobs.get(where[name]) != copied.digest:
                budget.note(f"{shown(copied.found)} differs from the last commit: graded as in the working tree")
    return head


# --- the search rule -----------------------------------------------------------------------------


def _student_path(root: Path, rubric_name: str) -> str | None:
    """Where ``rubric_name`` lives under ``root`` (rubric layout first, then flat), by lstat only."""
    for candidate in (rubric_name, PurePosixPath(rubric_name).name):
        if os.path.lexists(root / candidate):
            return candidate
    return None


def _walk(top: Path, max_depth: int, budget: _Budget) -> Iterator[tuple[Path, int, list[os.DirEntry[str]]]]:
    """Directories below ``top`` breadth first, with their depth and entries (hidden folders,
    ``__MACOSX`` and the like are not entered), never through a symlink, within ``max_depth`` levels
    and :data:`MAX_ENTRIES` entries per submission: a tree of any shape is walked in bounded time
    and memory, and a cut is noted."""
    queue: deque[tuple[Path, int]] = deque([(top, 0)])
    while queue:
        directory, depth = queue.popleft()
        entries = _scan(directory, budget)
        yield directory, depth, entries
        subdirs = [e for e in entries if e.is_dir(follow_symlinks=False) and not _skipped(e.name)]
        if depth < max_depth:
            queue.extend((Path(e.path), depth + 1) for e in subdirs)
        elif subdirs and max_depth == MAX_DEPTH:
            budget.note(f"folders nest over {MAX_DEPTH} levels deep: the search stopped there")


def _scan(directory: Path, budget: _Budget) -> list[os.DirEntry[str]]:
    entries: list[os.DirEntry[str]] = []
    try:
        with os.scandir(directory) as scan:
            for entry in scan:
                budget.looked_at += 1
                if budget.looked_at > MAX_ENTRIES:
                    budget.note(f"the submission holds over {MAX_ENTRIES} files and folders: the search stopped there")
                    break
                entries.append(entry)
    except OSError:
        pass  # unreadable, or a path too long to name: nothing to find there
    return sorted(entries, key=lambda e: e.name)


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in _SKIP_DIRS


def _root(top: Path, student_files: list[str], budget: _Budget, hand_in: HandIn | None) -> Path:
    """Where the submission's files are: by the student files' names (rule 2), or, where content
    decides (rule 3), below the folders that only wrap one folder (a Classroom download, a zipped folder)."""
    if hand_in is None:
        return _find_root(top, student_files, budget)
    root = top
    for _ in range(SEARCH_DEPTH):
        entries = [e for e in _scan(root, budget) if not _skipped(e.name)]
        if len(entries) != 1 or not entries[0].is_dir(follow_symlinks=False):
            break
        root = Path(entries[0].path)
    return root


def _find_root(top: Path, student_files: list[str], budget: _Budget) -> Path:
    """The shallowest directory holding a student file (see the search rule above)."""
    hits: list[tuple[int, Path]] = []
    for directory, depth, _ in _walk(top, SEARCH_DEPTH, budget):
        if hits and depth > hits[0][0]:
            break
        if any(_student_path(directory, f) for f in student_files):
            hits.append((depth, directory))
    if len(hits) > 1:
        names = ", ".join(shown(str(h.relative_to(top))) for _, h in hits[:5])
        raise UserError(f"{shown(str(top))} holds several submissions ({names}): grade one at a time")
    return hits[0][1] if hits else top


def _find_deliverables(root: Path, names: list[str], budget: _Budget) -> dict[str, str | None]:
    """Where each deliverable is: ``root/<name>``, else the one entry of that name below ``root``.  A
    name with ``*`` is a pattern (``*.log``): the first match at ``root``, else the one match below."""
    found: dict[str, str | None] = {name: _at_root(root, name) for name in names}
    missing = {name for name, where in found.items() if where is None}
    if not missing:
        return found
    matches: dict[str, list[str]] = {name: [] for name in missing}
    for directory, _, entries in _walk(root, MAX_DEPTH, budget):
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                continue
            for name in missing:
                if name_matches(entry.name, name):
                    matches[name].append(str(Path(directory, entry.name).relative_to(root)))
    for name, places in sorted(matches.items()):
        if len(places) == 1:
            found[name] = places[0]
        elif places:
            budget.note(f"{name} is in several places ({', '.join(shown(p) for p in places[:3])}): none was taken")
    return found


def _at_root(root: Path, name: str) -> str | None:
    found = [path.name for path in entries_named(root, name) if os.path.lexists(path)]
    return found[0] if found else None


# --- copying -------------------------------------------------------------------------------------


def _copy_all(
    root: Path,
    student_files: list[str],
    deliverables: list[tuple[str, ...]],
    dest: Path,
    budget: _Budget,
    hand_in: HandIn | None = None,
    starters: frozenset[str] = frozenset(),
) -> dict[str, _Copied]:
    """Copy what the rubric names; return what was copied by its path in the sandbox."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in student_files:  # each folder of a student file is a package (``src/`` of A9), made fresh
        folder = PurePosixPath(name).parent
        for depth in range(1, len(folder.parts) + 1):
            package = dest.joinpath(*folder.parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").write_bytes(b"")
    copied: dict[str, _Copied] = {}
    for name, found, sandbox_name in _locate(root, student_files, deliverables, budget, hand_in, starters):
        if found is not None and (digest := _copy_one(root, found, dest / sandbox_name, budget)) is not None:
            copied[sandbox_name] = _Copied(digest, name, found)
    present = {c.rubric_name for c in copied.values()}
    for alternatives in _formats(student_files) + list(deliverables):
        if not present.intersection(alternatives):
            budget.note(f"{' or '.join(alternatives)} is missing")
    _lock_down(dest)
    return copied


def _locate(
    root: Path,
    student_files: list[str],
    deliverables: list[tuple[str, ...]],
    budget: _Budget,
    hand_in: HandIn | None,
    starters: frozenset[str] = frozenset(),
) -> list[tuple[str, str | None, str]]:
    """(rubric name, where it is below ``root`` or None, its name in the sandbox) for every file the
    rubric names: the search rule's 1, 3 and 4."""
    if hand_in is None:
        wanted = [(name, _student_path(root, name), name) for name in student_files]
    else:
        recognised = _recognise(root, student_files, hand_in, budget, starters)
        wanted = [(name, recognised.get(name), name) for name in student_files]
    names = [n for d in deliverables for n in d if hand_in is None or n not in student_files]
    places = _find_deliverables(root, names, budget)
    return wanted + [(name, places[name], PurePosixPath(places[name] or name).name) for name in names]


def _recognise(
    root: Path, student_files: list[str], hand_in: HandIn, budget: _Budget, starters: frozenset[str]
) -> dict[str, str]:
    """The student file (by suffix) -> the submission's file taken for it, by what it holds (the
    search rule's 3); the choice and its reason are a note, a flag where an instructor should look,
    and where none fits the problem lists what was there."""
    by_suffix = {PurePosixPath(name).suffix.lower(): name for name in student_files}
    given = {name.lower() for name in hand_in.given}
    seen: list[str] = []
    found: list[candidates.Candidate] = []
    for directory, _, entries in _walk(root, MAX_DEPTH, budget):
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) or _skipped(entry.name):
                continue
            path = str(Path(directory, entry.name).relative_to(root))
            seen.append(path)
            if PurePosixPath(entry.name).suffix.lower() not in by_suffix or entry.name.lower() in given:
                continue
            if len(found) >= candidates.MAX_CANDIDATES:
                budget.note(f"over {candidates.MAX_CANDIDATES} files could be the hand-in: the rest were not looked at")
                continue
            data = _read_candidate(root, path, budget)
            if data is not None:
                found.append(candidates.read(path, data, hand_in.holds, starters))
    kinds = " or ".join(sorted(by_suffix)) + " files"
    choice = candidates.choose(found, hand_in.holds, kinds) if found else candidates.Choice(None, f"no {kinds} in it")
    if choice.taken is None:
        listed = ", ".join(shown(p) for p in seen[: candidates.LISTED]) or "nothing"
        more = f" and {len(seen) - candidates.LISTED} more" if len(seen) > candidates.LISTED else ""
        budget.note(f"the submission holds {listed}{more}: {choice.why}")
        return {}
    taken = choice.taken
    name = by_suffix[PurePosixPath(taken.path).suffix.lower()]
    flags = [flag for flag, on in ((FILE_IN_SUBFOLDER, taken.folder), (FILE_CHOSEN, len(choice.rivals) > 1)) if on]
    if flags:
        over = [shown(c.path) for c in choice.rivals[1:]]
        budget.chosen.append(ChosenFile(name, shown(taken.path), over, flags))
    if flags or len(found) > 1 or taken.path != name:
        budget.notes.append(f"{name} was read from {shown(taken.path)}: {choice.why}")
    return {name: taken.path}


def _read_candidate(root: Path, relpath: str, budget: _Budget) -> bytes | None:
    """A candidate's bytes, or None (a link or special file: never the hand-in; over the size limit: said)."""
    try:
        fd = open_nofollow(root, relpath)
    except Refused:
        return None
    with os.fdopen(fd, "rb") as src:
        data = src.read(budget.max_file + 1)
    if len(data) > budget.max_file:
        budget.note(f"{shown(relpath)} is over the {budget.max_file}-byte limit: not looked at")
        return None
    return data


def _formats(student_files: list[str]) -> list[tuple[str, ...]]:
    """Student files that differ only in their suffix are one hand-in in either format (HW12's
    ``hw12.ipynb`` or its export ``hw12.py``): one of them is enough."""
    groups: dict[PurePosixPath, tuple[str, ...]] = {}
    for name in student_files:
        stem = PurePosixPath(name).with_suffix("")
        groups[stem] = (*groups.get(stem, ()), name)
    return list(groups.values())


def _copy_one(root: Path, relpath: str, target: Path, budget: _Budget) -> str | None:
    """Copy one regular file without following any symlink; return its digest or None (refused)."""
    shown_path = shown(relpath)
    try:
        fd = open_nofollow(root, relpath)
    except Refused as refusal:
        budget.note(f"{shown(refusal.where)} {refusal}: refused")
        return None
    with os.fdopen(fd, "rb") as src:
        links = os.fstat(src.fileno()).st_nlink
        if links > 1:  # the same file under another name, possibly outside the submission
            budget.note(f"{shown_path} is a hard link ({links} names for one file): refused")
            return None
        data = src.read(budget.max_file + 1)
    if len(data) > budget.max_file:
        budget.note(f"{shown_path} is over the {budget.max_file}-byte limit: refused")
        return None
    if budget.used + len(data) > budget.max_total:
        budget.note(f"{shown_path} would take the submission past {budget.max_total} bytes: refused")
        return None
    budget.used += len(data)
    target.write_bytes(data)
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _lock_down(dest: Path) -> None:
    """Readable by a separate student uid, writable by nobody but root (the grader)."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    no_follow = os.chmod in os.supports_follow_symlinks  # not on Windows (intake never writes a link)
    for path in [dest, *dest.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644, follow_symlinks=not no_follow)
        if as_root:
            os.chown(path, 0, 0, follow_symlinks=False)
