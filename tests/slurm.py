"""A real single-node Slurm for the tests, from Debian's ``slurm-wlm`` and ``munge`` (``scripts/install-slurm.sh``).

Everything lives in one temporary directory: a generated ``slurm.conf`` (``proctrack/linuxproc`` and
``task/none``, so no cgroups are needed; one node as ``slurmd -C`` describes this machine; one partition),
the munge key, every state, spool and log file.  ``munged`` runs as the ``munge`` user, ``slurmctld`` and
``slurmd`` as root, all in the foreground so that their pids are ours; ``srun hostname`` answering is the
readiness check.  On exit every job is cancelled and the three daemons are stopped by pid.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "squeue")
PARTITION = "grading"


@dataclass(frozen=True)
class Slurm:
    root: Path  # every file Slurm and munge wrote
    conf: Path
    env: dict[str, str]  # SLURM_CONF for the client commands


def unavailable() -> str:
    """Why this machine cannot run the fixture, or ''."""
    missing = [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}): scripts/install-slurm.sh installs it"
    if os.geteuid() != 0:
        return "a test Slurm runs its daemons as root and munged as the munge user: needs root"
    try:
        pwd.getpwnam("munge")
        socket.gethostbyname(socket.gethostname())
    except (KeyError, OSError) as exc:
        return f"no munge user or this host's name does not resolve: {exc}"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line() -> str:
    """``slurmd -C``'s description of this machine, without its UpTime line."""
    out = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=30).stdout
    return next(line for line in out.splitlines() if line.startswith("NodeName="))


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _conf(root: Path, munge_socket: Path) -> str:
    host = socket.gethostname()
    return f"""ClusterName=gradertest
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=5
{_node_line()} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@contextlib.contextmanager
def running_slurm() -> Iterator[Slurm]:
    root = Path(tempfile.mkdtemp(prefix="grader-slurm-"))
    root.chmod(0o755)  # munged, as munge, reaches its own directory below
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    try:
        munge = root / "munge"
        munge.mkdir(mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        user = pwd.getpwnam("munge")
        for path in (munge, key):
            os.chown(path, user.pw_uid, user.pw_gid)
        sock = munge / "munge.socket"
        munged = [_sbin("munged"), "-F", "--force", f"--key-file={key}", f"--socket={sock}"]
        munged += [f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/seed"]
        log = (root / "daemons.log").open("ab")
        procs.append(subprocess.Popen(munged, user="munge", group="munge", stdout=log, stderr=log))
        _wait(
            lambda: sock.exists() or procs[0].poll() is not None,
            90,
            f"munged never opened its socket (see {munge}/munged.log)",
        )
        if procs[0].poll() is not None:
            raise RuntimeError(f"munged exited ({procs[0].returncode}): {(munge / 'munged.log').read_text()[-2000:]}")
        for sub in ("state", "spool", "run", "log"):
            (root / sub).mkdir()
        (root / "slurm.conf").write_text(_conf(root, sock))
        for daemon in ("slurmctld", "slurmd"):
            procs.append(subprocess.Popen([_sbin(daemon), "-D"], env=env, stdout=log, stderr=log))
        _wait(lambda: _srun_answers(env), 90, f"srun hostname never answered (see {root}/log)")
        yield Slurm(root, root / "slurm.conf", {"SLURM_CONF": str(root / "slurm.conf")})
    finally:
        if len(procs) == 3:
            subprocess.run(["scancel", f"--partition={PARTITION}"], env=env, timeout=30, check=False)
            _wait(lambda: not _jobs(env), 60, "jobs outlived scancel", fail=False)
        for proc in reversed(procs):  # slurmd, slurmctld, munged: by pid, each one we started
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _srun_answers(env: dict[str, str]) -> bool:
    try:
        done = subprocess.run(["srun", "-N1", "hostname"], env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and done.stdout.strip() == socket.gethostname()


def _jobs(env: dict[str, str]) -> list[str]:
    done = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, timeout=30)
    return done.stdout.split()


def job_of(pid: int) -> str:
    """The Slurm job a process runs in (its environment says)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"SLURM_JOB_ID="))


def _wait(ready, timeout: float, why: str, fail: bool = True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    if fail:
        raise RuntimeError(why)
