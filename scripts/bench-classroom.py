"""Where the GitHub Classroom run's time goes (docs/measurements.md, "Classroom path"; issue 23).

The student workflow (student_template/a9/.github/workflows/classroom.yml) grades in the published image
with one `docker run`; the image is already pulled.  Each round runs, one after the other on the same
machine so that the load hits both alike:

  host      `grader grade SUBMISSION` outside Docker (the same grade, no container)
  workflow  the workflow's grading step, its `run:` script verbatim (bash, with the runner's variables)
  empty     `docker run` with the step's options and `--entrypoint /bin/true`: create, start, teardown
  python    the same with `python -c pass`: the interpreter's start
  imports   the same with `python -c "import grader.cli, grader.pipeline"`: what the entrypoint imports
            before the grade starts (torch is imported by the grade's matrix session, inside the grade)

The step's options are the workflow's own (its `docker run` line expanded by bash), never a copy.  From
results.json, the grade's own `timings.total`; from classroom.json's mtime, when the file existed.  The
Docker overhead is the step's wall minus the host's wall, measured side by side, not an idle figure.
The host's grader package is byte-compiled first, as the image's is: under PYTHONDONTWRITEBYTECODE (set in
some sessions) every process of the host grade would otherwise compile it from source.

    python scripts/bench-classroom.py [--rounds 3] [--image grader:local] [--submission reference/a9]
                                      [--pack a9] [--grader-seccomp] [--expect SCORE]

`--grader-seccomp` adds the grader backend's own seccomp profile (grader/backends/docker.py) to the step's
options, for comparing with Docker's default one.  A score that differs from the host's is printed as a
warning: the run then measured a different grade.  `--pack` takes the workflow of that pack's template.

`--expect SCORE` is the Classroom door's check (the CI container stage runs it for every pack's template
and reference): it grades once as the workflow's step does, then reads the step's output as the reporter
does (``reporter_points``), and fails unless the grade is SCORE and the reporter's points are the grader's.
"""

from __future__ import annotations

import argparse
import base64
import compileall
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from grader.render import to_cents

REPO = Path(__file__).resolve().parents[1]
STEP_ID = "grader"


def workflow(pack: str) -> Path:
    """The Classroom workflow of the pack's student template: each template's names its own pack."""
    return REPO / "student_template" / pack / ".github" / "workflows" / "classroom.yml"


def grading_step(pack: str = "a9") -> str:
    """The `run:` script of the workflow's grading step (the one the reporter reads)."""
    jobs = yaml.safe_load(workflow(pack).read_text())["jobs"]
    for job in jobs.values():
        for step in job["steps"]:
            if step.get("id") == STEP_ID:
                return str(step["run"])
    raise SystemExit(f"{workflow(pack)}: no step with id {STEP_ID!r}")


def docker_options(script: str, env: dict[str, str]) -> list[str]:
    """The step's `docker run` options, expanded by bash as the runner would, without image and command."""
    start = script.index("docker run ")
    end = script.index('"$GRADER_IMAGE"', start)
    words = script[start + len("docker run ") : end].replace("\\\n", " ")
    out = subprocess.run(
        ["bash", "-c", f'out="$RUNNER_TEMP/grader-out"; printf "%s\\0" {words}'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split("\0")[:-1]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall


def grade_facts(out: Path) -> tuple[float, str]:
    results = json.loads((out / "results.json").read_text())
    return results["timings"]["total"], f"{results['score']:g}+{results.get('bonus_score') or 0:g}"


def reporter_points(github_output: Path) -> tuple[float, float]:
    """What autograding-grading-reporter@v1 sends Classroom from the step's output (its contract:
    /work/shared/docs/github-classroom.md): the one `result=` line, standard base64 of the JSON, then the
    tests' scores added left to right as doubles (JavaScript's numbers, as Python's floats), over
    `max_score`."""
    lines = [line for line in github_output.read_text().splitlines() if line.startswith("result=")]
    if len(lines) != 1:
        raise SystemExit(f"the step wrote {len(lines)} result= lines to GITHUB_OUTPUT, not one")
    result = json.loads(base64.b64decode(lines[0].removeprefix("result="), validate=True))
    total = 0.0
    for test in result["tests"]:
        total += test["score"]
    return total, float(result["max_score"])


def compile_host_grader() -> None:
    spec = importlib.util.find_spec("grader")
    assert spec is not None and spec.origin is not None, "the grader is not importable here"
    compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def host_round(submission: Path, work: Path) -> dict[str, float | str]:
    out = work / "host-out"
    shutil.rmtree(out, ignore_errors=True)
    wall = timed([sys.executable, "-m", "grader", "grade", str(submission), "--out", str(out)])
    grade, score = grade_facts(out)
    return {"host": wall, "host_grade": grade, "host_score": score}


def workflow_round(script: str, env: dict[str, str], options: list[str], image: str) -> dict[str, float | str]:
    out = Path(env["RUNNER_TEMP"]) / "grader-out"
    shutil.rmtree(out, ignore_errors=True)
    Path(env["GITHUB_OUTPUT"]).write_text("")
    start_epoch = time.time()
    wall = timed(["bash", "-eo", "pipefail", "-c", script], env)
    to_json = (out / "classroom.json").stat().st_mtime - start_epoch
    grade, score = grade_facts(out)
    probe = ["docker", "run", *options, "--entrypoint"]
    return {
        "step": wall,
        "to_json": to_json,
        "grade": grade,
        "score": score,
        "empty": timed([*probe, "/bin/true", image], env),
        "python": timed([*probe, "python", image, "-c", "pass"], env),
        "imports": timed([*probe, "python", image, "-c", "import grader.cli, grader.pipeline"], env),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image", default="grader:local")
    parser.add_argument("--submission", type=Path, default=REPO / "reference" / "a9")
    parser.add_argument("--pack", default="a9", help="whose student template's workflow grades (default a9)")
    parser.add_argument("--grader-seccomp", action="store_true")
    parser.add_argument(
        "--expect",
        metavar="SCORE",
        help="grade once as the workflow does; fail unless SCORE (e.g. 105+5: points, bonus included, + bonus)",
    )
    parser.add_argument(
        "--service",
        action="store_true",
        help="with --expect: the step's service mode against a local grader serve and OIDC issuer",
    )
    parser.add_argument(
        "--without-docker",
        action="store_true",
        help="with --service: run the image's command (grader submit) on this host through a docker shim",
    )
    args = parser.parse_args()
    submission = args.submission.resolve()
    script = grading_step(args.pack)
    with tempfile.TemporaryDirectory(prefix="bench-classroom-") as tmp:
        work = Path(tmp)
        (work / "runner").mkdir()
        env = {
            **os.environ,
            "GRADER_IMAGE": args.image,
            "GITHUB_WORKSPACE": str(submission),
            "RUNNER_TEMP": str(work / "runner"),
            "GITHUB_OUTPUT": str(work / "github-output"),
            "PUSHED_AT": "",
        }
        options = docker_options(script, env)
        compile_host_grader()
        if args.grader_seccomp:
            sys.path.insert(0, str(REPO))
            from grader.backends.docker import SECCOMP_PROFILE

            profile = work / "seccomp.json"
            profile.write_text(json.dumps(SECCOMP_PROFILE))
            options = ["--security-opt", f"seccomp={profile}", *options]
            script = script.replace("docker run ", f"docker run --security-opt seccomp={profile} ", 1)
        if args.expect is not None:  # the step verbatim, Docker's default seccomp included: what Classroom runs
            if args.service:
                service_door(script, env, work, submission, args.pack, shim=args.without_docker)
            else:
                Path(env["GITHUB_OUTPUT"]).write_text("")
                timed(["bash", "-eo", "pipefail", "-c", script], env)
            check_door(env, submission, args.pack, args.expect, "service" if args.service else "container")
            return
        print(f"image {args.image}, submission {submission}, load average {os.getloadavg()[0]:.1f}")
        rounds = []
        for n in range(1, args.rounds + 1):
            row = {**host_round(submission, work), **workflow_round(script, env, options, args.image)}
            rounds.append(row)
            print(
                f"round {n}: "
                + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
            )
        report(rounds)
        print(f"load average after: {os.getloadavg()[0]:.1f}")


def check_door(env: dict[str, str], submission: Path, pack: str, expect: str, mode: str) -> None:
    """The step's results and its output read as the reporter does: the grade must be ``expect`` and the
    reporter's points the grader's."""
    out = Path(env["RUNNER_TEMP"]) / "grader-out"
    _, score = grade_facts(out)
    points, most = reporter_points(Path(env["GITHUB_OUTPUT"]))
    graded = json.loads((out / "results.json").read_text())
    print(
        f"the {pack} Classroom workflow ({mode} mode) scored {submission} {score}; reporter: Points {points:g}/{most:g}"
    )
    if score != expect:
        cases = [c for c in graded["cases"] if c["verdict"] != "pass"]
        lost = [f"{c['id']}: {c['verdict']}: {c['message'][:400]}" for c in cases]
        raise SystemExit(
            f"expected {expect}: the Classroom path does not grade as the host does; the cases that"
            " did not pass:\n" + "\n".join(lost)
        )
    if (points, most) != (to_cents(graded["score"]) / 100, float(graded["max_score"])):
        raise SystemExit(f"the reporter would send {points!r}/{most:g}, the grader scored {graded['score']}")


def service_door(script: str, env: dict[str, str], work: Path, submission: Path, pack: str, *, shim: bool) -> None:
    """``--service``: the step's service mode verbatim.  The submission is committed as a student's checkout;
    a local ``grader serve`` (SQLite, the pack's assignment) trusts a local OIDC issuer, and a local endpoint
    plays ``$ACTIONS_ID_TOKEN_REQUEST_URL``, minting the job's token for the audience the step asks.  With
    ``shim``, a ``docker`` first on PATH runs the image's command on this host instead (the mounts mapped,
    only the ``-e`` variables passed): the step and the client are real, the container is not."""
    sys.path.insert(0, str(REPO / "tests"))  # the service's test helpers (tests/ is not a package)
    from local_service import OWNER, actions_token_endpoint, free_port, local_service
    from oidc_issuer import Issuer

    checkout = work / "checkout"
    shutil.copytree(submission, checkout, ignore=shutil.ignore_patterns(".git", "expected.json"))
    git = ["git", "-c", "user.name=Student", "-c", "user.email=student@example.edu", "-C", str(checkout)]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "my work"]):
        subprocess.run([*git, *command], check=True, env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"})
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    issuer = Issuer(work, audience=url, owner=OWNER)
    assignments = [{"id": pack, "pack": pack, "repo_prefix": f"{pack}-"}]
    with (
        local_service(work, issuer, assignments, port=port) as service,
        actions_token_endpoint(issuer, f"{OWNER}/{pack}-octocat", sha) as actions,
    ):
        step_env = {**env, **actions, "GITHUB_WORKSPACE": str(checkout), "GRADER_SERVICE": url}
        step_env["GRADER_ASSIGNMENT"] = ""
        if shim:
            bindir = work / "shim"
            bindir.mkdir()
            (bindir / "docker").write_text(f"#!{sys.executable}\n{DOCKER_SHIM}")
            (bindir / "docker").chmod(0o755)
            step_env["PATH"] = f"{bindir}:{env['PATH']}"
        Path(env["GITHUB_OUTPUT"]).write_text("")
        try:
            timed(["bash", "-eo", "pipefail", "-c", script], step_env)
        except SystemExit:
            print(service.log.read_text()[-3000:], file=sys.stderr)
            raise


#: ``docker run [OPTIONS] IMAGE ARGS...`` as ``python -m grader ARGS...`` on this host: each ``-v SRC:DST``
#: mount's DST in the arguments becomes SRC, and only the ``-e`` variables reach it (PATH and HOME aside).
DOCKER_SHIM = """import os, sys
args, flags, mounts, names = sys.argv[2:], {"--rm", "--init", "--read-only"}, {}, []
while args[0].startswith("-"):
    option = args.pop(0)
    if option in flags:
        continue
    value = args.pop(0)
    if option == "-v":
        src, dst = value.split(":")[:2]
        mounts[dst] = src
    elif option == "-e":
        names.append(value)
args.pop(0)  # the image
for dst, src in mounts.items():
    args = [src + a[len(dst):] if a == dst or a.startswith(dst + "/") else a for a in args]
env = {k: os.environ[k] for k in ["PATH", "HOME", *names] if k in os.environ}
os.execve(sys.executable, [sys.executable, "-m", "grader", *args], env)
"""


def report(rounds: list[dict[str, float | str]]) -> None:
    """Each row is worked out per round, then the median of the rounds is printed (load moves them all)."""

    def parts(r: dict[str, float | str]) -> list[tuple[str, float]]:
        v = {k: x for k, x in r.items() if isinstance(x, float)}
        python, imports = v["python"] - v["empty"], v["imports"] - v["python"]
        return [
            ("container create + start + teardown (empty container)", v["empty"]),
            ("python start in the container", python),
            ("import grader.cli, grader.pipeline in the container", imports),
            ("the grade (results.json timings.total)", v["grade"]),
            ("rest: CLI, reports, exit, base64", v["step"] - v["empty"] - python - imports - v["grade"]),
            ("workflow step, total", v["step"]),
            ("  of which after classroom.json existed", v["step"] - v["to_json"]),
            ("host: the same grade outside Docker, total", v["host"]),
            ("host: its grade (timings.total)", v["host_grade"]),
            ("Docker overhead: step - host", v["step"] - v["host"]),
            ("Docker overhead: step / host (ratio)", v["step"] / v["host"]),
        ]

    table = [parts(r) for r in rounds]
    print(f"\nmedian of {len(rounds)} rounds, each row worked out per round (s)")
    for i, (label, _) in enumerate(table[0]):
        print(f"  {label:<55} {statistics.median(row[i][1] for row in table):7.2f}")
    for r in rounds:
        if r["score"] != r["host_score"]:
            print(f"  WARNING: the workflow scored {r['score']}, the host {r['host_score']}: not the same grade")
            break


if __name__ == "__main__":
    main()
