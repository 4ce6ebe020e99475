"""Copy only the files the rubric names from a submission into a fresh sandbox directory.

A submission may arrive as a directory (a student repo with ``src/``, or a flat directory), a
``.zip``/``.tar.gz``/``.tgz``/``.tar`` archive, a git URL, a bare git repository, or a local git
checkout.  Whatever the form, the sandbox receives the rubric's student files under ``src/`` (plus a
fresh empty ``src/__init__.py``) and its deliverables at the top, and nothing else: a shipped
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
3. A deliverable is taken from ``<root>/<name>``, else from the one file of that name anywhere
   below ``<root>``.  Deliverables sharing a stem (``x.md``/``x.pdf``) are alternatives: one of
   them present is enough.

Nothing is ever read through a symbolic link: every path component is opened with ``O_NOFOLLOW``
relative to its parent, so ``src -> /elsewhere`` is refused like ``collectives.py -> /elsewhere``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from grader.errors import UserError
from grader.results import SubmissionInfo

SEARCH_DEPTH = 3
MAX_ARCHIVE_MEMBERS = 20_000
GIT_TIMEOUT_S = 120.0
_SKIP_DIRS = frozenset({"__MACOSX", "__pycache__", "node_modules"})
_GIT_URL_PREFIXES = ("http://", "https://", "ssh://", "git://", "git@", "file://")


@dataclass(frozen=True)
class Intake:
    sandbox: Path  # = dest: src/<student files>, src/__init__.py, <deliverables>
    info: SubmissionInfo
    present: frozenset[str]  # rubric names (student files and deliverables) that were copied
    problems: list[str]  # plain-English reasons a named file is absent, also in ``info.problems``


@dataclass(frozen=True)
class _Copied:
    digest: str  # "sha256:<hex>"
    rubric_name: str  # as the rubric spells it, e.g. "src/collectives.py"
    found: str  # where it was in the submission, e.g. "collectives.py" (flat layout)


@dataclass
class _Budget:
    """Byte limits shared by archive extraction and copying."""

    max_file: int
    max_total: int
    expanded: int = 0  # bytes an archive expanded to
    used: int = 0  # bytes copied into the sandbox
    problems: list[str] = field(default_factory=list)


def materialize(
    source: str | Path,
    student_files: list[str],
    deliverables: list[str],
    dest: Path,
    max_file_bytes: int,
    max_total_bytes: int,
    submitted_at: str | None = None,
) -> Intake:
    """Build the sandbox ``dest`` (created; must not exist or be empty) from ``source``.

    Raises :class:`UserError` only when nothing can be graded: the source does not exist, is an
    unreadable archive, cannot be cloned, or holds several submissions.
    """
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty: the sandbox must be fresh")
    budget = _Budget(max_file_bytes, max_total_bytes)
    with tempfile.TemporaryDirectory(prefix="grader-intake-") as tmp:
        root, commit, commit_time = _unpack(str(source), Path(tmp), budget, student_files + deliverables)
        root = _find_root(root, student_files)
        files = _copy_all(root, student_files, deliverables, dest, budget)
        if commit is not None:
            budget.problems += _uncommitted(root, files)
    digests = {name: copied.digest for name, copied in sorted(files.items())}
    lines = "".join(f"{name}:{digest}\n" for name, digest in digests.items())
    info = SubmissionInfo(
        source=str(source),
        files=digests,
        digest="sha256:" + hashlib.sha256(lines.encode()).hexdigest(),
        commit=commit,
        submitted_at=submitted_at or commit_time,
        problems=list(budget.problems),
    )
    present = frozenset(copied.rubric_name for copied in files.values())
    return Intake(sandbox=dest, info=info, present=present, problems=list(budget.problems))


# --- where the submission comes from -------------------------------------------------------------


def _unpack(source: str, tmp: Path, budget: _Budget, wanted: list[str]) -> tuple[Path, str | None, str | None]:
    """Return (directory to search, commit sha, commit time) for any accepted form of ``source``."""
    path = Path(source)
    if source.startswith(_GIT_URL_PREFIXES) or (path.is_dir() and _is_bare_repo(path)):
        repo = _clone(source, tmp / "clone", wanted)
        return (repo, *_head(repo))
    if not path.exists():
        raise UserError(f"{source} does not exist")
    if path.is_dir():
        if (path / ".git").exists():
            sha, when = _head(path)
            return path, sha, when
        return path, None, None
    out = tmp / "archive"
    out.mkdir()
    _extract(path, out, budget, wanted)
    return out, None, None


def _is_bare_repo(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and not (path / ".git").exists()


def _git(args: list[str], cwd: Path, binary: bool = False) -> Any:
    """Run git on possibly hostile data: no hooks, no fsmonitor, no prompts, no ownership checks."""
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "safe.directory=*"]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_LFS_SKIP_SMUDGE": "1"}
    try:
        done = subprocess.run(
            [*cmd, *args], cwd=cwd, env=env, capture_output=True, text=not binary, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"git {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        raise UserError(f"git {args[0]} failed: {str(done.stderr).strip() or done.returncode}")
    return done.stdout


def _clone(url: str, into: Path, wanted: list[str]) -> Path:
    """Shallow clone without checkout, then check out only paths whose basename the rubric names.

    Checking out selectively bounds what lands on disk; symlinks are checked out as symlinks so the
    copy step refuses them exactly as it does in a directory.
    """
    _git(["clone", "--quiet", "--depth", "1", "--no-checkout", "--", url, str(into)], cwd=into.parent)
    names = {PurePosixPath(w).name for w in wanted}
    listing = _git(["ls-tree", "-r", "-z", "--name-only", "HEAD"], cwd=into)
    paths = [p for p in listing.split("\0") if p and PurePosixPath(p).name in names]
    if paths:
        _git(["-c", "core.symlinks=true", "checkout", "--quiet", "HEAD", "--", *paths], cwd=into)
    return into


def _head(repo: Path) -> tuple[str | None, str | None]:
    """(sha, ISO 8601 commit time) of HEAD, or (None, None) for a repo without commits."""
    try:
        out = _git(["log", "-1", "--format=%H%x00%cI", "HEAD"], cwd=repo).strip()
    except UserError:
        return None, None
    sha, _, when = out.partition("\0")
    return sha or None, when or None


def _uncommitted(root: Path, files: dict[str, _Copied]) -> list[str]:
    """Name the copied files whose content differs from HEAD: the commit recorded is not what ran."""
    notes = []
    for copied in files.values():
        try:
            blob = _git(["cat-file", "blob", f"HEAD:./{copied.found}"], cwd=root, binary=True)
        except UserError:
            blob = b""
        if "sha256:" + hashlib.sha256(blob).hexdigest() != copied.digest:
            notes.append(f"{copied.found} differs from the last commit: graded as in the working tree")
    return notes


# --- archives ------------------------------------------------------------------------------------

# One archive entry, whatever the format: (name, kind, open) with kind "file", "dir", or the reason
# it is refused ("is a symlink", ...); ``open`` yields the bytes of a file.
_Entry = tuple[str, str, Callable[[], IO[bytes] | None]]


def _extract(archive: Path, out: Path, budget: _Budget, wanted: list[str]) -> None:
    """Extract regular files and directories only; refuse anything that could point outside ``out``."""
    names = {PurePosixPath(w).name for w in wanted}
    try:
        for count, (name, kind, opener) in enumerate(_entries(archive)):
            if count >= MAX_ARCHIVE_MEMBERS:
                budget.problems.append(f"the archive has over {MAX_ARCHIVE_MEMBERS} entries: rest ignored")
                return
            member = _safe_member(name)
            why = "points outside the archive" if member is None else kind
            if member is None or kind not in ("file", "dir"):
                # Only refusals of files the rubric asks for are worth telling the student about.
                if PurePosixPath(name.replace("\\", "/")).name in names:
                    budget.problems.append(f"{name} in the archive {why}: refused")
            elif kind == "dir":
                (out / member).mkdir(parents=True, exist_ok=True)
            elif not _write_member(opener, out / member, budget):
                budget.problems.append(f"the archive expands past {budget.max_total} bytes: stopped there")
                return
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError, RuntimeError) as exc:
        budget.problems.append(f"the archive is damaged ({exc}): only the part before it was read")


def _entries(archive: Path) -> Iterator[_Entry]:
    lower = archive.name.lower()
    if not lower.endswith((".zip", ".tar.gz", ".tgz", ".tar")):
        raise UserError(f"{archive} is neither a directory, a .zip/.tar.gz archive nor a git repository")
    try:
        opened = zipfile.ZipFile(archive) if lower.endswith(".zip") else tarfile.open(archive)  # noqa: SIM115
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise UserError(f"{archive} is not a readable archive: {exc}") from exc
    with opened:
        if isinstance(opened, zipfile.ZipFile):
            for info in opened.infolist():
                kind = "is a symlink" if stat.S_ISLNK(info.external_attr >> 16) else "file"
                yield info.filename, "dir" if info.is_dir() else kind, functools.partial(opened.open, info)
        else:
            for tinfo in opened:
                kind = "dir" if tinfo.isdir() else "file" if tinfo.isreg() else _tar_kind(tinfo)
                yield tinfo.name, kind, functools.partial(opened.extractfile, tinfo)


def _tar_kind(info: tarfile.TarInfo) -> str:
    return "is a symlink" if info.issym() else "is a hard link" if info.islnk() else "is not a regular file"


def _safe_member(name: str) -> PurePosixPath | None:
    """The member's relative path, or None when it is absolute or climbs out with ``..``."""
    member = PurePosixPath(name.replace("\\", "/"))
    if member.is_absolute() or ":" in (member.parts[0] if member.parts else "") or ".." in member.parts:
        return None
    return member


def _write_member(opener: Callable[[], IO[bytes] | None], target: Path, budget: _Budget) -> bool:
    """Write at most max_file + 1 bytes (enough for the copy step to refuse an oversize file);
    return False once the archive's expanded size passes the total budget."""
    target.parent.mkdir(parents=True, exist_ok=True)
    src = opener()
    if src is None:  # tarfile's answer for a member without data
        return True
    written = 0
    with src, open(target, "wb") as out:
        while written <= budget.max_file and (chunk := src.read(1 << 16)):
            chunk = chunk[: budget.max_file + 1 - written]
            out.write(chunk)
            written += len(chunk)
            budget.expanded += len(chunk)
            if budget.expanded > budget.max_total:
                return False
    return True


# --- the search rule -----------------------------------------------------------------------------


def _student_path(root: Path, rubric_name: str) -> str | None:
    """Where ``rubric_name`` lives under ``root`` (rubric layout first, then flat), by lstat only."""
    for candidate in (rubric_name, PurePosixPath(rubric_name).name):
        if os.path.lexists(root / candidate):
            return candidate
    return None


def _subdirs(directory: Path) -> list[Path]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []
    return [
        Path(e.path)
        for e in entries
        if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and e.name not in _SKIP_DIRS
    ]


def _find_root(top: Path, student_files: list[str]) -> Path:
    level = [top]
    for _ in range(SEARCH_DEPTH + 1):
        hits = [d for d in level if any(_student_path(d, f) for f in student_files)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            names = ", ".join(str(h.relative_to(top)) for h in hits[:5])
            raise UserError(f"{top} holds several submissions ({names}): grade one at a time")
        level = [sub for d in level for sub in _subdirs(d)]
    return top


def _find_deliverable(root: Path, name: str) -> str | None:
    if os.path.lexists(root / name):
        return name
    matches: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS]
        if name in filenames:
            matches.append(str(Path(dirpath, name).relative_to(root)))
    return matches[0] if len(matches) == 1 else None


# --- copying -------------------------------------------------------------------------------------


def _copy_all(
    root: Path, student_files: list[str], deliverables: list[str], dest: Path, budget: _Budget
) -> dict[str, _Copied]:
    """Copy what the rubric names; return what was copied by its path in the sandbox."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "src").mkdir(exist_ok=True)
    (dest / "src" / "__init__.py").write_bytes(b"")
    copied: dict[str, _Copied] = {}
    wanted = [(name, _student_path(root, name), f"src/{PurePosixPath(name).name}") for name in student_files]
    wanted += [(name, _find_deliverable(root, name), PurePosixPath(name).name) for name in deliverables]
    missing_stems: dict[str, list[str]] = {}
    for name, found, sandbox_name in wanted:
        if found is None:
            missing_stems.setdefault(PurePosixPath(name).stem, []).append(name)
        elif (digest := _copy_one(root, found, dest / sandbox_name, budget)) is not None:
            copied[sandbox_name] = _Copied(digest, name, found)
    present_stems = {PurePosixPath(c.rubric_name).stem for c in copied.values()}
    for stem, names in missing_stems.items():
        if stem not in present_stems:
            budget.problems.append(f"{' or '.join(names)} is missing")
    _lock_down(dest)
    return copied


def _copy_one(root: Path, relpath: str, target: Path, budget: _Budget) -> str | None:
    """Copy one regular file without following any symlink; return its digest or None (refused)."""
    try:
        fd = _open_nofollow(root, relpath)
    except _Refused as refusal:
        budget.problems.append(f"{refusal.where} {refusal}: refused")
        return None
    with os.fdopen(fd, "rb") as src:
        mode = os.fstat(src.fileno()).st_mode
        if not stat.S_ISREG(mode):
            budget.problems.append(f"{relpath} is {_kind(mode)}, not a regular file: refused")
            return None
        data = src.read(budget.max_file + 1)
    if len(data) > budget.max_file:
        budget.problems.append(f"{relpath} is over the {budget.max_file}-byte limit: refused")
        return None
    if budget.used + len(data) > budget.max_total:
        budget.problems.append(f"{relpath} would take the submission past {budget.max_total} bytes: refused")
        return None
    budget.used += len(data)
    target.write_bytes(data)
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Refused(Exception):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where = where


def _open_nofollow(root: Path, relpath: str) -> int:
    """Open the regular file ``root/relpath`` read-only without following a symlink at any component.

    Each component is looked at with ``lstat`` before it is opened (a device or FIFO is never
    opened) and opened with ``O_NOFOLLOW`` relative to its parent, so a swap in between fails closed.
    """
    parts = PurePosixPath(relpath).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            where = "/".join(parts[: i + 1])
            try:
                mode = os.lstat(part, dir_fd=fd).st_mode
                if not (stat.S_ISREG(mode) if last else stat.S_ISDIR(mode)):
                    raise _Refused(where, f"is {_kind(mode)}")
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                raise _Refused(where, f"cannot be read ({exc.strerror})") from exc
            os.close(fd)
            fd = child
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Refused(relpath, "changed while it was being read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device file"),
        (stat.S_ISBLK, "a device file"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ]
    return next((text for test, text in kinds if test(mode)), "not a regular file")


def _lock_down(dest: Path) -> None:
    """Readable by a separate student uid, writable by nobody but root (the grader)."""
    as_root = os.geteuid() == 0
    for path in [dest, *dest.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644, follow_symlinks=False)
        if as_root:
            os.chown(path, 0, 0, follow_symlinks=False)
