"""The matrix session's process, which forks the session's zygote before it becomes the session.

Run as ``python -I -m grader.matrix.host`` by ``grader.runner`` wherever the Linux sandbox is built
(the portable runtime has no zygote: its session is a plain ``python -m pytest``).  The process
starts in the zygote's scrubbed environment and imports what every rank needs, the zygote's
preload (torch, the rank runtime, the pack's rank-side bodies).  Then it forks:

- the child is the zygote (``grader.runtimes.torchdist.zygote.serve``), with the memory of a
  process that has been told nothing yet, exactly as when it was a process of its own;
- the parent becomes the matrix session: only now does it read, from the runner's pipe, the
  session's pytest arguments and environment (the path of its configuration, which holds the salt),
  and run pytest with the matrix plugin, whose ``MatrixSession`` takes the zygote over
  (``session.Zygote.forked``).

So the session and its zygote share one import of torch, which each used to pay for: 1.2-1.7 s of
CPU a grading on a 2-core machine (issue 23).  The zygote dies with the session (PDEATHSIG), and the
session with the runner, as before.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys

MAX_REQUEST = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runner", type=int, required=True, help="the runner's pid: this process dies with it")
    parser.add_argument("--control", type=int, required=True, help="the pipe the session's request comes on")
    parser.add_argument("--bodies", required=True, help="the pack's rank-side module, e.g. grader.packs.a9.bodies")
    parser.add_argument("--path", action="append", default=[], help="where a pack that is not installed lives")
    args = parser.parse_args()
    from grader.runtimes.torchdist import zygote
    from grader.runtimes.torchdist.zygote import ZYGOTE_ENV
    from grader.sandbox import isolation

    isolation.die_with_parent(args.runner, signal.SIGKILL)
    sys.path[:0] = args.path
    zygote.preload(args.bodies)
    session, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    host = os.getpid()
    pid = os.fork()
    if pid == 0:
        session.close()
        os.close(args.control)
        isolation.die_with_parent(host, signal.SIGKILL)
        zygote.serve(theirs, args.bodies)  # never returns
    theirs.close()
    argv, env, cwd = _request(args.control)
    os.environ.clear()
    os.environ.update(env)
    os.environ[ZYGOTE_ENV] = f"{session.fileno()}:{pid}"
    os.chdir(cwd)
    sys.argv = ["pytest", *argv]
    import pytest

    raise SystemExit(pytest.console_main())


def _request(fd: int) -> tuple[list[str], dict[str, str], str]:
    """The runner's one message, ``{"argv": [...], "env": {...}, "cwd": "..."}``, then end of file:
    the session's pytest arguments, environment and directory."""
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
        if len(data) > MAX_REQUEST:
            raise SystemExit("the runner's request is too large")
    os.close(fd)
    if not data:
        raise SystemExit("the runner sent no request")  # it is gone; PDEATHSIG ends us next
    request = json.loads(data)
    return [str(a) for a in request["argv"]], {str(k): str(v) for k, v in request["env"].items()}, str(request["cwd"])


if __name__ == "__main__":
    main()
