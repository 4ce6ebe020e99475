"""The docker backend's confinement and outcomes, checked against a real engine.

The grading command itself is replaced: a throw-away image built FROM the grader image runs
`/submission/fake-grader.sh` as its entrypoint, so each test decides what "the grader" does (probe its own
limits, hang, exhaust memory, write a forged result) with a tiny shell script, and never needs the pipeline.
Skipped only when no Docker engine answers, and never under GRADER_REQUIRE_DOCKER=1, which .ci/run
sets for the suite it runs with its engine up (scripts/docker-engine.sh): in CI they cannot skip.
"""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest

from grader.backends.docker import (
    CAPABILITIES,
    LABEL,
    SECCOMP_PROFILE,
    ContainerOutcome,
    docker_available,
    grade_in_container,
)
from grader.results import GradeResult, SubmissionInfo

_AVAILABLE, _WHY = docker_available()
_REQUIRED = os.environ.get("GRADER_REQUIRE_DOCKER") == "1"
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not (_AVAILABLE or _REQUIRED), reason=f"Docker backend tests: {_WHY}"),
]

FAKE_IMAGE = "dist-grader-fake:test"
# The real image first: it proves the users and paths the backend relies on exist there.
BASE_CANDIDATES = ("grader:local", "grader-base:bookworm", "python:3.11-slim")
STUDENT_UID = 10002
LIMITS = {"memory_mb": 256, "cpus": 1.0, "pids": 128}


@pytest.fixture(scope="module", autouse=True)
def client():
    import docker

    if not _AVAILABLE:
        pytest.fail(f"GRADER_REQUIRE_DOCKER=1 but {_WHY}")
    engine = docker.from_env()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def fake_image(client) -> str:
    from docker.errors import ImageNotFound

    for base in BASE_CANDIDATES:
        try:
            client.images.get(base)
        except ImageNotFound:
            continue
        dockerfile = f'FROM {base}\nENTRYPOINT ["/bin/sh", "/submission/fake-grader.sh"]\n'
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=FAKE_IMAGE, rm=True)
        return FAKE_IMAGE
    pytest.fail(f"none of {BASE_CANDIDATES} is present: build the grader image with scripts/build-image.sh")


def valid_results_json() -> str:
    submission = SubmissionInfo(source="/submission", files={}, digest="sha256:0")
    result = GradeResult(
        assignment="a9",
        score=0,
        max_score=100,
        tasks=[],
        submission=submission,
        grader_version="test",
        rubric_digest="test",
    )
    return result.to_json()


def make_submission(tmp_path: Path, script: str, results: str | None = None) -> Path:
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "fake-grader.sh").write_text("set -eu\n" + script)
    if results is not None:
        (submission / "results.json").write_text(results)
    return submission


def grade(submission: Path, out_dir: Path, image: str, timeout_s: float = 300, **limits) -> ContainerOutcome:
    return grade_in_container(submission, out_dir, image, rubric=None, timeout_s=timeout_s, **{**LIMITS, **limits})


PROBE = r'''
import json, os, errno, sys

STUDENT = int(sys.argv[1])

def fails(action):
    try:
        action()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return None

def cgroup(*names):
    for name in names:
        try:
            return open("/sys/fs/cgroup/" + name).read().strip()
        except OSError:
            pass

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return line.split()[1]

def as_student():
    """In a child dropped to the student uid, try to write and to list /results."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setgroups([]); os.setgid(STUDENT); os.setuid(STUDENT)
        report = {"write": fails(lambda: open("/results/forged.json", "w")),
                  "list": fails(lambda: os.listdir("/results"))}
        os.write(write, json.dumps(report).encode()); os._exit(0)
    os.close(write); os.waitpid(pid, 0)
    return json.loads(os.read(read, 4096))

probe = {
    "uid": os.getuid(),
    "cap_eff": int(status("CapEff"), 16),
    "no_new_privs": status("NoNewPrivs"),
    "interfaces": sorted(os.listdir("/sys/class/net")),
    "rootfs_write": fails(lambda: open("/etc/forged", "w")),
    "submission_write": fails(lambda: open("/submission/forged", "w")),
    "memory": cgroup("memory/memory.limit_in_bytes", "memory.max"),
    "pids": cgroup("pids/pids.max", "pids.max"),
    "results_mode": oct(os.stat("/results").st_mode & 0o7777),
    "student": as_student(),
}
json.dump(probe, open("/results/probe.json", "w"))
'''


def test_limits_reach_the_container_and_students_cannot_touch_results(tmp_path, fake_image):
    submission = make_submission(
        tmp_path,
        f'python3 /submission/probe.py {STUDENT_UID}\ncp /submission/results.json "$4/results.json"\n',
        results=valid_results_json(),
    )
    (submission / "probe.py").write_text(PROBE)
    out = tmp_path / "out"

    outcome = grade(submission, out, fake_image)

    assert outcome.status == "ok", outcome
    assert outcome.results == out / "results.json"
    probe = json.loads((out / "probe.json").read_text())
    capability_bits = {"CHOWN": 0, "KILL": 5, "SETGID": 6, "SETUID": 7, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_ADMIN": 21}
    assert probe["uid"] == 0
    assert probe["cap_eff"] == sum(1 << capability_bits[c] for c in CAPABILITIES)
    assert probe["no_new_privs"] == "1"
    assert probe["interfaces"] == ["lo"]
    assert probe["rootfs_write"] == "EROFS"
    assert probe["submission_write"] == "EROFS"
    assert int(probe["memory"]) == LIMITS["memory_mb"] * 2**20
    assert int(probe["pids"]) == LIMITS["pids"]
    assert probe["results_mode"] == "0o700"
    assert probe["student"] == {"write": "EACCES", "list": "EACCES"}


def test_host_config_carries_every_limit(tmp_path, fake_image, client):
    # The fake grader waits for the test to release it, so the container is inspected while it runs.
    submission = make_submission(
        tmp_path,
        'while [ ! -e /submission/release ]; do sleep 0.1; done\ncp /submission/results.json "$4/"\n',
        results=valid_results_json(),
    )
    outcomes: list[ContainerOutcome] = []
    worker = threading.Thread(target=lambda: outcomes.append(grade(submission, tmp_path / "out", fake_image)))
    worker.start()
    try:
        attrs = wait_for_container(client, submission, worker)
    finally:
        (submission / "release").touch()
        worker.join()

    host = attrs["HostConfig"]
    assert attrs["Config"]["User"] == "0"
    assert attrs["Config"]["Labels"].get(LABEL) == "grade"
    assert host["NetworkMode"] == "none"
    assert host["Memory"] == host["MemorySwap"] == LIMITS["memory_mb"] * 2**20
    assert host["NanoCpus"] == int(LIMITS["cpus"] * 1e9)
    assert host["PidsLimit"] == LIMITS["pids"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"]) == sorted(CAPABILITIES)
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["CgroupnsMode"] == "private"  # the grader's own cgroups nest inside the container's
    (seccomp,) = [opt for opt in host["SecurityOpt"] if opt.startswith("seccomp=")]
    assert json.loads(seccomp.removeprefix("seccomp=")) == SECCOMP_PROFILE
    assert set(host["Tmpfs"]) == {"/tmp", "/work"}
    assert f"{submission}:/submission:ro" in host["Binds"]
    assert outcomes[0].status == "ok", outcomes[0]
    assert not client.containers.list(all=True, filters={"id": attrs["Id"]}), "container left behind"


def wait_for_container(client, submission: Path, worker: threading.Thread) -> dict:
    """The attributes of the running container that mounts this test's submission."""
    while worker.is_alive():
        for container in client.containers.list(filters={"label": LABEL}):
            if any(m.get("Source") == str(submission) for m in container.attrs["Mounts"]):
                return container.attrs
        worker.join(0.1)
    pytest.fail("the backend finished before its container could be inspected")


def test_timeout_kills_and_removes_the_container(tmp_path, fake_image, client):
    submission = make_submission(tmp_path, "exec sleep 600\n")

    outcome = grade(submission, tmp_path / "out", fake_image, timeout_s=3)

    assert outcome.status == "timeout", outcome
    assert "3 s" in outcome.message
    assert not [
        c
        for c in client.containers.list(all=True, filters={"label": LABEL})
        if any(m.get("Source") == str(submission) for m in c.attrs["Mounts"])
    ]


def test_memory_exhaustion_is_reported_as_oom(tmp_path, fake_image):
    submission = make_submission(tmp_path, 'exec python3 -c "x = bytearray(1 << 30)"\n')

    outcome = grade(submission, tmp_path / "out", fake_image, memory_mb=64)

    assert outcome.status == "oom", outcome
    assert "64m" in outcome.message


def test_grader_failure_is_an_error_with_its_logs(tmp_path, fake_image):
    submission = make_submission(tmp_path, 'echo "grader: internal error: boom" >&2\nexit 2\n')

    outcome = grade(submission, tmp_path / "out", fake_image)

    assert (outcome.status, outcome.exit_code) == ("error", 2)
    assert "internal error: boom" in outcome.logs_tail


def test_results_that_break_the_schema_are_not_passed_on(tmp_path, fake_image):
    submission = make_submission(
        tmp_path, 'cp /submission/results.json "$4/"\necho hi > "$4/summary.md"\n', results='{"score": 100}'
    )
    out = tmp_path / "out"

    outcome = grade(submission, out, fake_image)

    assert outcome.status == "error"
    assert "schema" in outcome.message
    assert not (out / "results.json").exists()
    assert (out / "summary.md").read_text() == "hi\n"


def test_links_written_by_the_container_are_not_followed(tmp_path, fake_image):
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    submission = make_submission(
        tmp_path,
        f'cp /submission/results.json "$4/"\nln -s {secret} "$4/leak"\nln -s / "$4/rootdir"\n',
        results=valid_results_json(),
    )
    out = tmp_path / "out"

    outcome = grade(submission, out, fake_image)

    assert outcome.status == "ok", outcome
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]


def test_missing_image_is_a_start_failure(tmp_path):
    submission = make_submission(tmp_path, "exit 0\n")

    outcome = grade(submission, tmp_path / "out", "dist-grader-no-such-image:never")

    assert outcome.status == "start_failed"
    assert "build-image.sh" in outcome.message
