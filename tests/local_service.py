"""A real ``grader serve`` on this machine, and GitHub Actions' token endpoint beside it, for the tests and
benches of the service's clients (tests/test_submit.py, scripts/bench-service.py, scripts/bench-classroom.py).

``local_service`` writes a config (SQLite in ``root/state``, OIDC from a ``tests/oidc_issuer.Issuer``), starts
the service in a process group of its own, waits for ``/healthz`` and stops it by its pid at the end.
``actions_token_endpoint`` plays ``$ACTIONS_ID_TOKEN_REQUEST_URL``: a GET with the request token as bearer
and ``&audience=`` answers ``{"value": JWT}``, a token the issuer signs for the job's repository and commit
with that audience, as GitHub's runner service does.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml
from oidc_issuer import Issuer

REPO = Path(__file__).resolve().parents[1]
OWNER = "course-org"
START_S = 120.0  # for /healthz: migrations and a torch import on a loaded machine


@dataclass(frozen=True)
class LocalService:
    url: str
    state: Path
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_service(
    root: Path,
    issuer: Issuer,
    assignments: list[dict[str, Any]],
    *,
    workers: int = 1,
    port: int | None = None,
    command: tuple[str, ...] = (sys.executable, "-m", "grader", "serve", "--config"),
    **extra: Any,
) -> Iterator[LocalService]:
    """``grader serve`` with ``assignments``, the issuer's audience and owner, and ``extra`` config keys, on
    ``port`` (default: a free one); ``command``, given the config's path, starts it."""
    port = port or free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "state_dir": str(root / "state"),
        "workers": workers,
        "oidc": {"issuer": issuer.issuer, "jwks": str(issuer.jwks), "audience": issuer.audience, "owners": [OWNER]},
        "assignments": assignments,
        **extra,
    }
    (root / "service.yaml").write_text(yaml.safe_dump(config))
    log = root / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, str(root / "service.yaml")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,  # a rubric may name a pack by module path from here (tests.toy_pack.pack:PACK)
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield LocalService(url, root / "state", log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"grader serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"grader serve did not answer /healthz within {START_S:g} s:\n{log.read_text()[-3000:]}")


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON."""

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def actions_token_endpoint(issuer: Issuer, repository: str, sha: str) -> Iterator[dict[str, str]]:
    """The two variables GitHub gives a job with ``id-token: write``, served from this machine."""
    bearer = secrets.token_hex(16)

    class Handler(JSONHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            if self.headers.get("Authorization") != f"bearer {bearer}" or "audience" not in query:
                self.answer(401, {"message": "Unauthorized"})
            else:
                self.answer(200, {"count": 1, "value": issuer.token(repository, sha, aud=query["audience"][0])})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {
            "ACTIONS_ID_TOKEN_REQUEST_URL": f"http://127.0.0.1:{server.server_address[1]}/token?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": bearer,
        }
    finally:
        server.shutdown()
        server.server_close()
