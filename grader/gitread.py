"""Git repositories read as data: nothing in a submitted repository ever runs.

``git`` honours the configuration of the repository it works in, and many keys name a program to
run (``gpg.program`` with ``log.showSignature``, ``core.fsmonitor``, ``core.pager``, filter drivers,
hooks, ...), so running git on a submission runs the student's code as the grader, before any
sandbox exists.  Here a repository is only ever parsed, by dulwich (pure Python), and only for what
the grader needs: the HEAD commit and blobs of its tree.  Nothing is checked out, no filter or LFS
is applied, no submodule is followed, no configuration is read, and a local repository that borrows
objects from elsewhere on disk (alternates, ``commondir``, a symlink, a ``.git`` file) is refused.

The objects are untrusted too (a zlib bomb, a hostile pack, a server that never answers), so each
operation runs in a child process of its own with memory, CPU and file-size limits and a
wall-clock timeout; whatever happens there, the grader gets an answer or a plain refusal.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from grader.errors import UserError
from grader.text import shown

FETCH_TIMEOUT_S = 120.0  # a git URL: connect, negotiate and download
READ_TIMEOUT_S = 60.0  # a repository on disk
MAX_FETCH_BYTES = 256 << 20  # the pack a git URL may send for its last commit
MEMORY_BYTES = 2 << 30  # address space of the reading process
MAX_TREE_ENTRIES = 100_000  # tree entries looked at in one commit
MAX_TREE_DEPTH = 64  # directory levels below the top of a commit
MAX_GITDIR_ENTRIES = 200_000  # files of a local .git checked before dulwich opens it
URL_PREFIXES = ("http://", "https://", "ssh://", "git+ssh://", "git://", "git@", "file://")
#: Environment passed to the reading process: enough to reach a server (proxies, CAs, an ssh agent).
_ENV_KEPT = (
    "PATH",
    "LANG",
    "LC_ALL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "SSH_AUTH_SOCK",
)
_GITLINK = 0o160000  # a tree entry's mode for a submodule
#: What an exported symlink points to: the intake refuses it without ever reading it.
SYMLINK_PLACEHOLDER = b"symlink-in-the-repository"


@dataclass(frozen=True)
class Head:
    """What a repository says about its last commit."""

    commit: str | None  # hex sha of HEAD; None for a repository without commits
    committed_at: str | None  # ISO 8601 committer date: the committer sets it, so it is no submission time
    blobs: dict[str, str | None] = field(default_factory=dict)  # path -> "sha256:<hex>" at HEAD, None if absent
    notes: list[str] = field(default_factory=list)  # what was refused or cut short, in plain words


def is_url(source: str) -> bool:
    return source.startswith(URL_PREFIXES)


def is_bare_repository(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and not (path / ".git").exists()


def read_head(top: Path, paths: Sequence[str]) -> Head:
    """HEAD of the checkout ``top`` (which holds ``.git``) and the blob digests of ``paths`` there.

    Never raises for the repository's sake: the working tree is graded either way, so a repository
    that cannot be read is a note.
    """
    try:
        answer = _run("read", {"top": str(Path(top).absolute()), "paths": list(paths)}, READ_TIMEOUT_S)
    except _Failed as failure:
        return Head(None, None, notes=[f"the git metadata of the submission was not read: {failure}"])
    return Head(answer["commit"], answer["committed_at"], answer["blobs"], answer["notes"])


def export(source: str, into: Path, names: Sequence[str], max_file: int, max_total: int) -> Head:
    """Write the files of ``source``'s last commit whose base name is in ``names`` below ``into``
    (created; its sibling ``<into>.git`` receives the fetched objects).

    ``source`` is a git URL or a bare repository on disk.  A file over ``max_file`` bytes is cut to
    ``max_file + 1`` (enough for the intake to refuse it); writing stops past ``max_total`` bytes; a
    symlink becomes a symlink to :data:`SYMLINK_PLACEHOLDER`, which the intake refuses as it refuses
    any.  Raises :class:`UserError` when nothing can be had: the repository is unreachable, too
    large, too slow, damaged, or has no commit.
    """
    into = Path(into).absolute()
    into.mkdir()
    spec = {
        "source": source if is_url(source) else str(Path(source).absolute()),
        "into": str(into),
        "names": list(names),
        "max_file": max_file,
        "max_total": max_total,
        "max_fetch": MAX_FETCH_BYTES,
    }
    try:
        answer = _run("export", spec, FETCH_TIMEOUT_S)
    except _Failed as failure:
        raise UserError(f"cannot read the git repository {shown(source)}: {failure}") from None
    return Head(answer["commit"], answer["committed_at"], notes=answer["notes"])


def unbundle(bundle: Path, into: Path, tip: str | None, max_total: int) -> Head:
    """Unpack the git bundle ``bundle`` into a new bare repository ``into`` whose HEAD is its tip
    (``grader.service.intake``): ``tip`` where given (the commit a token names), else the bundle's
    ``HEAD``, or its one ref.  The commit's whole tree is checked: every object present, no name that
    could leave a checkout (``..``, ``/``, ``.git``), at most :data:`MAX_TREE_ENTRIES` entries and
    ``max_total`` bytes of files.  Raises :class:`UserError` for a bundle that is not whole, not a
    bundle, hostile or too large, and :class:`WrongTip` for one whose refs do not hold ``tip``."""
    into = Path(into).absolute()
    spec = {"bundle": str(Path(bundle).absolute()), "into": str(into), "tip": tip, "max_total": max_total}
    try:
        answer = _run("unbundle", spec, READ_TIMEOUT_S)
    except _Failed as failure:
        raise UserError(f"the bundle cannot be read: {failure}") from None
    if answer["commit"] is None:
        raise WrongTip(f"the bundle does not hold commit {tip} (its refs: {', '.join(answer['refs']) or 'none'})")
    return Head(answer["commit"], answer["committed_at"], notes=answer["notes"])


class WrongTip(UserError):
    """A bundle whose refs do not name the commit it was sent as."""


# --- the parent's side: one child process per operation ------------------------------------------


class _Failed(Exception):
    """The reading process refused, failed or ran out of time; the message says which, plainly."""


def _run(operation: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    # -I: no PYTHONPATH, user site or current directory; the grader that runs is this one.
    boot = f"import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r}); import grader.gitread as g; g._child()"
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEPT}
    spec = {**spec, "operation": operation, "timeout": timeout, "memory": MEMORY_BYTES}
    with tempfile.TemporaryDirectory(prefix="grader-git-") as home:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", boot],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=home,
            env={**env, "HOME": home},  # no ~/.gitconfig, no ~/.ssh/config of the grader's user
            start_new_session=True,  # ssh and anything else it starts die with it
        )
        try:
            out, err = proc.communicate(json.dumps(spec).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise _Failed(f"no answer within {timeout:g} s") from None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if hasattr(os, "killpg"):
                    os.killpg(proc.pid, signal.SIGKILL)
                else:  # Windows: no process groups to signal; the child itself
                    proc.kill()
            proc.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        why = _signal_name(proc.returncode) or err.decode(errors="replace").strip().splitlines()[-1:]
        raise _Failed(f"the reader failed ({why or proc.returncode})")
    if "refused" in answer:
        raise _Failed(str(answer["refused"]))
    return answer


def _signal_name(returncode: int) -> str | None:
    if returncode >= 0:
        return None
    with contextlib.suppress(ValueError):
        return f"killed by {signal.Signals(-returncode).name}"
    return f"killed by signal {-returncode}"


# --- the child's side ----------------------------------------------------------------------------


class _Refusal(Exception):
    """A reason to stop, written for the person who submitted the repository."""


def _child() -> None:
    """Entry point of the reading process: a JSON spec on stdin, a JSON answer on stdout."""
    spec = json.loads(sys.stdin.buffer.read())
    try:
        import resource
    except ImportError:  # Windows: no rlimits; the reading child keeps its timeout
        resource = None  # type: ignore[assignment]
    limits = (
        []
        if resource is None
        else [
            (resource.RLIMIT_AS, spec["memory"]),
            (resource.RLIMIT_CPU, int(spec["timeout"]) + 1),
            (resource.RLIMIT_FSIZE, spec.get("max_fetch", 0) + spec.get("max_total", 0) + (16 << 20)),
            (resource.RLIMIT_CORE, 0),
        ]
    )
    for which, value in limits:
        with contextlib.suppress(ValueError, OSError):  # never above a hard limit already lower
            resource.setrlimit(which, (value, value))
    try:
        operations = {"read": _read, "export": _export, "unbundle": _unbundle}
        answer = operations[spec["operation"]](spec)
    except _Refusal as refusal:
        answer = {"refused": str(refusal)}
    except MemoryError:
        answer = {"refused": f"it takes more than {spec['memory'] >> 20} MiB to read"}
    except Exception as exc:  # dulwich's view of a damaged, hostile or unreachable repository
        answer = {"refused": f"{type(exc).__name__}: {shown(str(exc))[:300]}"}
    sys.stdout.write(json.dumps(answer))


def _read(spec: dict[str, Any]) -> dict[str, Any]:
    from dulwich.errors import NotTreeError
    from dulwich.object_store import tree_lookup_path
    from dulwich.objects import Blob

    top = Path(spec["top"])
    gitdir = top / ".git"
    _check_local(gitdir)
    with _open(gitdir) as repo:
        sha = _head_sha(repo)
        if sha is None:
            return {"commit": None, "committed_at": None, "blobs": {}, "notes": []}
        commit = _commit(repo, sha)
        blobs: dict[str, str | None] = {}
        for path in spec["paths"]:
            try:
                mode, blob_sha = tree_lookup_path(repo.__getitem__, commit.tree, os.fsencode(path))
                blob = repo[blob_sha]
            except (KeyError, NotTreeError):
                blobs[path] = None
                continue
            regular = stat.S_ISREG(mode) and isinstance(blob, Blob)
            blobs[path] = "sha256:" + hashlib.sha256(blob.as_raw_string()).hexdigest() if regular else None
        return {"commit": sha.decode(), "committed_at": _committed_at(commit), "blobs": blobs, "notes": []}


def _export(spec: dict[str, Any]) -> dict[str, Any]:
    from dulwich.repo import Repo

    into = Path(spec["into"])
    store = into.with_name(into.name + ".git")
    store.mkdir()
    with Repo.init_bare(str(store)) as repo:
        sha = _fetch(spec["source"], repo, spec["max_fetch"])
        commit = _commit(repo, sha)
        notes = _write_tree(repo, commit.tree, into, spec)
        return {"commit": sha.decode(), "committed_at": _committed_at(commit), "notes": notes}


def _unbundle(spec: dict[str, Any]) -> dict[str, Any]:
    from io import BytesIO

    from dulwich.bundle import read_bundle
    from dulwich.repo import Repo

    with open(spec["bundle"], "rb") as fh:
        bundle = read_bundle(fh)
        if bundle.prerequisites:
            raise _Refusal("it is not whole: it needs commits it does not hold (bundle HEAD with its history)")
        refs = {ref.decode(errors="replace"): sha.decode() for ref, sha in bundle.references.items()}
        commits = set(refs.values())
        tip = spec["tip"] or refs.get("HEAD") or (commits.pop() if len(commits) == 1 else None)
        if tip is None:
            raise _Refusal("it names no HEAD and several commits: bundle one (git bundle create x.bundle HEAD)")
        if tip not in refs.values():
            return {"commit": None, "refs": sorted(refs.values())}
        fh.seek(0)
        raw = fh.read()
    bundle.close()
    pack = raw[raw.index(b"\n\n") + 2 :]
    into = Path(spec["into"])
    into.mkdir()
    with Repo.init_bare(str(into)) as repo:
        repo.object_store.add_thin_pack(BytesIO(pack).read, None)
        commit = _commit(repo, tip.encode())
        _check_tree(repo, commit.tree, spec["max_total"])
        names: Any = repo.refs
        names[b"refs/heads/main"] = commit.id
        names.set_symbolic_ref(b"HEAD", b"refs/heads/main")
        return {"commit": tip, "committed_at": _committed_at(commit), "notes": []}


def _check_tree(repo: Any, tree_sha: bytes, max_total: int) -> None:
    """Every object of the tree present, every name one a checkout keeps inside, within the limits."""
    from dulwich.objects import Blob, Tree

    total, seen = 0, 0
    queue: deque[tuple[bytes, bytes, int]] = deque([(tree_sha, b"", 0)])
    while queue:
        sha, prefix, depth = queue.popleft()
        try:
            tree = repo[sha]
        except KeyError:
            raise _Refusal(f"it is not whole: the folder {shown(os.fsdecode(prefix)) or '/'} is missing") from None
        if not isinstance(tree, Tree):
            raise _Refusal(f"{shown(os.fsdecode(prefix))} is not a folder")
        for entry in tree.iteritems():
            seen += 1
            if seen > MAX_TREE_ENTRIES:
                raise _Refusal(f"its commit has over {MAX_TREE_ENTRIES} files")
            if not _usable_name(entry.path):
                raise _Refusal(f"a path escapes the submission: {shown(os.fsdecode(prefix + entry.path))!r}")
            if stat.S_ISDIR(entry.mode):
                if depth + 1 >= MAX_TREE_DEPTH:
                    raise _Refusal(f"its folders nest over {MAX_TREE_DEPTH} levels deep")
                queue.append((entry.sha, prefix + entry.path + b"/", depth + 1))
            elif stat.S_IFMT(entry.mode) != _GITLINK:  # a submodule's commit is not in the bundle
                try:
                    blob = repo[entry.sha]
                except KeyError:
                    raise _Refusal(f"it is not whole: {shown(os.fsdecode(prefix + entry.path))} is missing") from None
                total += len(blob.as_raw_string()) if isinstance(blob, Blob) else 0
                if total > max_total:
                    raise _Refusal(f"its commit unpacks to over {max_total >> 20} MiB")


def _fetch(source: str, repo: Any, max_bytes: int) -> bytes:
    """Fetch the last commit of ``source`` (depth 1) into ``repo``; its sha."""
    from dulwich.client import GitClient, LocalGitClient, get_transport_and_path

    client: GitClient
    if is_url(source) and not source.startswith("file://"):
        client, path = get_transport_and_path(source)  # no config: no insteadOf, no credential helper
    else:  # never parsed as a URL: "/a:b" would read as an ssh host
        path = urlparse(source).path if source.startswith("file://") else source
        top = Path(path)
        _check_local(top / ".git" if os.path.lexists(top / ".git") else top)
        client = LocalGitClient()
    wanted: list[bytes] = []

    def determine_wants(refs: Mapping[Any, Any], depth: int | None = None) -> list[Any]:
        head = refs.get(b"HEAD")
        if not head:
            raise _Refusal("it has no commit (no HEAD)")
        wanted.append(head)
        return [head]

    received = 0
    with tempfile.TemporaryFile(dir=repo.path) as pack:

        def pack_data(chunk: bytes) -> int:
            nonlocal received
            received += len(chunk)
            if received > max_bytes:
                raise _Refusal(f"its last commit is over the {max_bytes}-byte limit: not fetched")
            return pack.write(chunk)

        client.fetch_pack(path, determine_wants, repo.get_graph_walker(), pack_data, depth=1)
        if not wanted:
            raise _Refusal("it has no commit (no HEAD)")
        pack.seek(0)
        repo.object_store.add_thin_pack(pack.read, None)
    return wanted[0]


def _write_tree(repo: Any, tree_sha: bytes, into: Path, spec: dict[str, Any]) -> list[str]:
    """Write the wanted files of a tree, breadth first, within the entry, depth and byte limits."""
    from dulwich.objects import Blob, Tree

    names = {os.fsencode(name) for name in spec["names"]}
    patterns = [name for name in names if b"*" in name]  # ``*.ipynb``: a hand-in found by what it holds
    max_file, max_total = spec["max_file"], spec["max_total"]
    written, seen = 0, 0
    notes: list[str] = []
    queue: deque[tuple[bytes, bytes, int]] = deque([(tree_sha, b"", 0)])
    while queue:
        sha, prefix, depth = queue.popleft()
        tree = repo[sha]
        if not isinstance(tree, Tree):
            continue
        for entry in tree.iteritems():
            seen += 1
            if seen > MAX_TREE_ENTRIES:
                return [*notes, f"the last commit has over {MAX_TREE_ENTRIES} files: the rest was not looked at"]
            name = entry.path
            if not _usable_name(name):
                continue
            relpath = prefix + name
            if stat.S_ISDIR(entry.mode):
                if depth + 1 < MAX_TREE_DEPTH:
                    queue.append((entry.sha, relpath + b"/", depth + 1))
                elif not any("levels deep" in n for n in notes):
                    notes.append(f"the last commit nests folders over {MAX_TREE_DEPTH} levels deep: not looked into")
                continue
            if name not in names and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            target = into / os.fsdecode(relpath)
            if stat.S_ISLNK(entry.mode):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(SYMLINK_PLACEHOLDER, target)
            elif stat.S_ISREG(entry.mode):  # not a submodule (gitlink), whose commit is not here
                blob = repo[entry.sha]
                data = blob.as_raw_string()[: max_file + 1] if isinstance(blob, Blob) else b""
                if written + len(data) > max_total:
                    return [*notes, f"the last commit's files pass {max_total} bytes: the rest was not taken"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                written += len(data)
    return notes


def _usable_name(name: bytes) -> bool:
    """A tree entry name git itself would check out: one path component, never ``.git``."""
    return name not in (b"", b".", b"..") and b"/" not in name and b"\0" not in name and name.lower() != b".git"


def _check_local(gitdir: Path) -> None:
    """Refuse a repository on disk that would make dulwich read files outside it."""
    try:
        mode = os.lstat(gitdir).st_mode
    except OSError:
        raise _Refusal(f"{shown(str(gitdir))} is missing") from None
    if not stat.S_ISDIR(mode):
        raise _Refusal(f"{gitdir.name} is not a directory (a worktree or submodule link, or a symlink)")
    for borrowed in ("commondir", "objects/info/alternates", "objects/info/http-alternates"):
        if os.path.lexists(gitdir / borrowed):
            raise _Refusal(f"it borrows objects from elsewhere ({gitdir.name}/{borrowed})")
    for count, (path, mode) in enumerate(_lstat_all(gitdir)):
        if count >= MAX_GITDIR_ENTRIES:
            raise _Refusal(f"{gitdir.name} holds over {MAX_GITDIR_ENTRIES} files")
        if stat.S_ISLNK(mode):
            raise _Refusal(f"{shown(str(path.relative_to(gitdir.parent)))} is a symlink")


def _lstat_all(top: Path) -> Iterator[tuple[Path, int]]:
    """Every entry below ``top`` with its mode, breadth first, without following a symlink."""
    queue = deque([top])
    while queue:
        directory = queue.popleft()
        with os.scandir(directory) as entries:
            for entry in entries:
                mode = entry.stat(follow_symlinks=False).st_mode
                yield Path(entry.path), mode
                if stat.S_ISDIR(mode):
                    queue.append(Path(entry.path))


@contextlib.contextmanager
def _open(gitdir: Path) -> Iterator[Any]:
    from dulwich.repo import Repo

    with Repo(str(gitdir)) as repo:
        yield repo


def _commit(repo: Any, sha: bytes) -> Any:
    from dulwich.objects import Commit

    commit = repo[sha]
    if not isinstance(commit, Commit):
        raise _Refusal(f"HEAD is a {commit.type_name.decode()}, not a commit")
    return commit


def _head_sha(repo: Any) -> bytes | None:
    try:
        sha: bytes = repo.refs[b"HEAD"]
    except KeyError:
        return None
    return sha


def _committed_at(commit: Any) -> str | None:
    """The committer date in ISO 8601 with its offset; None when it is not a representable time."""
    try:
        zone = timezone(timedelta(seconds=commit.commit_timezone))
        return datetime.fromtimestamp(commit.commit_time, zone).isoformat()
    except (ValueError, OverflowError, OSError):
        return None
