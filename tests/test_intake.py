"""Intake: only the files the rubric names reach the sandbox, from any form a submission takes."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from grader import intake as intake_module
from grader.errors import UserError
from grader.intake import MAX_DEPTH, materialize
from grader.results import TimeSource
from grader.submission_time import SubmittedAt

STUDENT = ["src/collectives.py", "src/transformer.py"]
DELIVERABLES = [("written_answers_task1.md", "written_answers_task1.pdf"), ("all_to_all_schematic.png",)]
COLLECTIVES = b"def my_broadcast(t, src=0):\n    return t\n"
TRANSFORMER = b"from src.collectives import my_all_to_all\n"
HOSTILE_EXTRAS = {
    "conftest.py": b"raise SystemExit('conftest ran')\n",
    "pytest.ini": b"[pytest]\naddopts = -p no:cacheprovider\n",
    "sitecustomize.py": b"import os; os._exit(0)\n",
    "usercustomize.py": b"import os; os._exit(0)\n",
    "evil.pth": b"import os; os._exit(0)\n",
    "torch/__init__.py": b"allclose = lambda *a, **k: True\n",
    "src/__init__.py": b"import os; os._exit(0)\n",
    "src/conftest.py": b"raise SystemExit\n",
    "src/evil.pth": b"import os\n",
}


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def repo(root: Path, **extra: bytes) -> Path:
    files = {"src/collectives.py": COLLECTIVES, "src/transformer.py": TRANSFORMER, **HOSTILE_EXTRAS}
    files["written_answers_task1.md"] = b"# answers\n"
    files.update({k.replace("__", "/"): v for k, v in extra.items()})
    return write_tree(root, files)


def grab(source: object, dest: Path, max_file: int = 1 << 20, max_total: int = 4 << 20, **kw: object):
    return materialize(source, STUDENT, DELIVERABLES, dest, max_file, max_total, **kw)  # type: ignore[arg-type]


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


EXPECTED_SANDBOX = {"src/__init__.py", "src/collectives.py", "src/transformer.py", "written_answers_task1.md"}


def test_only_rubric_files_reach_the_sandbox(tmp_path: Path) -> None:
    intake = grab(repo(tmp_path / "sub"), tmp_path / "sandbox")
    assert intake.sandbox == tmp_path / "sandbox"
    assert listing(intake.sandbox) == EXPECTED_SANDBOX
    assert (intake.sandbox / "src/__init__.py").read_bytes() == b""  # never the student's
    assert (intake.sandbox / "src/collectives.py").read_bytes() == COLLECTIVES
    assert intake.present == frozenset([*STUDENT, "written_answers_task1.md"])
    assert intake.problems == ["all_to_all_schematic.png is missing"]  # .md/.pdf are alternatives
    assert intake.info.problems == intake.problems


def test_digests_cover_every_copied_file(tmp_path: Path) -> None:
    info = grab(repo(tmp_path / "sub"), tmp_path / "sandbox").info
    assert info.files == {
        "src/collectives.py": sha(COLLECTIVES),
        "src/transformer.py": sha(TRANSFORMER),
        "written_answers_task1.md": sha(b"# answers\n"),
    }
    lines = "".join(f"{k}:{v}\n" for k, v in sorted(info.files.items()))
    assert info.digest == sha(lines.encode())
    assert info.commit is None and info.submitted_at is None


def test_flat_layout_gives_the_same_sandbox_and_digest(tmp_path: Path) -> None:
    nested = grab(repo(tmp_path / "nested"), tmp_path / "a").info
    flat_files = {"collectives.py": COLLECTIVES, "transformer.py": TRANSFORMER}
    flat_src = write_tree(tmp_path / "flat", {**flat_files, "written_answers_task1.md": b"# answers\n"})
    flat = grab(flat_src, tmp_path / "b")
    assert listing(flat.sandbox) == EXPECTED_SANDBOX
    assert flat.info.digest == nested.digest


def test_classroom_wrapper_directory_is_descended(tmp_path: Path) -> None:
    repo(tmp_path / "download" / "a9-alice")
    (tmp_path / "download" / ".DS_Store").write_bytes(b"x")
    intake = grab(tmp_path / "download", tmp_path / "sandbox")
    assert listing(intake.sandbox) == EXPECTED_SANDBOX


def test_several_submissions_in_one_directory_is_a_user_error(tmp_path: Path) -> None:
    repo(tmp_path / "class" / "alice")
    repo(tmp_path / "class" / "bob")
    with pytest.raises(UserError, match="several submissions"):
        grab(tmp_path / "class", tmp_path / "sandbox")


def test_missing_files_are_problems_not_errors(tmp_path: Path) -> None:
    intake = grab(write_tree(tmp_path / "sub", {"README.md": b"hi"}), tmp_path / "sandbox")
    assert listing(intake.sandbox) == {"src/__init__.py"}
    assert intake.present == frozenset()
    assert intake.problems == [
        "src/collectives.py is missing",
        "src/transformer.py is missing",
        "written_answers_task1.md or written_answers_task1.pdf is missing",
        "all_to_all_schematic.png is missing",
    ]


def test_nonexistent_source_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        grab(tmp_path / "nope", tmp_path / "sandbox")


def test_symlinks_are_refused_never_followed(tmp_path: Path) -> None:
    secret = write_tree(tmp_path / "reference", {"collectives.py": b"SECRET", "transformer.py": b"SECRET"})
    sub = write_tree(tmp_path / "sub", {"written_answers_task1.md": b"a"})
    (sub / "src").symlink_to(secret)  # a symlinked directory component
    (sub / "all_to_all_schematic.png").symlink_to(secret / "collectives.py")
    intake = grab(sub, tmp_path / "sandbox")
    assert "SECRET" not in "".join(p.read_text() for p in intake.sandbox.rglob("*") if p.is_file())
    assert "src is a symlink: refused" in intake.problems
    assert "all_to_all_schematic.png is a symlink: refused" in intake.problems


def test_symlinked_file_and_fifo_and_oversize_are_refused(tmp_path: Path) -> None:
    sub = write_tree(tmp_path / "sub", {"src/transformer.py": b"x" * 101, "secret.py": b"SECRET"})
    (sub / "src" / "collectives.py").symlink_to(sub / "secret.py")
    os.mkfifo(sub / "written_answers_task1.md")
    intake = grab(sub, tmp_path / "sandbox", max_file=100)
    assert listing(intake.sandbox) == {"src/__init__.py"}
    assert intake.problems[:3] == [
        "src/collectives.py is a symlink: refused",
        "src/transformer.py is over the 100-byte limit: refused",
        "written_answers_task1.md is a FIFO: refused",
    ]


def test_total_budget_refuses_files_past_it(tmp_path: Path) -> None:
    sub = write_tree(tmp_path / "sub", {"src/collectives.py": b"a" * 60, "src/transformer.py": b"b" * 60})
    intake = grab(sub, tmp_path / "sandbox", max_total=100)
    assert intake.present == frozenset({"src/collectives.py"})
    assert "src/transformer.py would take the submission past 100 bytes: refused" in intake.problems


def test_sandbox_is_readable_by_others_and_writable_only_by_its_owner(tmp_path: Path) -> None:
    intake = grab(repo(tmp_path / "sub"), tmp_path / "sandbox")
    for path in [intake.sandbox, *intake.sandbox.rglob("*")]:
        st = path.lstat()
        assert stat.S_IMODE(st.st_mode) == (0o755 if path.is_dir() else 0o644), path
        if os.geteuid() == 0:
            assert (st.st_uid, st.st_gid) == (0, 0)


def test_dest_must_be_fresh(tmp_path: Path) -> None:
    write_tree(tmp_path / "sandbox", {"stale.txt": b"old"})
    with pytest.raises(FileExistsError):
        grab(repo(tmp_path / "sub"), tmp_path / "sandbox")


# --- archives ------------------------------------------------------------------------------------


def make_zip(path: Path, members: list[tuple[str, bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_zip_with_wrapper_directory(tmp_path: Path) -> None:
    archive = make_zip(
        tmp_path / "sub.zip",
        [
            ("a9-alice/src/collectives.py", COLLECTIVES, 0o100644),
            ("a9-alice/src/transformer.py", TRANSFORMER, 0o100644),
            ("a9-alice/conftest.py", b"boom", 0o100644),
            ("a9-alice/written_answers_task1.md", b"# answers\n", 0o100644),
        ],
    )
    intake = grab(archive, tmp_path / "sandbox")
    assert listing(intake.sandbox) == EXPECTED_SANDBOX
    assert intake.info.source == str(archive)


def test_zip_refuses_escaping_and_symlink_members(tmp_path: Path) -> None:
    archive = make_zip(
        tmp_path / "sub.zip",
        [
            ("../collectives.py", b"escape", 0o100644),
            ("/tmp/transformer.py", b"absolute", 0o100644),
            ("src/collectives.py", b"/work/main/reference/a9/src/collectives.py", 0o120777),
            ("src/transformer.py", TRANSFORMER, 0o100644),
        ],
    )
    intake = grab(archive, tmp_path / "sandbox")
    assert not (tmp_path / "collectives.py").exists()
    assert intake.present == frozenset({"src/transformer.py"})
    assert intake.problems[:3] == [
        "../collectives.py in the archive points outside the archive: refused",
        "/tmp/transformer.py in the archive points outside the archive: refused",
        "src/collectives.py in the archive is a symlink: refused",
    ]


def test_zip_bomb_stops_at_the_total_budget(tmp_path: Path) -> None:
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("src/collectives.py", COLLECTIVES)
        for i in range(50):
            zf.writestr(f"junk/{i}.bin", b"\0" * (1 << 20))
        zf.writestr("src/transformer.py", TRANSFORMER)
    intake = grab(path, tmp_path / "sandbox", max_file=1 << 20, max_total=3 << 20)
    assert "the archive expands past 3145728 bytes: stopped there" in intake.problems
    assert intake.present == frozenset({"src/collectives.py"})
    assert "src/transformer.py is missing" in intake.problems


def test_tar_refuses_links_and_devices(tmp_path: Path) -> None:
    path = tmp_path / "sub.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in [("src/transformer.py", TRANSFORMER), ("notes.txt", b"n")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("src/collectives.py")
        link.type, link.linkname = tarfile.LNKTYPE, "/work/main/reference/a9/src/collectives.py"
        tf.addfile(link)
        dev = tarfile.TarInfo("written_answers_task1.md")
        dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
        tf.addfile(dev)
    intake = grab(path, tmp_path / "sandbox")
    assert intake.present == frozenset({"src/transformer.py"})
    assert intake.problems[:2] == [
        "src/collectives.py in the archive is a hard link: refused",
        "written_answers_task1.md in the archive is not a regular file: refused",
    ]


@pytest.mark.parametrize("name", ["broken.zip", "broken.tar.gz", "notes.txt"])
def test_unreadable_archive_is_a_user_error(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"this is not an archive")
    with pytest.raises(UserError):
        grab(tmp_path / name, tmp_path / "sandbox")


# --- git -----------------------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    when = "2025-03-01T12:00:00+00:00"
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    ident = ["-c", "user.name=Student", "-c", "user.email=s@example.com"]
    done = subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout


def git_repo(root: Path) -> tuple[Path, str]:
    repo(root)
    (root / "src" / "escape.py").symlink_to("/etc/passwd")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "work")
    return root, git(root, "rev-parse", "HEAD").strip()


def test_local_git_repo_records_its_commit_but_not_its_date_as_the_submission_time(tmp_path: Path) -> None:
    root, head = git_repo(tmp_path / "sub")
    info = grab(root, tmp_path / "sandbox").info
    assert info.commit == head
    assert (info.submitted_at, info.submitted_at_source) == (None, TimeSource.UNKNOWN)
    assert info.problems == ["all_to_all_schematic.png is missing"]


def test_commit_date_is_the_submission_time_only_when_trusted(tmp_path: Path) -> None:
    root, _ = git_repo(tmp_path / "sub")
    info = grab(root, tmp_path / "sandbox", trust_commit_time=True).info
    assert (info.submitted_at, info.submitted_at_source) == ("2025-03-01T12:00:00+00:00", TimeSource.COMMIT)


def test_a_given_time_wins_over_a_trusted_commit_date(tmp_path: Path) -> None:
    root, _ = git_repo(tmp_path / "sub")
    pushed = SubmittedAt("2025-03-02T00:00:00+00:00", TimeSource.PUSH)
    info = grab(root, tmp_path / "sandbox", submitted_at=pushed, trust_commit_time=True).info
    assert (info.submitted_at, info.submitted_at_source) == ("2025-03-02T00:00:00+00:00", TimeSource.PUSH)


def test_uncommitted_changes_are_named(tmp_path: Path) -> None:
    root, head = git_repo(tmp_path / "sub")
    (root / "src" / "collectives.py").write_bytes(b"changed\n")
    intake = grab(root, tmp_path / "sandbox")
    assert (intake.sandbox / "src/collectives.py").read_bytes() == b"changed\n"
    assert intake.info.commit == head
    assert "src/collectives.py differs from the last commit: graded as in the working tree" in intake.problems


def test_git_url_is_fetched_and_symlinks_in_it_refused(tmp_path: Path) -> None:
    root, head = git_repo(tmp_path / "sub")
    (root / "src" / "collectives.py").unlink()
    (root / "src" / "collectives.py").symlink_to("/work/main/reference/a9/src/collectives.py")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "link")
    intake = grab(f"file://{root}", tmp_path / "sandbox")
    assert intake.info.commit == git(root, "rev-parse", "HEAD").strip() != head
    assert intake.present == frozenset({"src/transformer.py", "written_answers_task1.md"})
    assert "src/collectives.py is a symlink: refused" in intake.problems
    assert listing(intake.sandbox) == EXPECTED_SANDBOX - {"src/collectives.py"}


def test_bare_repository_path_is_read(tmp_path: Path) -> None:
    root, head = git_repo(tmp_path / "sub")
    git(tmp_path, "clone", "-q", "--bare", str(root), str(tmp_path / "bare.git"))
    intake = grab(tmp_path / "bare.git", tmp_path / "sandbox")
    assert intake.info.commit == head
    assert listing(intake.sandbox) == EXPECTED_SANDBOX


def test_unreachable_git_url_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read the git repository"):
        grab(f"file://{tmp_path}/missing.git", tmp_path / "sandbox")


# --- any tree, bounded ----------------------------------------------------------------------------


def test_a_deliverable_deeper_than_the_search_is_missing_and_the_cut_is_said(tmp_path: Path) -> None:
    sub = write_tree(tmp_path / "sub", {"src/collectives.py": COLLECTIVES})
    deep = sub / "/".join(["d"] * (MAX_DEPTH + 2))
    deep.mkdir(parents=True)
    (deep / "written_answers_task1.md").write_bytes(b"too deep\n")
    intake = grab(sub, tmp_path / "sandbox")
    assert f"folders nest over {MAX_DEPTH} levels deep: the search stopped there" in intake.problems
    assert "written_answers_task1.md or written_answers_task1.pdf is missing" in intake.problems


def test_a_huge_number_of_entries_stops_the_search_not_the_grader(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(intake_module, "MAX_ENTRIES", 40)
    sub = write_tree(tmp_path / "sub", {"src/collectives.py": COLLECTIVES})
    write_tree(sub / "many", {f"f{i:03}": b"" for i in range(100)})
    intake = grab(sub, tmp_path / "sandbox")
    assert "the submission holds over 40 files and folders: the search stopped there" in intake.problems
    assert intake.present == frozenset({"src/collectives.py"})


def test_a_deliverable_found_in_several_places_is_not_guessed(tmp_path: Path) -> None:
    sub = write_tree(
        tmp_path / "sub",
        {"src/collectives.py": COLLECTIVES, "a/written_answers_task1.md": b"a", "b/written_answers_task1.md": b"b"},
    )
    intake = grab(sub, tmp_path / "sandbox")
    places = "a/written_answers_task1.md, b/written_answers_task1.md"
    assert f"written_answers_task1.md is in several places ({places}): none was taken" in intake.problems


def test_a_pattern_deliverable_is_the_first_match_at_the_root_and_keeps_its_own_name(tmp_path: Path) -> None:
    """A4 hands in "the .log of a run": whatever the job scheduler called it."""
    sub = write_tree(tmp_path / "sub", {"a.py": b"", "job-17.log": b"one", "job-18.log": b"two", "x.err": b"e"})
    taken = materialize(sub, ["a.py"], [("*.log",), ("*.err",)], tmp_path / "sandbox", 1 << 20, 4 << 20)
    assert listing(taken.sandbox) == {"a.py", "job-17.log", "x.err"}
    assert taken.present == frozenset({"a.py", "*.log", "*.err"}) and taken.problems == []


def test_a_pattern_deliverable_below_the_root_must_be_one_and_a_missing_one_is_named(tmp_path: Path) -> None:
    sub = write_tree(tmp_path / "sub", {"a.py": b"", "runs/1/out.log": b"1", "runs/2/out.log": b"2"})
    taken = materialize(sub, ["a.py"], [("*.log",), ("*.err",)], tmp_path / "sandbox", 1 << 20, 4 << 20)
    assert listing(taken.sandbox) == {"a.py"}
    assert taken.problems == [
        "*.log is in several places (runs/1/out.log, runs/2/out.log): none was taken",
        "*.log is missing",
        "*.err is missing",
    ]
    (sub / "runs" / "2" / "out.log").unlink()
    taken = materialize(sub, ["a.py"], [("*.log",)], tmp_path / "again", 1 << 20, 4 << 20)
    assert listing(taken.sandbox) == {"a.py", "out.log"}


def test_hard_links_are_refused(tmp_path: Path) -> None:
    outside = write_tree(tmp_path / "outside", {"secret.py": b"SECRET"})
    sub = write_tree(tmp_path / "sub", {"src/transformer.py": TRANSFORMER})
    os.link(outside / "secret.py", sub / "src" / "collectives.py")
    intake = grab(sub, tmp_path / "sandbox")
    assert intake.present == frozenset({"src/transformer.py"})
    assert "src/collectives.py is a hard link (2 names for one file): refused" in intake.problems


def test_sockets_are_refused(tmp_path: Path, monkeypatch) -> None:
    sub = write_tree(tmp_path / "sub", {"src/collectives.py": COLLECTIVES})
    monkeypatch.chdir(sub)  # a socket's path must be short: bind it relative to here
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("written_answers_task1.md")
        intake = grab(sub, tmp_path / "sandbox")
    assert "written_answers_task1.md is a socket: refused" in intake.problems


def test_names_of_any_bytes_reach_the_problems_printable(tmp_path: Path) -> None:
    sub = write_tree(tmp_path / "sub", {"src/collectives.py": COLLECTIVES})
    odd = os.path.join(os.fsencode(sub), b"old\xff\n\x1b[2J")
    os.mkdir(odd)
    os.symlink(b"/etc/passwd", os.path.join(odd, b"written_answers_task1.md"))
    intake = grab(sub, tmp_path / "sandbox")
    assert "old\\xff\\n\\x1b[2J/written_answers_task1.md is a symlink: refused" in intake.problems
    assert all(problem.isprintable() for problem in intake.problems)


def test_archive_members_nested_too_deep_or_unwritable_are_refused_and_the_rest_kept(tmp_path: Path) -> None:
    deep = "/".join(["d"] * (MAX_DEPTH + 1))
    archive = make_zip(
        tmp_path / "sub.zip",
        [
            (f"{deep}/written_answers_task1.md", b"deep", 0o100644),
            ("x" * 300 + "/all_to_all_schematic.png", b"long", 0o100644),
            ("src/collectives.py", COLLECTIVES, 0o100644),
        ],
    )
    intake = grab(archive, tmp_path / "sandbox")
    assert intake.present == frozenset({"src/collectives.py"})
    assert f"{deep}/written_answers_task1.md in the archive is nested over {MAX_DEPTH} folders deep: refused" in (
        intake.problems
    )
    assert f"{'x' * 300}/all_to_all_schematic.png in the archive cannot be written (File name too long): refused" in (
        intake.problems
    )


def test_a_zip_member_whose_name_zipfile_reads_as_empty_is_skipped(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "sub.zip", [("\0", b"", 0o100644), ("src/collectives.py", COLLECTIVES, 0o100644)])
    assert grab(archive, tmp_path / "sandbox").present == frozenset({"src/collectives.py"})


def test_a_tar_declaring_far_more_than_the_limit_is_not_read_through(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in [("src/collectives.py", COLLECTIVES), ("zeros.bin", bytes(64 << 10))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("src/transformer.py")
        info.size = len(TRANSFORMER)
        tf.addfile(info, io.BytesIO(TRANSFORMER))
    intake = grab(path, tmp_path / "sandbox", max_file=1 << 20, max_total=4 << 10)
    assert f"the archive's members declare over {8 * (4 << 10)} bytes: rest ignored" in intake.problems
    assert intake.present == frozenset({"src/collectives.py"})
