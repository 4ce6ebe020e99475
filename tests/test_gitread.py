"""A submitted git repository is read as data: nothing in it runs, nothing outside it is read, and a
repository or server that misbehaves ends in a plain refusal within the time and size caps.

Repositories are made with ``git`` here (the test's own data); none is armed until git is done with it.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from dulwich.repo import Repo
from dulwich.server import DictBackend, TCPGitServer

from grader import gitread
from grader.errors import UserError
from grader.intake import materialize
from grader.results import TimeSource

REPO = Path(__file__).resolve().parents[1]
STUDENT = ["src/collectives.py", "src/transformer.py"]
DELIVERABLES = [("written_answers_task1.md",), ("all_to_all_schematic.png",)]
#: The command the intake used to run on every checkout, with the config overrides it relied on.
OLD_INTAKE_GIT_LOG = [
    "git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "safe.directory=*",
    "log", "-1", "--format=%H%x00%cI", "HEAD",
]  # fmt: skip


def corpus_builder(name: str) -> ModuleType:
    path = REPO / "tests" / "corpus" / "hostile" / name / "make.py"
    spec = importlib.util.spec_from_file_location(f"corpus_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOSTILE = corpus_builder("git_config_programs")


def grab(source: str | Path, dest: Path, **kw: object):
    return materialize(source, STUDENT, DELIVERABLES, dest, 1 << 20, 4 << 20, **kw)  # type: ignore[arg-type]


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2025-03-01T12:00:00+00:00",
        "GIT_COMMITTER_DATE": "2025-03-01T12:00:00+00:00",
    }
    ident = ["-c", "user.name=Student", "-c", "user.email=s@example.com", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def small_repo(root: Path, files: dict[str, bytes] | None = None) -> Path:
    root.mkdir(parents=True)
    for name, data in (files or {"src/collectives.py": b"x = 1\n", "src/transformer.py": b"y = 2\n"}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "work")
    return root


def head_of(path: Path) -> str:
    with Repo(str(path)) as repo:
        return repo.head().decode()


def as_bare(checkout: Path, bare: Path) -> Path:
    """The checkout's .git as a bare repository, its config (armed or not) included, without running git."""
    shutil.copytree(checkout / ".git", bare, symlinks=True)
    config = bare / "config"
    config.write_text(config.read_text().replace("bare = false", "bare = true"))
    return bare


# --- nothing runs ---------------------------------------------------------------------------------


def test_the_corpus_entry_is_armed_git_itself_runs_its_program(tmp_path: Path) -> None:
    repo = HOSTILE.build(tmp_path / "sub")
    subprocess.run(OLD_INTAKE_GIT_LOG, cwd=repo, capture_output=True, check=True)
    assert (repo / HOSTILE.MARKER).exists(), "git log no longer runs gpg.program: the entry proves nothing"


def test_a_checkout_whose_config_names_programs_is_read_and_none_runs(tmp_path: Path) -> None:
    repo = HOSTILE.build(tmp_path / "sub")
    intake = grab(repo, tmp_path / "sandbox", trust_commit_time=True)
    assert not (repo / HOSTILE.MARKER).exists()
    assert intake.info.commit == head_of(repo)
    assert (intake.info.submitted_at, intake.info.submitted_at_source) == (HOSTILE.COMMITTED, TimeSource.COMMIT)
    assert intake.problems == []  # the working tree is what was committed, filters or not


@pytest.mark.parametrize("form", ["bare path", "file URL"])
def test_a_bare_repository_with_such_config_is_read_as_stored_and_none_runs(tmp_path: Path, form: str) -> None:
    repo = HOSTILE.build(tmp_path / "sub")
    bare = as_bare(repo, tmp_path / "bare.git")
    intake = grab(bare if form == "bare path" else f"file://{bare}", tmp_path / "sandbox")
    assert not (repo / HOSTILE.MARKER).exists() and not (bare / HOSTILE.MARKER).exists()
    assert intake.info.commit == head_of(repo)
    # `* filter=verify` would have run the smudge program on checkout: the blobs are taken as stored.
    for name in STUDENT:
        assert (intake.sandbox / name).read_bytes() == (HOSTILE.REFERENCE / name).read_bytes()


def test_lfs_pointers_and_submodules_are_never_resolved(tmp_path: Path) -> None:
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 12\n"
    repo = small_repo(
        tmp_path / "sub",
        {".gitattributes": b"*.py filter=lfs diff=lfs merge=lfs -text\n", "src/transformer.py": pointer},
    )
    # A submodule where the collectives should be: a gitlink to a commit that is nowhere here.
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},src/collectives.py")
    git(repo, "commit", "-q", "-m", "submodule")
    intake = grab(f"file://{repo}", tmp_path / "sandbox")
    assert (intake.sandbox / "src/transformer.py").read_bytes() == pointer
    assert intake.present == frozenset({"src/transformer.py"})
    assert "src/collectives.py is missing" in intake.problems


# --- nothing outside the repository is read -------------------------------------------------------


def test_a_repository_borrowing_objects_from_elsewhere_is_refused(tmp_path: Path) -> None:
    elsewhere = small_repo(tmp_path / "elsewhere")
    repo = small_repo(tmp_path / "sub")
    (repo / ".git" / "objects" / "info" / "alternates").write_text(f"{elsewhere}/.git/objects\n")
    intake = grab(repo, tmp_path / "sandbox")  # the working tree is graded; the commit is not read
    assert intake.info.commit is None
    why = "it borrows objects from elsewhere (.git/objects/info/alternates)"
    assert f"the git metadata of the submission was not read: {why}" in intake.problems
    with pytest.raises(UserError, match="borrows objects from elsewhere"):
        grab(as_bare(repo, tmp_path / "bare.git"), tmp_path / "sandbox2")


def test_a_symlink_inside_git_or_a_git_file_is_not_followed(tmp_path: Path) -> None:
    elsewhere = small_repo(tmp_path / "elsewhere")
    linked = small_repo(tmp_path / "linked")
    shutil.rmtree(linked / ".git" / "refs")
    (linked / ".git" / "refs").symlink_to(elsewhere / ".git" / "refs")
    assert (
        "the git metadata of the submission was not read: .git/refs is a symlink"
        in grab(linked, tmp_path / "a").problems
    )
    pointer = tmp_path / "pointer"
    shutil.copytree(linked, pointer, ignore=shutil.ignore_patterns(".git"))
    (pointer / ".git").write_text(f"gitdir: {elsewhere}/.git\n")
    intake = grab(pointer, tmp_path / "b")
    assert intake.info.commit is None
    why = ".git is not a directory (a worktree or submodule link, or a symlink)"
    assert f"the git metadata of the submission was not read: {why}" in intake.problems


# --- odd repositories -----------------------------------------------------------------------------


def test_a_repository_without_commits(tmp_path: Path) -> None:
    repo = tmp_path / "sub"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "collectives.py").write_bytes(b"x = 1\n")
    git(repo, "init", "-q")
    intake = grab(repo, tmp_path / "sandbox")
    assert intake.info.commit is None and intake.problems[-1] == "all_to_all_schematic.png is missing"
    with pytest.raises(UserError, match="it has no commit"):
        grab(as_bare(repo, tmp_path / "bare.git"), tmp_path / "sandbox2")


def test_a_commit_date_that_is_no_time_is_not_a_submission_time(tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "sub")
    raw = git(repo, "cat-file", "commit", "HEAD").replace("+0000", "+9959")  # 99 h 59 min east: no time zone
    forged = subprocess.run(
        ["git", "hash-object", "--literally", "-t", "commit", "-w", "--stdin"],
        cwd=repo, input=raw, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(repo, "update-ref", "HEAD", forged)
    info = grab(repo, tmp_path / "sandbox", trust_commit_time=True).info
    assert info.commit == forged
    assert (info.submitted_at, info.submitted_at_source) == (None, TimeSource.UNKNOWN)


# --- servers: time and size caps ------------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


@pytest.mark.parametrize("scheme", ["http", "git"])
def test_a_server_that_never_answers_is_a_clear_error_within_the_time_cap(
    tmp_path: Path, silent_server: int, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gitread, "FETCH_TIMEOUT_S", 2.0)
    url = f"{scheme}://127.0.0.1:{silent_server}/student/a9.git"
    with pytest.raises(UserError, match=f"cannot read the git repository {url}: no answer within 2 s"):
        grab(url, tmp_path / "sandbox")
    assert not (tmp_path / "sandbox" / "src").exists()


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A git:// server (dulwich's, in a thread) for one repository with 64 KiB that do not compress."""
    repo = small_repo(
        tmp_path / "served", {"src/collectives.py": b"x = 1\n", "data.bin": random.Random(12).randbytes(64 << 10)}
    )
    with Repo(str(repo)) as opened:
        server = TCPGitServer(DictBackend({b"/a9.git": opened}), "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        yield f"git://127.0.0.1:{server.server_address[1]}/a9.git", repo
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_git_url_is_fetched_at_depth_one(tmp_path: Path, git_server: tuple[str, Path]) -> None:
    url, repo = git_server
    intake = grab(url, tmp_path / "sandbox")
    assert intake.info.commit == head_of(repo)
    assert intake.present == frozenset({"src/collectives.py"})


@pytest.mark.parametrize("served", ["git", "file"])
def test_a_repository_over_the_size_cap_is_a_clear_error(
    tmp_path: Path, git_server: tuple[str, Path], served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gitread, "MAX_FETCH_BYTES", 32 << 10)
    url, repo = git_server
    with pytest.raises(UserError, match="its last commit is over the 32768-byte limit: not fetched"):
        grab(url if served == "git" else f"file://{repo}", tmp_path / "sandbox")
