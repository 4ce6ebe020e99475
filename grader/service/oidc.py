"""GitHub Actions' proof of who is asking: the job's OIDC token, checked against the issuer's keys.

A workflow with ``permissions: id-token: write`` asks GitHub for a JWT naming the repository, its
owner and the commit the job runs on, signed with GitHub's key (RS256).  The service checks the
signature against the configured JWKS, then ``iss``, ``aud``, ``exp`` and ``nbf``, that
``repository_owner`` is one of the course's organisations and that ``repository`` is
``<owner>/<repo_prefix><student>``; the student is the name after the prefix.  Nothing in the
student's workflow file can change any of these: a student who edits it still gets a token for their
own repository and commit, and the service grades that commit itself.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.service.config import OidcConfig, valid_student
from grader.service.refusal import Refused

log = logging.getLogger("grader.service")

JWKS_TTL_S = 600.0  # a JWKS URL is fetched again after this long, or sooner for a token naming an unknown key id
JWKS_REFETCH_S = 30.0  # and never more often than this: a flood of made-up key ids cannot hammer the issuer
JWKS_TIMEOUT_S = 5.0  # for the whole answer, not each read: a server dripping bytes is cut off too
MAX_JWKS_BYTES = 1 << 20  # GitHub's key set is about 3 KiB; a URL that answers more is not a key set
LEEWAY_S = 30  # clock skew allowed on exp and nbf
MAX_TOKEN_BYTES = 16 << 10


@dataclass(frozen=True)
class Claims:
    """What a verified token says about the push."""

    repository: str
    owner: str
    sha: str
    jti: str | None


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


class Verifier:
    """Checks tokens against the configuration's issuer.  The JWKS is read at the first token and kept;
    a URL is fetched again after :data:`JWKS_TTL_S`, or when a token names a key id it does not hold
    (the issuer rotated its key), but at most once every :data:`JWKS_REFETCH_S` whatever the tokens
    say.  A fetch that fails keeps the keys held; with none held, tokens are refused (503) until one
    succeeds.  ``clock`` is monotonic seconds (a test's own clock)."""

    def __init__(self, config: OidcConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._keys: Any = None
        self._fetched = self._tried = -math.inf  # the last fetch that succeeded; the last one tried
        self._lock = threading.Lock()

    def _key_set(self, unknown_kid: bool = False) -> Any:
        url = _is_url(self.config.jwks)
        with self._lock:
            now = self._clock()
            wanted = self._keys is None or (url and (unknown_kid or now - self._fetched > JWKS_TTL_S))
            if wanted and (not url or now - self._tried >= JWKS_REFETCH_S):
                self._tried = now
                try:
                    self._keys, self._fetched = _read_jwks(self.config.jwks), now
                except JwksUnavailable as exc:
                    log.warning("the OIDC issuer's keys: %s", exc)
            if self._keys is None:
                raise Refused(
                    503, "jwks_unavailable", "the service cannot read its OIDC issuer's keys now: push again later"
                )
            return self._keys

    def verify(self, token: str) -> Claims:
        """The token's claims once every check passed; :class:`Refused` (401 or 403) naming the first
        that did not."""
        from joserfc import jwt
        from joserfc.errors import BadSignatureError, ExpiredTokenError, InvalidKeyIdError, JoseError
        from joserfc.jwt import JWTClaimsRegistry

        if len(token) > MAX_TOKEN_BYTES:
            raise Refused(401, "bad_token", "the token is too long to be an OIDC token")
        try:
            try:
                decoded = jwt.decode(token, self._key_set(), algorithms=["RS256"])
            except InvalidKeyIdError:
                decoded = jwt.decode(token, self._key_set(unknown_kid=True), algorithms=["RS256"])
        except BadSignatureError:
            raise Refused(401, "bad_signature", "the token's signature does not match the issuer's keys") from None
        except (ValueError, JoseError) as exc:
            raise Refused(401, "bad_token", f"the token cannot be verified: {_plain(exc)}") from None
        claims = decoded.claims
        registry = JWTClaimsRegistry(
            leeway=LEEWAY_S,
            iss={"essential": True, "value": self.config.issuer},
            aud={"essential": True, "value": self.config.audience},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except ExpiredTokenError:
            raise Refused(401, "expired_token", "the token has expired: run the workflow again") from None
        except JoseError as exc:
            claim = getattr(exc, "claim", "")
            code = {"iss": "wrong_issuer", "aud": "wrong_audience", "nbf": "token_not_yet_valid"}.get(
                claim, "bad_token"
            )
            raise Refused(401, code, f"the token's {claim or 'claims'} are refused: {_plain(exc)}") from None
        owner, repository, sha = (claims.get(k) for k in ("repository_owner", "repository", "sha"))
        if not all(isinstance(v, str) and v for v in (owner, repository, sha)):
            raise Refused(401, "bad_token", "the token names no repository_owner, repository or sha")
        assert isinstance(owner, str) and isinstance(repository, str) and isinstance(sha, str)
        if owner.casefold() not in {known.casefold() for known in self.config.owners}:  # GitHub's names ignore case
            raise Refused(403, "wrong_owner", f"repositories of {owner!r} are not graded by this service")
        jti = claims.get("jti")
        return Claims(repository, owner, sha.lower(), str(jti) if jti is not None else None)


def student_of(claims: Claims, repo_prefix: str, assignment: str) -> str:
    """The student a repository belongs to: the name after ``<owner>/<repo_prefix>``, whose case GitHub
    ignores (``A9-Alice`` is the repository Classroom named ``a9-alice``)."""
    owner, _, name = claims.repository.partition("/")
    matches = owner.casefold() == claims.owner.casefold() and name.casefold().startswith(repo_prefix.casefold())
    student = name[len(repo_prefix) :] if matches else ""
    if not valid_student(student):
        raise Refused(403, "wrong_repository", f"{claims.repository} is not a repository of assignment {assignment}")
    return student


def _is_url(jwks: str) -> bool:
    return jwks.startswith(("https://", "http://"))


class JwksUnavailable(Exception):
    """The JWKS could not be read, or is not a key set."""


def _read_jwks(jwks: str) -> Any:
    """The key set at ``jwks`` (a URL or a file); :class:`JwksUnavailable` saying why not."""
    import httpx
    from joserfc.errors import JoseError
    from joserfc.jwk import KeySet

    try:
        body = _fetch(jwks) if _is_url(jwks) else Path(jwks).read_bytes()
        return KeySet.import_key_set(json.loads(body))
    except (httpx.HTTPError, OSError, ValueError, TypeError, KeyError, JoseError) as exc:
        raise JwksUnavailable(f"{jwks}: {type(exc).__name__}: {_plain(exc)}") from None


def _fetch(url: str) -> bytes:
    """The body at ``url``: at most :data:`MAX_JWKS_BYTES`, within :data:`JWKS_TIMEOUT_S` in all (the
    verifier's lock is held meanwhile, so a slow or endless answer would stall every push)."""
    import httpx

    deadline = time.monotonic() + JWKS_TIMEOUT_S
    body = bytearray()
    with httpx.stream("GET", url, timeout=JWKS_TIMEOUT_S, follow_redirects=True) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError(f"the answer is over {MAX_JWKS_BYTES >> 20} MiB")
            if time.monotonic() > deadline:
                raise ValueError(f"the answer took over {JWKS_TIMEOUT_S:g} s")
    return bytes(body)


def _plain(exc: Exception) -> str:
    return (getattr(exc, "description", None) or str(exc) or type(exc).__name__).rstrip(".")
