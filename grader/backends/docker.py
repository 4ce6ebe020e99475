"""Run `grader grade` on one submission inside a fresh, locked-down container (`--backend docker`).

The container gets no network, capped memory (swap included), CPUs and pids, a read-only root file system with
small tmpfs mounts for /tmp and /work, the submission read-only at /submission and a results directory at
/results.  It is always removed, whatever happened.

Why the container runs as uid 0 (``user="0"``) with ``cap_drop=ALL`` plus only the capabilities in
:data:`CAPABILITIES`: the in-container grader builds, for every rank group, the same sandbox it builds on a host
(``grader.sandbox``): SETUID/SETGID to give every rank a uid of its own, CHOWN to give it its scratch directory
(where no new root mounts one over it: Docker's default seccomp refuses ``pivot_root``), KILL to stop ranks,
SYS_ADMIN for the group's PID, mount and IPC namespaces and its cgroups (the controllers are mounted afresh in a
private cgroup namespace: ``cgroupns="private"``, so they nest inside this container's own limits and nothing of
the host's hierarchy is in reach), NET_ADMIN to bring up ``lo`` in the group's network namespace, NET_RAW for the packet
capture that measures the ranks' traffic.  Student code never holds any of them: every rank drops to its own uid
(which clears the capability sets), sets NO_NEW_PRIVS and loads its own seccomp filter before its first line runs.
The price: CAP_SYS_ADMIN makes the container's root much stronger, so what stands between a student and the host
is the rank's uid, NO_NEW_PRIVS and its seccomp filter (and, on AppArmor hosts, Docker's profile, which then turns
the mount-based layers off: they report why).  The container's own seccomp profile (:data:`SECCOMP_PROFILE`) is
written here: Docker's default would refuse ``pivot_root``; ours allows everything the grader uses and refuses the
calls no grading needs (kernel modules, kexec, keys, bpf, ptrace, new user namespaces...).  Without
CAP_DAC_OVERRIDE/CAP_FOWNER this root is bound by ordinary file permissions, and ``no-new-privileges`` keeps the
student processes from regaining anything through setuid binaries. /results is owned by root with mode 0700
(group-writable only through the invoking host user's group when that user is not root, see
``_prepare_staging``), so student code can neither forge nor read the results. The image's default USER stays the
non-root ``grader`` for a plain ``docker run``, where the layers that need root report themselves off.

The instructor's input salt (``GRADER_INPUT_SALT``, or ``--secret-file`` read on the host) reaches the grader in
the container through its environment; the grader hands it to its matrix session only, never to a rank.

The host side never trusts what comes back: results are written to a private staging directory, and only
regular files (no symlinks, bounded size) are copied into the caller's ``out_dir``, results.json only once it
parses and validates against ``grader/schemas/results.schema.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from grader.results import schema_path
from grader.salt import SALT_ENV
from grader.sandbox.cgroups import CONTAINER_ENV

Status = Literal["ok", "timeout", "oom", "start_failed", "error"]

SUBMISSION_MOUNT = "/submission"
RESULTS_MOUNT = "/results"
RUBRIC_MOUNT = "/rubric.yaml"
CAPABILITIES = ("SETUID", "SETGID", "CHOWN", "KILL", "SYS_ADMIN", "NET_ADMIN", "NET_RAW")
CLONE_NEWUSER = 0x10000000
#: Refused in the container, even to the grader: what no grading needs and what attacks the kernel or the host.
DENIED_SYSCALLS = (
    "acct",
    "add_key",
    "bpf",
    "delete_module",
    "finit_module",
    "init_module",
    "iopl",
    "ioperm",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount_setattr",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "perf_event_open",
    "pidfd_getfd",
    "process_madvise",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "quotactl",
    "reboot",
    "request_key",
    "settimeofday",
    "clock_settime",
    "swapoff",
    "swapon",
    "syslog",
    "uselib",
    "userfaultfd",
    "vhangup",
)
SECCOMP_PROFILE = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [
        {"names": list(DENIED_SYSCALLS), "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
        # no new user namespace (the grader needs none, and one would hand back every capability inside it)
        *(
            {
                "names": [name],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": 1,
                "args": [{"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER, "op": "SCMP_CMP_MASKED_EQ"}],
            }
            for name in ("clone", "unshare")
        ),
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},  # ENOSYS: glibc falls back to clone
    ],
}
TMPFS = {
    # exec: the grader's sandbox copy of the submission lives here and rank processes import from it.
    "/tmp": "size=512m,mode=1777,exec",
    "/work": "size=64m,mode=0755",
}
LABEL = "dist-grader"  # lets an operator find strays: docker ps -a --filter label=dist-grader
MAX_COPY_BYTES = 64 * 1024 * 1024  # a runaway report must not fill the host's disk
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class ContainerOutcome:
    """How one containerised grading run ended.  Only ``ok`` means results.json is there and valid."""

    status: Status
    exit_code: int | None
    message: str
    logs_tail: str = ""
    results: Path | None = None  # the validated results.json in out_dir

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers, and in plain words why not."""
    try:
        client = docker.from_env(timeout=10)
        try:
            version = client.version().get("Version", "unknown version")
        finally:
            client.close()
    except (DockerException, requests.RequestException, OSError) as exc:
        return False, f"no Docker engine answers ({exc})"
    return True, f"Docker engine {version}"


def grade_in_container(
    submission: Path,
    out_dir: Path,
    image: str,
    rubric: Path | None,
    timeout_s: float,
    memory_mb: int,
    cpus: float,
    pids: int,
    extra_args: list[str] | None = None,
    salt: str | None = None,
) -> ContainerOutcome:
    """Grade in a fresh container; ``salt`` is the instructor's secret input salt (None: random in there)."""
    submission = Path(submission).resolve()
    if not submission.exists():
        return ContainerOutcome("start_failed", None, f"submission {submission} does not exist on this host")
    if rubric is not None and not Path(rubric).is_file():
        return ContainerOutcome("start_failed", None, f"rubric {rubric} is not a file")
    try:
        client = docker.from_env(timeout=60)
    except DockerException as exc:
        return ContainerOutcome("start_failed", None, f"no Docker engine answers ({exc})")
    try:
        client.images.get(image)
    except ImageNotFound:
        client.close()
        return ContainerOutcome("start_failed", None, f"image {image} not found: build it with scripts/build-image.sh")
    except (DockerException, requests.RequestException) as exc:
        client.close()
        return ContainerOutcome("start_failed", None, f"no Docker engine answers ({exc})")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging, group_add = _prepare_staging(out_dir)
    try:
        options = container_options(submission, staging, rubric, memory_mb, cpus, pids, group_add, salt)
        outcome = _run(client, image, grade_command(submission, rubric, extra_args or []), options, timeout_s)
        return _collect(staging, out_dir, outcome) if outcome.ok else outcome
    finally:
        # ignore_errors: for a non-root host user, subdirectories made by the container's root may not be
        # removable; a leftover .container-results-* directory must not turn a finished grade into a failure.
        shutil.rmtree(staging, ignore_errors=True)
        client.close()


def container_options(
    submission: Path,
    staging: Path,
    rubric: Path | None,
    memory_mb: int,
    cpus: float,
    pids: int,
    group_add: list[str],
    salt: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``containers.create`` that confine the run (kept apart to be testable)."""
    volumes = {
        str(submission): {"bind": _submission_target(submission), "mode": "ro"},
        str(staging): {"bind": RESULTS_MOUNT, "mode": "rw"},
    }
    if rubric is not None:
        volumes[str(Path(rubric).resolve())] = {"bind": RUBRIC_MOUNT, "mode": "ro"}
    memory = f"{int(memory_mb)}m"
    return {
        "user": "0",
        "network_mode": "none",
        "mem_limit": memory,
        "memswap_limit": memory,  # no swap: a memory hog is killed, not slowed to a crawl
        "nano_cpus": int(cpus * 1e9),
        "pids_limit": int(pids),
        "read_only": True,
        "tmpfs": dict(TMPFS),
        "cap_drop": ["ALL"],
        "cap_add": list(CAPABILITIES),
        "security_opt": ["no-new-privileges", "seccomp=" + json.dumps(SECCOMP_PROFILE)],
        "cgroupns": "private",
        "group_add": group_add,
        "init": True,  # reaps the rank processes that a crashed grader leaves behind
        "volumes": volumes,
        "environment": {
            "HOME": "/work",
            "TMPDIR": "/tmp",
            CONTAINER_ENV: f"{cpus:g} CPUs and {int(memory_mb)} MiB at most",
            **({SALT_ENV: salt} if salt else {}),
        },
        "working_dir": "/work",
        "labels": {LABEL: "grade"},
    }


def grade_command(submission: Path, rubric: Path | None, extra_args: list[str]) -> list[str]:
    command = ["grade", _submission_target(submission), "--out", RESULTS_MOUNT]
    if rubric is not None:
        command += ["--rubric", RUBRIC_MOUNT]
    return command + list(extra_args)


def _submission_target(submission: Path) -> str:
    # A directory is graded in place; an archive keeps its name so the grader can tell .zip from .tar.gz.
    return SUBMISSION_MOUNT if submission.is_dir() else f"{SUBMISSION_MOUNT}/{submission.name}"


def _prepare_staging(out_dir: Path) -> tuple[Path, list[str]]:
    """A fresh directory for the container's /results that only the container's root can write.

    A root host owns it with mode 0700 like the container's root does.  A non-root host user (in the docker
    group) owns it instead, and the capability-less container root could not write it, so it is shared
    through the user's own group (mode 2770, group added to the container process, inherited by new files).
    """
    staging = Path(tempfile.mkdtemp(prefix=".container-results-", dir=out_dir))  # mode 0700
    if os.geteuid() == 0:
        return staging, []
    os.chmod(staging, 0o2770)
    return staging, [str(os.getegid())]


def _run(client: Any, image: str, command: list[str], options: dict[str, Any], timeout_s: float) -> ContainerOutcome:
    """Create, start, wait for and always remove one container; the outcome carries no results yet."""
    try:
        container = client.containers.create(image, command=command, detach=True, **options)
    except (APIError, requests.RequestException) as exc:
        return ContainerOutcome("start_failed", None, f"the container could not be created: {_explain(exc)}")
    try:
        try:
            container.start()
        except (APIError, requests.RequestException) as exc:
            return ContainerOutcome("start_failed", None, f"the container did not start: {_explain(exc)}")
        try:
            exit_code = int(container.wait(timeout=timeout_s)["StatusCode"])
        except requests.RequestException:  # the engine's wait outlived timeout_s
            return ContainerOutcome(
                "timeout", None, f"grading took longer than {timeout_s:g} s and was stopped", _tail(container)
            )
        container.reload()
        logs = _tail(container)
        if exit_code != 0 and container.attrs["State"].get("OOMKilled"):
            message = f"the grading container ran out of its memory ({options['mem_limit']})"
            return ContainerOutcome("oom", exit_code, message, logs)
        if exit_code != 0:
            return ContainerOutcome("error", exit_code, f"the grader exited with status {exit_code}", logs)
        return ContainerOutcome("ok", exit_code, "graded in a container", logs)
    finally:
        _remove(container)  # force=True kills it first when it is still running (the timeout path)


def _collect(staging: Path, out_dir: Path, outcome: ContainerOutcome) -> ContainerOutcome:
    """Bring back what a cleanly exited grader wrote; an untrustworthy results.json makes the run an error."""
    problem = _validate(staging / "results.json")
    _copy_back(staging, out_dir, skip_results=problem is not None)
    if problem is not None:
        return dataclasses.replace(outcome, status="error", message=problem)
    return dataclasses.replace(outcome, results=out_dir / "results.json")


def _validate(path: Path) -> str | None:
    """Why results.json cannot be trusted, or None when it can."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return "the grader exited normally but wrote no results.json"
    if not stat.S_ISREG(st.st_mode):
        return "results.json is not a regular file"
    if st.st_size > MAX_COPY_BYTES:
        return f"results.json is larger than {MAX_COPY_BYTES} bytes"
    try:
        data = json.loads(_read_nofollow(path))
    except (OSError, ValueError) as exc:
        return f"results.json is not valid JSON: {exc}"
    schema_file = schema_path()
    if schema_file.exists():
        import jsonschema

        schema = json.loads(schema_file.read_text())
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
            return f"results.json does not match the results schema at {where}: {error.message}"
    return None


def _copy_back(staging: Path, out_dir: Path, skip_results: bool) -> None:
    """Copy the regular files the container wrote into out_dir; links and special files are dropped."""
    budget = MAX_COPY_BYTES
    for root, dirs, files in os.walk(staging):  # os.walk does not descend into symlinked directories
        rel = Path(root).relative_to(staging)
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
        for name in files:
            source = Path(root) / name
            if skip_results and rel == Path(".") and name == "results.json":
                continue
            st = source.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_size > budget:
                continue
            budget -= st.st_size
            dest = out_dir / rel / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(_read_nofollow(source))


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_COPY_BYTES + 1)


def _tail(container: Any) -> str:
    try:
        raw = container.logs(stdout=True, stderr=True, tail=LOG_TAIL_LINES)
    except (APIError, requests.RequestException):
        return ""
    return raw.decode("utf-8", errors="replace")[-8000:]


def _remove(container: Any) -> None:
    with contextlib.suppress(NotFound):  # already gone: nothing left to clean
        container.remove(force=True, v=True)


def _explain(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
