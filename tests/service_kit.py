"""What the service's tests share: a student's repository as a git bundle, and a service.yaml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Student",
    "GIT_AUTHOR_EMAIL": "s@example.edu",
    "GIT_COMMITTER_NAME": "Student",
    "GIT_COMMITTER_EMAIL": "s@example.edu",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
}


def git(repo: Path, *args: str) -> str:
    """git on a repository the test made itself (never on a submission: the service reads those as data)."""
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=GIT_ENV)
    return done.stdout.decode().strip()


def commit_tree(repo: Path, files: dict[str, bytes] | Path) -> str:
    """Commit ``files`` (or a copy of a directory) as the repository's next commit; its sha."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q", "-b", "main")
    if isinstance(files, Path):
        shutil.copytree(files, repo, dirs_exist_ok=True)
    else:
        for name, data in files.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "work")
    return git(repo, "rev-parse", "HEAD")


def bundle(repo: Path) -> bytes:
    """HEAD with its history, as ``grader submit`` sends it."""
    out = repo.parent / f"{repo.name}.bundle"
    git(repo, "bundle", "create", str(out), "HEAD")
    return out.read_bytes()


def write_config(directory: Path, issuer, *, extra: str = "", assignment: str = "") -> Path:
    """A service.yaml for A5 (the cheapest pack to grade) behind ``issuer``, state in ``directory``."""
    config = directory / "service.yaml"
    config.write_text(
        f"""listen: 127.0.0.1:0
state_dir: {directory / "state"}
oidc:
  issuer: {issuer.issuer}
  jwks: {issuer.jwks}
  audience: {issuer.audience}
  owners: [course-org]
{extra}
assignments:
  - id: a5
    rubric: {ROOT / "rubrics" / "a5.yaml"}
    repo_prefix: a5-
{assignment}"""
    )
    return config
