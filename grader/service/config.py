"""``service.yaml``: what ``grader serve`` serves, read once at start and checked against
``grader/schemas/service-config.schema.json`` with every error at its ``FILE:LINE:COL``, as a rubric is.

Relative paths are relative to the configuration file.  Every assignment's rubric is loaded (and so
checked against its pack) here, so a broken rubric stops the start, not the first student's grade.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.late import with_deadline
from grader.rubric import Rubric, load_rubric
from grader.rubric.source import parse, report, schema_errors
from grader.submission_time import parse_time

SCHEMA = "service-config.schema.json"
DEFAULT_LISTEN = "127.0.0.1:8000"
DEFAULT_BODY_BYTES = 20 << 20  # a bundle of one assignment's repository; the body is refused past it
DEFAULT_TREE_BYTES = 64 << 20  # what the bundle's commit unpacks to
DEFAULT_PER_MINUTE = 6  # submissions accepted per repository (or course token) per minute
DEFAULT_LEASE_S = 60.0  # a claim without a heartbeat for this long is taken by another worker
DEFAULT_TIMEOUT_S = 900.0  # one grade, as grader batch --timeout


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    jwks: str  # a URL, or an absolute file path
    audience: str
    owners: tuple[str, ...]


@dataclass(frozen=True)
class Assignment:
    id: str
    repo_prefix: str
    rubric_file: Path  # the rubric the matrix runs under (the pack's own when the config names none)
    rubric: Rubric  # scored under: the rubric with the config's deadline and late policy
    roster: tuple[str, ...] | None  # GitHub usernames; None: anyone the owners' repositories name

    @property
    def scoring_digest(self) -> str:
        """What scoring depends on beyond the cached matrix run: a change means a rescore of everyone."""
        late = self.rubric.late
        parts = [self.rubric.digest, repr(late.deadline.isoformat() if late and late.deadline else None)]
        if late is not None:
            parts.append(repr((late.penalty_percent_per_day, late.cap_percent, late.grace_minutes)))
        return "sha256:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass(frozen=True)
class ServiceConfig:
    file: Path
    host: str
    port: int
    state_dir: Path
    database: str
    secret_file: Path
    instructor_token_file: Path
    seal_key: Path
    workers: int
    cluster: str | None
    grade_timeout_s: float
    lease_s: float
    body_bytes: int
    tree_bytes: int
    per_minute: int
    oidc: OidcConfig | None
    assignments: dict[str, Assignment]


def load_config(path: Path) -> ServiceConfig:
    """The configuration in ``path``; a :class:`UserError` lists every problem at its line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the service configuration: {exc}") from None
    data, positions = parse(path, text)
    errors = schema_errors(data, positions, SCHEMA)
    if not errors and "workers" in data and "cluster" in data:
        errors.append(positions.error(("cluster",), "cluster: give workers (on this machine) or cluster, not both"))
    if errors:
        raise UserError(report(errors))
    here = path.resolve().parent
    state = _path(here, data["state_dir"])
    host, _, port = data.get("listen", DEFAULT_LISTEN).rpartition(":")
    assignments: dict[str, Assignment] = {}
    for index, raw in enumerate(data["assignments"]):
        where = positions.error(("assignments", index), "")[1].rstrip(": ")
        if raw["id"] in assignments:
            raise UserError(f"{where}: assignment {raw['id']!r} is listed twice")
        assignments[raw["id"]] = _assignment(raw, here, where)
    limits = data.get("limits", {})
    oidc = data.get("oidc")
    return ServiceConfig(
        file=path,
        host=host or "127.0.0.1",
        port=int(port),
        state_dir=state,
        database=data.get("database") or f"sqlite:///{state / 'service.sqlite3'}",
        secret_file=_path(here, data.get("secret_file"), state / "secret"),
        instructor_token_file=_path(here, data.get("instructor_token_file"), state / "instructor.token"),
        seal_key=_path(here, data.get("seal_key"), state / "keys" / "seal.key"),
        workers=int(data.get("workers", 2)),
        cluster=data.get("cluster"),
        grade_timeout_s=float(data.get("grade_timeout_s", DEFAULT_TIMEOUT_S)),
        lease_s=float(data.get("lease_s", DEFAULT_LEASE_S)),
        body_bytes=int(limits.get("body_bytes", DEFAULT_BODY_BYTES)),
        tree_bytes=int(limits.get("tree_bytes", DEFAULT_TREE_BYTES)),
        per_minute=int(limits.get("per_minute", DEFAULT_PER_MINUTE)),
        oidc=None
        if oidc is None
        else OidcConfig(oidc["issuer"], _jwks(here, oidc["jwks"]), oidc["audience"], tuple(oidc["owners"])),
        assignments=assignments,
    )


def _path(here: Path, value: str | None, default: Path | None = None) -> Path:
    if value is None:
        assert default is not None
        return default
    return (here / Path(value).expanduser()).resolve()


def _jwks(here: Path, value: str) -> str:
    return value if value.startswith(("https://", "http://")) else str(_path(here, value))


def _assignment(raw: dict[str, Any], here: Path, where: str) -> Assignment:
    if "rubric" in raw:
        rubric_file = _path(here, raw["rubric"])
    else:
        from grader.pack import load_pack

        try:
            rubric_file = load_pack(raw["pack"]).rubric
        except UserError as exc:
            raise UserError(f"{where}: pack: {exc}") from None
    rubric = load_rubric(rubric_file)
    if "pack" in raw and rubric.assignment.pack != raw["pack"]:
        raise UserError(f"{where}: pack {raw['pack']!r}, but {rubric_file} grades pack {rubric.assignment.pack!r}")
    if "late" in raw:
        late = raw["late"]
        policy = rubric.late
        deadline = policy.deadline if policy else None
        from grader.rubric.model import LatePolicy

        new = LatePolicy(deadline, late["penalty_percent_per_day"], late["cap_percent"], late.get("grace_minutes", 0.0))
        rubric = dataclasses.replace(rubric, late=new)
    if "deadline" in raw:
        rubric = with_deadline(rubric, parse_time(str(raw["deadline"]), f"{where}: deadline"))
    roster = load_names(_path(here, raw["roster"])) if "roster" in raw else None
    return Assignment(raw["id"], raw["repo_prefix"], rubric_file, rubric, roster)


def load_names(path: Path) -> tuple[str, ...]:
    """A roster's students: the first column of each row of a CSV (a ``student`` header and ``#``
    comments skipped), each a GitHub username."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a readable CSV roster ({exc})") from None
    names: list[str] = []
    for lineno, row in enumerate(rows, start=1):
        name = row[0].strip() if row else ""
        if not name or name.startswith("#") or (lineno == 1 and name.lower() == "student"):
            continue
        if not valid_student(name):
            raise UserError(f"{path}:{lineno}: {name!r} is not a GitHub username")
        names.append(name)
    if len(set(names)) != len(names):
        raise UserError(f"{path}: a student is listed twice")
    return tuple(names)


def valid_student(name: str) -> bool:
    """A GitHub username's characters (letters, digits, single hyphens; 39 at most): a directory name
    that escapes nothing."""
    return 0 < len(name) <= 39 and name.replace("-", "").isalnum() and name.isascii() and not name.startswith("-")
