"""``oidc.jwks`` as a URL, as GitHub publishes its keys: served here by a real HTTP server on this
machine.  Tokens verify against the fetched keys; a rotation (a new key id) is picked up by one fetch;
tokens naming made-up key ids cost the issuer at most one fetch per ``JWKS_REFETCH_S``; an unreachable,
garbage or oversized JWKS refuses the push with a JSON 503 and the service stays up.  Time is the test's own
clock (``Verifier(clock=...)``): nothing here waits."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from grader.service.app import create_app, open_service
from grader.service.config import load_config
from grader.service.oidc import JWKS_REFETCH_S, JWKS_TTL_S, MAX_JWKS_BYTES, Verifier
from grader.service.refusal import Refused
from tests.local_service import free_port
from tests.oidc_issuer import Issuer
from tests.service_kit import bundle, commit_tree, write_config


class Keys:
    """The issuer's JWKS endpoint: answers ``body`` (the key set, or garbage) and counts its GETs."""

    def __init__(self, issuer: Issuer) -> None:
        self.keys = [issuer.key]
        self.body = self.key_set()
        self.gets = 0
        keys = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                keys.gets += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(keys.body)))
                self.end_headers()
                self.wfile.write(keys.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def key_set(self) -> bytes:
        return json.dumps(KeySet(self.keys).as_dict(private=False)).encode()

    def rotate(self, kid: str) -> RSAKey:
        """A new key the issuer now signs with, published beside the old one (as GitHub rotates)."""
        key = RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})
        self.keys.append(key)
        self.body = self.key_set()
        return key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    def __init__(self, root: Path) -> None:
        self.issuer = Issuer(root)
        self.keys = Keys(self.issuer)
        self.clock = Clock()
        config = load_config(write_config(root, self.issuer))
        self.oidc = replace(config.oidc, jwks=self.keys.url)
        self.service = open_service(replace(config, oidc=self.oidc))
        self.service.verifier = self.verifier()
        self.client = TestClient(create_app(self.service))
        repo = root / "a5-alice"
        self.sha = commit_tree(repo, {"report.md": b"# My report\n"})
        self.bundle = bundle(repo)

    def verifier(self, jwks: str | None = None) -> Verifier:
        return Verifier(replace(self.oidc, jwks=jwks or self.keys.url), clock=self.clock)

    def token(self, student: str, key: RSAKey | None = None, kid: str = "test-key") -> str:
        claims = self.issuer.claims(f"course-org/a5-{student}", self.sha)
        return jwt.encode({"alg": "RS256", "typ": "JWT", "kid": kid}, claims, key or self.issuer.key)

    def post(self, token: str) -> tuple[int, dict]:
        answer = self.client.post(
            "/api/v1/assignments/a5/submissions", content=self.bundle, headers={"Authorization": f"Bearer {token}"}
        )
        return answer.status_code, answer.json()


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[Setup]:
    setup = Setup(tmp_path_factory.mktemp("jwks"))
    with setup.client:
        yield setup
    setup.keys.server.shutdown()
    setup.keys.server.server_close()


def test_pushes_verify_against_the_keys_fetched_once_from_the_url(setup):
    before = setup.keys.gets
    for student in ("alice", "bob"):
        status, answer = setup.post(setup.token(student))
        assert status == 202, answer
    assert setup.keys.gets == before + 1


def test_a_rotated_key_is_picked_up_by_one_fetch_and_held_keys_are_fetched_again_when_stale(setup):
    verifier = setup.verifier()
    assert verifier.verify(setup.token("carol")).repository == "course-org/a5-carol"
    fetched = setup.keys.gets
    new = setup.keys.rotate("rotated")
    setup.clock.now += JWKS_REFETCH_S
    assert verifier.verify(setup.token("carol", new, "rotated")).repository == "course-org/a5-carol"
    assert verifier.verify(setup.token("dave", new, "rotated")).repository == "course-org/a5-dave"
    assert setup.keys.gets == fetched + 1
    setup.clock.now += JWKS_TTL_S + 1
    verifier.verify(setup.token("dave"))
    assert setup.keys.gets == fetched + 2


def test_a_flood_of_made_up_key_ids_costs_the_issuer_one_fetch_per_interval(setup):
    verifier = setup.verifier()
    verifier.verify(setup.token("erin"))
    forger = Issuer.stranger_key()
    for wave in range(3):
        setup.clock.now += JWKS_REFETCH_S
        before = setup.keys.gets
        for n in range(20):
            with pytest.raises(Refused) as refused:
                verifier.verify(setup.token("erin", forger, f"forged-{wave}-{n}"))
            assert (refused.value.status, refused.value.code) == (401, "bad_token")
        assert setup.keys.gets == before + 1, wave


def test_an_unreachable_or_garbage_jwks_refuses_the_push_with_a_json_503_and_the_service_stays_up(setup):
    closed = f"http://127.0.0.1:{free_port()}/jwks"
    padded = setup.keys.key_set().replace(b"[", b"[" + b" " * MAX_JWKS_BYTES, 1)  # a valid key set, only too big
    answers = ((None, b"<html>an error page</html>"), (None, b'{"keys": [{"kty": "zz"}]}'), (None, padded))
    for jwks, body in ((closed, None), *answers):
        if body is not None:
            setup.keys.body = body
        setup.service.verifier = setup.verifier(jwks)
        status, answer = setup.post(setup.token("frank"))
        assert (status, answer["error"]["code"]) == (503, "jwks_unavailable"), (jwks, body, answer)
        assert "push again later" in answer["error"]["message"]
        assert setup.client.get("/healthz").json() == {"ok": True}
    setup.keys.body = setup.keys.key_set()
    setup.clock.now += JWKS_REFETCH_S  # the issuer is back: the next push after the interval is taken
    status, answer = setup.post(setup.token("frank"))
    assert status == 202, answer


def test_keys_held_keep_verifying_while_the_issuer_is_down(setup):
    verifier = setup.verifier()
    verifier.verify(setup.token("gina"))
    setup.keys.body = b"garbage"
    try:
        setup.clock.now += JWKS_TTL_S + 1  # stale: fetched again, in vain
        before = setup.keys.gets
        assert verifier.verify(setup.token("gina")).repository == "course-org/a5-gina"
        assert verifier.verify(setup.token("hal")).repository == "course-org/a5-hal"
        assert setup.keys.gets == before + 1
    finally:
        setup.keys.body = setup.keys.key_set()
