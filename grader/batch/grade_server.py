"""A batch's grades forked from one process that imported the grader once (issue 41), instead of one
``python -m grader grade`` started per student.

Python's start and the grader's imports were about 0.6 of the 8 CPU-s an A9 grade costs on a 2-core
machine, and a class of 1,500 paid them 1,500 times.  A grade server imports what every grade imports
(the command line and the stages of ``grader grade``: :data:`MODULES`, nothing of any pack, rubric or
student) and forks a grade per request.  A request is descriptors and nothing else: the grade's control
pipe, its log, and its connection to the batch's host server where it has one.  The command line and
the environment, which holds the salt, reach the forked child alone, on its pipe.  So the server holds
nothing of any student, and each grade starts from the memory of a process told nothing, as a fresh
interpreter does.  A forked grade leads a session of its own, as ``start_new_session`` gives a cold one;
it dies with the server, and the server with the batch.

Started, kept and replaced like a host server (``grader.matrix.warm``): ``python -m
grader.batch.grade_server --runner PID --serve FD``, in the batch's own environment and directory.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import runpy
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from grader.matrix import warm
from grader.matrix.host import MAX_REQUEST, SERVER_ENV
from grader.salt import SALT_ENV
from grader.sandbox.parent import DIE_WITH_PARENT_ENV

#: What every ``grader grade`` imports, whatever it grades: preloaded by the server before any request.
MODULES = (
    "grader.cli",
    "grader.pipeline",
    "grader.intake",
    "grader.late",
    "grader.runner",
    "grader.scoring",
    "grader.selection",
    "grader.tempdirs",
    "grader.rubric",
    "grader.render.outputs",
    "grader.render.markdown",
    "grader.runtimes.torchdist.static",
)


#: What ``ps`` names a forked grade once it has read its command: before, it is a copy of its server,
#: named as it is.  So an operator tells a server from its grades, and a test finds a grade under way.
GRADE_NAME = "grader-grade"


class GradeServer(warm.ForkServer):
    """A server of ``grader grade`` processes: :meth:`grade` forks one."""

    module = "grader.batch.grade_server"
    isolated = False  # as `python -m grader grade` starts: the batch's PYTHON* variables and site apply

    @classmethod
    def start_here(cls) -> GradeServer | None:
        """A server for the grades this process starts, in its environment (less any salt: each grade is
        sent its own) and directory; on Linux only, as the host server (elsewhere grades start cold)."""
        if not sys.platform.startswith("linux"):
            return None
        return cls.start({k: v for k, v in os.environ.items() if k != SALT_ENV}, os.getcwd())

    def grade(
        self, cmd: Sequence[str], env: dict[str, str], log: IO[bytes], lent: Sequence[int]
    ) -> warm.ServedProcess | None:
        """``cmd`` with ``env``, its output to ``log``, handed the descriptors ``lent`` (``lend_server``'s):
        forked by this server; None where it cannot be (another command than this Python's ``-m
        grader``, or the server is gone), and the caller starts it cold."""
        if list(cmd[:3]) != [sys.executable, "-m", "grader"] or len(lent) > 1:
            return None
        control, request = os.pipe()
        try:
            proc = self.fork(control, log, *lent)
        finally:
            os.close(control)
        try:
            with os.fdopen(request, "wb") as pipe:
                if proc is not None:
                    told = {**env, DIE_WITH_PARENT_ENV: str(self.pid)}  # its parent is this server, not the batch
                    pipe.write(json.dumps({"argv": list(cmd[3:]), "env": told, "cwd": os.getcwd()}).encode())
        except BrokenPipeError:  # the child died before it read its grade: it died with the server (PDEATHSIG),
            pass  # which its end says (warm.died_with_server), and the caller grades it again
        return proc


def _become_grade(control: int, *lent: int) -> None:
    """The forked child: read the grade's command line, environment and directory, then run it as
    ``python -m grader`` does.  ``lent``: its connection to the batch's host server, which its
    environment names by the number it had in the batch (:meth:`HostServer.renumbered`)."""
    with os.fdopen(control, "rb") as pipe:
        data = pipe.read(MAX_REQUEST + 1)
    if not data or len(data) > MAX_REQUEST:
        raise SystemExit("the batch sent no grade")  # it is gone; PDEATHSIG ends us next
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(GRADE_NAME)
    request = json.loads(data)
    env = {str(k): str(v) for k, v in request["env"].items()}
    if lent and SERVER_ENV in env:
        env[SERVER_ENV] = warm.HostServer.renumbered(env[SERVER_ENV], lent[0])
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.argv = [sys.argv[0], *(str(a) for a in request["argv"])]
    runpy.run_module("grader", run_name="__main__", alter_sys=True)  # exits, with the command's status


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runner", type=int, required=True, help="the batch's pid: this process dies with it")
    parser.add_argument("--serve", type=int, required=True, help="the socket the batch's requests come on")
    args = parser.parse_args()
    from grader.sandbox.parent import die_with_parent

    die_with_parent(args.runner, signal.SIGKILL)
    for name in MODULES:
        importlib.import_module(name)
    warm.serve(socket.socket(fileno=args.serve), _become_grade, extra=1)


if __name__ == "__main__":
    main()
