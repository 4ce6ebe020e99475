"""A cached grading is trusted only under its seal: an HMAC, keyed by the instructor's secret kept
outside ``--out``, of every file a later rescore or report reads.

``grader batch`` scores every student again from the cache on every run (``grader.rescore``), so a
truncated ``junit.xml`` would stop the class and an edited verdict would raise a score silently.
When a grading is installed the batch seals it (``graded/seal.json``: each file's SHA-256 and an
HMAC-SHA256 over the list); before a cache entry is used, the seal is checked: a file missing,
added, changed or a seal made under another key makes the entry untrusted, and the student is
graded again with the reason in the gradebook.  ``grade.log`` is not sealed: nothing scores it.

The key is 32 random bytes in a file of its own, created on first use with mode 0600 in a 0700
directory: ``--seal-key FILE``, else ``$GRADER_SEAL_KEY_FILE``, else
``$XDG_STATE_HOME/dist-grader/seal.key`` (``~/.local/state/dist-grader/seal.key``).  It must not be
inside ``--out`` (whoever can edit the cache could then reseal it).  Losing it costs one regrade of
the class, nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from grader.errors import UserError
from grader.render.outputs import write_text

SEAL_FILE = "seal.json"
SEAL_KEY_ENV = "GRADER_SEAL_KEY_FILE"
UNSEALED = {SEAL_FILE, "grade.log"}  # in graded/: the seal itself, and a log nothing scores
_DOMAIN = b"dist-grader cache seal v1\n"


def key_path(option: Path | None) -> Path:
    """Where the key lives: ``--seal-key``, ``$GRADER_SEAL_KEY_FILE``, else the user's state directory."""
    if option is not None:
        return Path(option)
    if os.environ.get(SEAL_KEY_ENV):
        return Path(os.environ[SEAL_KEY_ENV])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dist-grader" / "seal.key"


def load_key(path: Path, out: Path | None = None) -> bytes:
    """The key in ``path``, made on first use (0600 in a 0700 directory).  Refused inside ``out``
    and when others can read it."""
    path = Path(path).absolute()
    if out is not None and path.resolve().is_relative_to(Path(out).resolve()):
        raise UserError(f"{path}: the seal key must be kept outside --out {out}")
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another batch made it meanwhile: use theirs
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
    if path.stat().st_mode & 0o077:
        raise UserError(f"{path}: the seal key is readable by others: `chmod 600 {path}`")
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if len(text) < 32:
        raise UserError(f"{path}: not a seal key (expected 64 hex digits); delete it to make a new one")
    return text.encode()


def _sealed_files(student_dir: Path, graded: str) -> dict[str, Path]:
    """Every file a rescore or a report reads: the outcome, and the grading but its log and seal."""
    files = {}
    outcome = student_dir / "batch-outcome.json"
    if outcome.exists():
        files[outcome.name] = outcome
    for path in sorted((student_dir / graded).rglob("*")):
        rel = path.relative_to(student_dir).as_posix()
        if path.parent == student_dir / graded and path.name in UNSEALED:
            continue
        if not path.is_dir():
            files[rel] = path
    return files


def _mac(key: bytes, digests: dict[str, str]) -> str:
    listing = "".join(f"{name}\0{digest}\n" for name, digest in sorted(digests.items()))
    return hmac.new(key, _DOMAIN + listing.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seal(student_dir: Path, graded: str, key: bytes) -> None:
    """Seal the grading in ``student_dir`` (before it is moved into place)."""
    digests = {name: _digest(path) for name, path in _sealed_files(student_dir, graded).items()}
    body = {"version": 1, "files": digests, "hmac": _mac(key, digests)}
    write_text(student_dir / graded / SEAL_FILE, json.dumps(body, indent=2) + "\n")


def broken(student_dir: Path, graded: str, key: bytes) -> str:
    """Why the grading in ``student_dir`` is not to be trusted, naming the file; ``""`` when it is."""
    where = f"{graded}/{SEAL_FILE}"
    try:
        body = json.loads((student_dir / where).read_text(encoding="utf-8"))
        recorded = body["files"]
        mac = body["hmac"]
        if body.get("version") != 1 or not isinstance(recorded, dict) or not isinstance(mac, str):
            raise ValueError("unknown layout")
    except FileNotFoundError:
        return f"{where} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{where} is damaged ({exc.__class__.__name__})"
    files = _sealed_files(student_dir, graded)
    for name in sorted(set(recorded) - set(files)):
        return f"{name} is missing"
    for name in sorted(set(files) - set(recorded)):
        return f"{name} was added after grading"
    for name, path in files.items():
        try:
            if _digest(path) != recorded[name]:
                return f"{name} changed after grading"
        except OSError as exc:  # a cached file the batch cannot read is that student's, never the class's
            return f"{name} cannot be read ({exc.strerror})"
    if not hmac.compare_digest(_mac(key, recorded), mac):
        return f"{where} was not made with this seal key"
    return ""
