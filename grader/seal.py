"""A cached grading is trusted only under its seal: an HMAC, keyed by the instructor's secret kept
outside ``--out``, of whose grading it is and of every entry a later rescore or report reads.

``grader batch`` scores every student again from the cache on every run (``grader.rescore``), so a
truncated ``junit.xml`` would stop the class and an edited verdict would raise a score silently.
When a grading is installed the batch seals it (``graded/seal.json``): the student's name (their
folder's), and every entry of ``graded/`` and the batch's outcome by ``lstat`` type, each file with
its size and SHA-256.  The cache key (the submission's digest, the rubric's matrix part, the grader's
version) is ``graded/cache-key.json``, one of those files, and the seal holds only if the result in
``results.json`` names that same submission and matrix.  Before a cache entry is used, the seal is
checked: a file missing, added, changed, a symlink, device, FIFO or hard-linked file anywhere under
``graded/``, a seal of another student or made under another key makes the entry untrusted, and the
student is graded again with the reason in the gradebook.  ``grade.log`` is not sealed (nothing
scores it), but it must be a plain file too.  Every file is read once, through the no-follow reader
(``grader.nolinks``), into a private copy that rescoring then reads: what was checked is what scores.

The key is 32 random bytes in a file of its own, created on first use with mode 0600 in a 0700
directory: ``--seal-key FILE``, else ``$GRADER_SEAL_KEY_FILE``, else
``$XDG_STATE_HOME/dist-grader/seal.key`` (``~/.local/state/dist-grader/seal.key``).  It must not be
inside ``--out`` (whoever can edit the cache could then reseal it).  Losing it costs one regrade of
the class, nothing else.  What a neighbour who can write ``--out`` can still do: docs/instructors/seal.md.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.nolinks import Refused, copy_nofollow, kind, open_nofollow, walk
from grader.render.outputs import write_text

SEAL_FILE = "seal.json"
SEAL_KEY_ENV = "GRADER_SEAL_KEY_FILE"
KEY_FILE = "cache-key.json"  # in graded/, only when graded: what the matrix run is valid for
RESULTS_FILE = "results.json"  # in graded/: the grading's result, which names what it graded
GRADED_DIR = "graded"  # in a student's directory: what `grader grade --out` wrote, the cache
STUDENTS_DIR = "students"  # in a batch's --out: one directory per student, by name
OUTCOME_FILE = "batch-outcome.json"  # in a student's directory: status, exit code, seconds, message
UNSEALED = {SEAL_FILE, "grade.log"}  # in graded/: the seal itself, and a log nothing scores
_VERSION = 2
_DOMAIN = b"dist-grader cache seal v2\n"
_SEAL_LIMIT = 1 << 20  # bytes of seal.json read at most: a seal lists a grading's few dozen files
_LAYOUT = {"student": str, "entries": dict, "hmac": str}


class Untrusted(Exception):
    """A cached grading that is not to be trusted; the message says why, naming the entry."""


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


def in_batch(graded: Path) -> bool:
    """Whether ``graded`` is a batch's cached grading, which is only ever used under its seal: by
    where it is as named (``students/<name>/graded``; links are not resolved), or a seal in it.
    Never by a file a forger could delete: without its seal it is refused, not read as unsealed."""
    path = Path(os.path.abspath(graded))
    return (path.name == GRADED_DIR and path.parent.parent.name == STUDENTS_DIR) or os.path.lexists(path / SEAL_FILE)


def seal(student_dir: Path, graded: str, key: bytes, student: str) -> None:
    """Seal the grading in ``student_dir`` as ``student``'s (in the batch, before it is moved into place)."""
    entries = _entries(student_dir, [OUTCOME_FILE, graded], _unsealed(graded), None, None, set())[0]
    body = {"version": _VERSION, "student": student, "entries": entries, "hmac": _mac(key, student, entries)}
    write_text(student_dir / graded / SEAL_FILE, json.dumps(body, indent=2) + "\n")


def open_sealed(student_dir: Path, graded: str, key: bytes, into: Path | None = None) -> dict[str, Any] | None:
    """Check the grading in ``student_dir`` against its seal, every entry as it is read, and copy it
    into ``into`` when given (the same layout): the cache key it was graded under (``None``: a grading
    that did not finish).  :class:`Untrusted` when the seal does not hold for this student
    (``student_dir``'s name)."""
    where = f"{graded}/{SEAL_FILE}"
    body = _read_seal(student_dir, where)
    entries, student = body["entries"], body["student"]
    if not hmac.compare_digest(_mac(key, student, entries), body["hmac"]):
        raise Untrusted(f"{where} was not made with this seal key")
    if student != student_dir.name:
        raise Untrusted(f"{where} seals the grading of {student!r}, not of {student_dir.name!r}")
    keyed = {name: f"{graded}/{name}" for name in (KEY_FILE, RESULTS_FILE)}
    read = _entries(student_dir, [OUTCOME_FILE, graded], _unsealed(graded), entries, into, set(keyed.values()))[1]
    return _cache_key(graded, read.get(keyed[KEY_FILE]), read.get(keyed[RESULTS_FILE]))


def broken(student_dir: Path, graded: str, key: bytes) -> str:
    """Why the grading in ``student_dir`` is not to be trusted, naming the entry; ``""`` when it is."""
    try:
        open_sealed(student_dir, graded, key)
    except Untrusted as exc:
        return str(exc)
    return ""


def copy_unsealed(graded: Path, names: Sequence[str], into: Path) -> None:
    """Copy ``names`` of a ``grader grade --out`` directory into ``into`` through the no-follow reader:
    nothing vouches for them, but a link, device, FIFO or hard-linked file is still refused."""
    _entries(graded, names, set(), None, into, set())


def _unsealed(graded: str) -> set[str]:
    return {f"{graded}/{name}" for name in UNSEALED}


def _read_seal(student_dir: Path, where: str) -> dict[str, Any]:
    try:
        fd = open_nofollow(student_dir, where)
    except Refused as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise Untrusted(f"{where} is missing") from None
        raise Untrusted(f"{exc.where} {exc}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(_SEAL_LIMIT + 1)
        if len(data) > _SEAL_LIMIT:
            raise ValueError(f"over {_SEAL_LIMIT} bytes")
        body = json.loads(data)
        if body.get("version") == 1:
            raise Untrusted(f"{where} is an older grader's, which does not say whose grading it is")
        if body.get("version") != _VERSION:
            raise ValueError(f"version {body.get('version')!r}")
        if not all(isinstance(body[field], type_) for field, type_ in _LAYOUT.items()):
            raise ValueError("unknown layout")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Untrusted(f"{where} is damaged ({exc.__class__.__name__}: {exc})") from None
    return body


def _entries(
    root: Path,
    names: Sequence[str],
    unsealed: set[str],
    sealed: dict[str, Any] | None,
    into: Path | None,
    remember: set[str],
) -> tuple[dict[str, dict[str, Any]], dict[str, bytes]]:
    """Every entry of ``names`` under ``root`` by type (a directory, or a regular file of one name with
    its size and SHA-256, read once through the no-follow reader and copied into ``into`` when given),
    and the bytes of the files in ``remember``; anything else is :class:`Untrusted`.  With ``sealed`` (a
    seal's entries) each is checked as it is met, a file by its size before it is read; ``unsealed``
    entries are checked for their type only."""
    found: dict[str, dict[str, Any]] = {}
    read: dict[str, bytes] = {}
    for name, info in walk(root, names):
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            raise Untrusted(f"{name} is {kind(info.st_mode)}")
        if stat.S_ISREG(info.st_mode) and info.st_nlink != 1:
            raise Untrusted(f"{name} is hard-linked")
        if name in unsealed:
            continue
        entry: dict[str, Any] = {"type": "dir"} if stat.S_ISDIR(info.st_mode) else {"type": "file"}
        want = None if sealed is None else sealed.get(name)
        if sealed is not None and not isinstance(want, dict):
            raise Untrusted(f"{name} was added after grading")
        if want is not None and (want.get("type") != entry["type"] or want.get("size", info.st_size) != info.st_size):
            raise Untrusted(f"{name} changed after grading")
        if entry["type"] == "dir":
            if into is not None:
                (into / name).mkdir(parents=True, exist_ok=True)
        else:
            digest, data = _copy(root, name, into, name in remember)
            entry |= {"size": info.st_size, "sha256": digest}
            if want is not None and want != entry:
                raise Untrusted(f"{name} changed after grading")
            if data is not None:
                read[name] = data
        found[name] = entry
    for name in sorted(set(sealed or ()) - set(found)):
        raise Untrusted(f"{name} is missing")
    return found, read


def _copy(root: Path, name: str, into: Path | None, remember: bool) -> tuple[str, bytes | None]:
    """``root/name`` through the no-follow reader: its SHA-256, and its bytes when ``remember``; into
    ``into`` too when given."""
    try:
        if into is None:
            buffer = io.BytesIO() if remember else None
            return copy_nofollow(root, name, buffer), None if buffer is None else buffer.getvalue()
        dest = into / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("xb") as out:
            digest = copy_nofollow(root, name, out)
        return digest, dest.read_bytes() if remember else None
    except Refused as exc:  # swapped since it was listed, or unreadable: this grading's, never the class's
        raise Untrusted(f"{exc.where} {exc}") from None


def _cache_key(graded: str, key_bytes: bytes | None, results: bytes | None) -> dict[str, Any] | None:
    """The cache key of a sealed grading (its ``cache-key.json``), once its ``results.json`` is found to
    name that same submission, matrix part and grader version; ``None`` for a grading that did not finish."""
    if key_bytes is None:
        return None
    try:
        key = json.loads(key_bytes)
        result = json.loads(results or b"")
        named = {
            "submission": result["submission"]["digest"],
            "matrix": result["matrix_digest"],
            "grader_version": result["grader_version"],
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise Untrusted(f"{graded}/{RESULTS_FILE} cannot be read against its cache key ({exc!r})") from None
    for field, value in named.items():
        if not isinstance(key, dict) or key.get(field) != value:
            recorded = key.get(field) if isinstance(key, dict) else None
            raise Untrusted(f"{graded}/{RESULTS_FILE} names another {field} ({value}) than its seal ({recorded})")
    return key


def _mac(key: bytes, student: str, entries: dict[str, Any]) -> str:
    listing = json.dumps({"student": student, "entries": entries}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, _DOMAIN + listing.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()
