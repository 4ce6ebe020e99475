"""A local OIDC issuer for the service's tests: a generated RSA key, its JWKS in a file, and tokens
with GitHub Actions' claim names, as ``token.actions.githubusercontent.com`` signs them.

``Issuer.token(repository=..., sha=...)`` is a valid token; any claim can be overridden or dropped
(``None``), and ``key=`` signs with another key (a forgery)."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


class Issuer:
    def __init__(self, directory: Path, audience: str = "https://grader.test", owner: str = "course-org") -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.jwks = Path(directory) / "jwks.json"
        self.jwks.write_text(json.dumps(KeySet([self.key]).as_dict(private=False)))
        self.issuer, self.audience, self.owner = GITHUB_ISSUER, audience, owner

    def claims(self, repository: str, sha: str, **override: Any) -> dict[str, Any]:
        now = int(time.time())
        owner = repository.partition("/")[0]
        claims: dict[str, Any] = {
            "jti": secrets.token_hex(16),
            "sub": f"repo:{repository}:ref:refs/heads/main",
            "aud": self.audience,
            "ref": "refs/heads/main",
            "sha": sha,
            "repository": repository,
            "repository_owner": owner,
            "repository_owner_id": "1000",
            "repository_id": "2000",
            "repository_visibility": "private",
            "run_id": str(now),
            "run_number": "1",
            "run_attempt": "1",
            "actor": repository.partition("/")[2],
            "actor_id": "3000",
            "workflow": "GitHub Classroom Workflow",
            "event_name": "push",
            "ref_type": "branch",
            "job_workflow_ref": f"{repository}/.github/workflows/classroom.yml@refs/heads/main",
            "iss": self.issuer,
            "nbf": now - 5,
            "exp": now + 300,
            "iat": now - 5,
        }
        claims.update(override)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, repository: str, sha: str, *, key: RSAKey | None = None, **override: Any) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": "test-key"}
        return jwt.encode(header, self.claims(repository, sha, **override), key or self.key)

    @staticmethod
    def stranger_key() -> RSAKey:
        """A key of nobody's JWKS: what a forger signs with."""
        return RSAKey.generate_key(2048, parameters={"kid": "test-key"})
