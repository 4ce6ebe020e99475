"""The GitHub workflows and the composite action: they parse, pass actionlint (with shellcheck on every
`run:` script), meet the Classroom reporter contract (/work/shared/docs/github-classroom.md, summarised in
docs/classroom/github-classroom.md), and their shell steps really produce what the reporter decodes.

The shell steps are run here with `docker` / `grader` replaced by stubs that write what the real ones
write, so the transport (base64 on one line into `$GITHUB_OUTPUT`, summary.md into the job summary) is
exercised, not just read.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.backends.docker import CAPABILITIES

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".github" / "workflows" / "ci.yml"
TEMPLATE = ROOT / "student_template" / "a9"
CLASSROOM = TEMPLATE / ".github" / "workflows" / "classroom.yml"
#: every pack's student template: each is handed out through Classroom with the same workflow
TEMPLATES = {pack: ROOT / "student_template" / pack for pack in ("a9", "a4", "hw12", "a5")}
ACTION = ROOT / "action.yml"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
CLASSROOM_JSON = {
    "version": 1,
    "status": "fail",
    "max_score": 100,
    "tests": [
        {
            "name": "task1.broadcast",
            "status": "pass",
            "score": 6,
            "message": None,
            "test_code": "",
            "filename": "",
            "line_no": 0,
            "duration": 1,
        }
    ],
}


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def triggers(workflow: dict[str, Any]) -> Any:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as True


def tool(name: str) -> str:
    """A tool installed by scripts/install-actionlint.sh; failing, never skipping, when it is absent."""
    found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.fail(f"{name} is not installed: run `bash scripts/install-actionlint.sh`", pytrace=False)
    return found


def actionlint(*files: Path, cwd: Path) -> None:
    tool("shellcheck")  # actionlint silently skips `run:` scripts without it
    proc = subprocess.run(
        [tool("actionlint"), "-no-color", "-oneline", *map(str, files)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"actionlint:\n{proc.stdout}{proc.stderr}"


# --- parsing and actionlint -------------------------------------------------------------------------------


WORKFLOW_FILES = [CI, *(t / ".github" / "workflows" / "classroom.yml" for t in TEMPLATES.values()), ACTION]


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_parses(path):
    data = load(path)
    assert data.get("name")


def test_repository_workflows_pass_actionlint():
    actionlint(*sorted((ROOT / ".github" / "workflows").glob("*.y*ml")), cwd=ROOT)


@pytest.mark.parametrize("pack", TEMPLATES)
def test_classroom_workflow_passes_actionlint(pack):
    template = TEMPLATES[pack]
    actionlint(*sorted((template / ".github" / "workflows").glob("*.y*ml")), cwd=template)


def test_action_passes_actionlint_where_it_is_used(tmp_path):
    """actionlint checks an action's metadata through a workflow that uses it (`uses: ./`)."""
    shutil.copy(ACTION, tmp_path / "action.yml")
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "use.yml").write_text(
        "name: use\non: push\njobs:\n  grade:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v5\n"
        "      - id: grader\n        uses: ./\n        with:\n          path: submission\n          rubric: r.yaml\n"
        "      - uses: " + REPORTER + "\n        env:\n"
        '          GRADER_RESULTS: "${{ steps.grader.outputs.result }}"\n'
        "        with:\n          runners: grader\n"
    )
    actionlint(workflows / "use.yml", cwd=tmp_path)


def test_action_scripts_pass_shellcheck(tmp_path):
    """actionlint does not look inside composite actions' steps."""
    for i, step in enumerate(s for s in load(ACTION)["runs"]["steps"] if "run" in s):
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], "pass inputs through env:, not into the script text"
        script = tmp_path / f"step{i}.sh"
        script.write_text("#!/bin/bash\n" + step["run"])
        proc = subprocess.run([tool("shellcheck"), str(script)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout


# --- the Classroom contract -------------------------------------------------------------------------------


def classroom_job(template: Path = TEMPLATE) -> dict[str, Any]:
    workflow = load(template / ".github" / "workflows" / "classroom.yml")
    assert workflow["name"] == "Autograding Tests"
    assert list(workflow["jobs"]) == ["run-autograding-tests"]
    return workflow["jobs"]["run-autograding-tests"]


def test_classroom_reporter_wiring_meets_the_contract():
    steps = classroom_job()["steps"]
    reporters = [i for i, s in enumerate(steps) if s.get("uses") == REPORTER]
    assert len(reporters) == 1, f"exactly one {REPORTER} step"
    reporter = steps[reporters[0]]
    runners = [r.strip() for r in str(reporter["with"]["runners"]).split(",")]
    earlier = {s.get("id"): s for s in steps[: reporters[0]]}
    for runner in runners:
        assert re.fullmatch(r"[A-Za-z0-9]+", runner), f"step id {runner!r}: letters and digits only"
        assert runner in earlier, f"runner {runner!r} is not a step before the reporter"
        assert reporter["env"][f"{runner.upper()}_RESULTS"] == f"${{{{ steps.{runner}.outputs.result }}}}"
    assert set(reporter["env"]) == {f"{r.upper()}_RESULTS" for r in runners}


def test_classroom_keeps_what_classroom_expects():
    workflow = load(CLASSROOM)
    on = triggers(workflow)
    assert "push" in on and "repository_dispatch" in on
    assert workflow["permissions"]["checks"] == "write"
    assert "github-classroom[bot]" in classroom_job()["if"]


def run_script(script: str, tmp_path: Path, env: dict[str, str], stubs: dict[str, str]) -> dict[str, str]:
    """Run a `run:` script as GitHub does (bash -eo pipefail) with stub commands first on PATH."""
    bindir = tmp_path / "stubs"
    bindir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        (bindir / name).write_text("#!/bin/bash\nset -eu\n" + body)
        (bindir / name).chmod(0o755)
    path = tmp_path / "step.sh"
    path.write_text(script)
    full_env = {"PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(tmp_path), **env}
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return full_env


def github_files(tmp_path: Path) -> dict[str, str]:
    files = {"GITHUB_OUTPUT": tmp_path / "output", "GITHUB_STEP_SUMMARY": tmp_path / "summary"}
    for f in files.values():
        f.touch()
    (tmp_path / "runner-temp").mkdir()
    return {**{k: str(v) for k, v in files.items()}, "RUNNER_TEMP": str(tmp_path / "runner-temp")}


def decoded_result(output_file: Path) -> Any:
    """What the reporter does with the step output: one `result=` line of standard base64 JSON."""
    lines = [line for line in output_file.read_text().splitlines() if line.startswith("result=")]
    assert len(lines) == 1, output_file.read_text()
    return json.loads(base64.b64decode(lines[0].removeprefix("result="), validate=True))


# A stand-in for `docker run ... -v "$out:/results" IMAGE grade /submission --out /results`: it writes the
# grader's outputs into the host side of the /results mount and records its arguments.
DOCKER_STUB = """printf '%s\\n' "$@" > "$RUNNER_TEMP/docker-args"
while [ $# -gt 0 ]; do
  if [ "$1" = -v ] && [ "${2#*:}" = /results ]; then out=${2%%:*}; fi
  shift
done
printf '%s' "$CLASSROOM_JSON" > "$out/classroom.json"
printf '## Grade\\n' > "$out/summary.md"
"""


# What `${{ github.event.repository.pushed_at }}` is: Unix seconds in a push event, ISO 8601 in the others.
@pytest.mark.parametrize("pushed_at", ["1770282000", "2026-02-05T09:00:00Z", ""])
@pytest.mark.parametrize("pack", TEMPLATES)
def test_classroom_steps_hand_the_reporter_the_grader_output(tmp_path, pushed_at, pack):
    steps = classroom_job(TEMPLATES[pack])["steps"]
    grader = next(s for s in steps if s.get("id") == "grader")
    summary = next(s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    env = {
        **github_files(tmp_path),
        "GITHUB_WORKSPACE": str(tmp_path),
        "PUSHED_AT": pushed_at,
        "GRADER_IMAGE": classroom_job()["env"]["GRADER_IMAGE"],
        "CLASSROOM_JSON": json.dumps(CLASSROOM_JSON),
    }

    run_script(grader["run"], tmp_path, env, {"docker": DOCKER_STUB})
    run_script(summary["run"], tmp_path, env, {})

    assert decoded_result(tmp_path / "output") == CLASSROOM_JSON
    assert (tmp_path / "summary").read_text() == "## Grade\n"
    args = (tmp_path / "runner-temp" / "docker-args").read_text().splitlines()
    pushed = ["--pushed-at", pushed_at] if pushed_at else []
    assert args[-6 - len(pushed) :] == ["grade", "/submission", "--pack", pack, "--out", "/results", *pushed]
    assert f"{tmp_path}:/submission:ro" in args  # the student's checkout, read-only
    assert {"--network", "none"} <= set(args) and "ALL" in args
    # The same confinement as `grader grade --backend docker`: the two must not drift apart.
    added = {args[i + 1] for i, a in enumerate(args) if a == "--cap-add"}
    assert added == set(CAPABILITIES)


@pytest.mark.parametrize("assignment", ["", "a9-fall"])
@pytest.mark.parametrize("pack", TEMPLATES)
def test_service_mode_submits_head_with_the_jobs_oidc_token_and_hands_the_reporter_its_output(
    tmp_path, pack, assignment
):
    """With the organisation's GRADER_SERVICE set, the step runs `grader submit` in the image (no student code
    runs there, so it may reach the network) with GitHub's token request variables, and the reporter reads the
    classroom.json it writes; scripts/bench-classroom.py --service runs the same step against a real service."""
    workflow = load(TEMPLATES[pack] / ".github" / "workflows" / "classroom.yml")
    assert workflow["permissions"]["id-token"] == "write"
    job = classroom_job(TEMPLATES[pack])
    assert job["env"]["GRADER_SERVICE"] == "${{ vars.GRADER_SERVICE }}"
    grader = next(s for s in job["steps"] if s.get("id") == "grader")
    env = {
        **github_files(tmp_path),
        "GITHUB_WORKSPACE": str(tmp_path),
        "PUSHED_AT": "1770282000",
        "GRADER_IMAGE": "img",
        "GRADER_SERVICE": "https://grader.example.edu",
        "GRADER_ASSIGNMENT": assignment,
        "CLASSROOM_JSON": json.dumps(CLASSROOM_JSON),
    }
    run_script(grader["run"], tmp_path, env, {"docker": DOCKER_STUB})
    assert decoded_result(tmp_path / "output") == CLASSROOM_JSON
    args = (tmp_path / "runner-temp" / "docker-args").read_text().splitlines()
    submit = ["submit", "/submission", "--server", "https://grader.example.edu", "--assignment", assignment or pack]
    assert args[args.index("img") + 1 :] == [*submit, "--out", "/results"]  # the service keeps its own time
    assert {"ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"} == {
        args[i + 1] for i, a in enumerate(args) if a == "-e"
    }
    assert f"{tmp_path}:/submission:ro" in args and "--read-only" in args and "--cap-add" not in args


def test_the_submission_time_is_the_push_githubs_server_recorded_never_a_commit_date():
    grader = next(s for s in classroom_job()["steps"] if s.get("id") == "grader")
    assert grader["env"]["PUSHED_AT"] == "${{ github.event.repository.pushed_at }}"
    action = next(s for s in load(ACTION)["runs"]["steps"] if s.get("id") == "grade")
    assert action["env"]["PUSHED_AT"] == "${{ github.event.repository.pushed_at }}"
    for path in (CLASSROOM, ACTION):  # head_commit.timestamp and friends are dates the student writes
        expressions = re.findall(r"\$\{\{(.*?)\}\}", path.read_text())
        assert not [e for e in expressions if "commit" in e or "timestamp" in e], path


def test_every_template_carries_the_classroom_workflow_of_its_own_pack():
    """One workflow for every pack, so that a fix reaches all four: only the grading step's `--pack` differs."""
    a9 = (TEMPLATES["a9"] / ".github" / "workflows" / "classroom.yml").read_text()
    assert a9.count("--pack a9 ") == 1
    for pack, template in TEMPLATES.items():
        workflow = (template / ".github" / "workflows" / "classroom.yml").read_text()
        assert workflow == a9.replace("--pack a9 ", f"--pack {pack} "), f"{template}: not A9's workflow for {pack}"


@pytest.mark.parametrize("pack", TEMPLATES)
def test_every_template_has_a_readme_that_says_what_to_hand_in_and_how_to_grade_it(pack):
    readme = (TEMPLATES[pack] / "README.md").read_text()
    assert "grader grade" in readme, f"{pack}: no local grading command"
    assert f"--pack {pack}" in readme or pack == "a9", f"{pack}: the local command must name its pack"


def test_classroom_summary_step_tolerates_a_failed_grade(tmp_path):
    summary = next(s for s in classroom_job()["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary["if"] == "always()"
    run_script(summary["run"], tmp_path, github_files(tmp_path), {})
    assert (tmp_path / "summary").read_text() == ""


# --- the composite action ---------------------------------------------------------------------------------


GRADER_STUB = """printf '%s\\n' "$@" > "$RUNNER_TEMP/grader-args"
out=$(sed -n '/^--out$/{n;p}' "$RUNNER_TEMP/grader-args")
mkdir -p "$out"
printf '%s' "$CLASSROOM_JSON" > "$out/classroom.json"
"""


@pytest.mark.parametrize("rubric", ["", "rubrics/a9.yaml"])
def test_action_grades_and_sets_result(tmp_path, rubric):
    action = load(ACTION)
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) == {"path", "rubric"}
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "grade")
    assert action["outputs"]["result"]["value"] == "${{ steps.grade.outputs.result }}"
    env = {
        **github_files(tmp_path),
        "SUBMISSION": "submission",
        "RUBRIC": rubric,
        "PUSHED_AT": "1770282000",
        "CLASSROOM_JSON": json.dumps(CLASSROOM_JSON),
    }

    run_script(step["run"], tmp_path, env, {"grader": GRADER_STUB})

    assert decoded_result(tmp_path / "output") == CLASSROOM_JSON
    args = (tmp_path / "runner-temp" / "grader-args").read_text().splitlines()
    assert args[:2] == ["grade", "submission"]
    assert ("--rubric" in args) == bool(rubric)
    assert args[-2:] == ["--pushed-at", "1770282000"]


def test_action_inputs_reach_the_script_only_through_env():
    step = next(s for s in load(ACTION)["runs"]["steps"] if s.get("id") == "grade")
    assert step["env"] == {
        "SUBMISSION": "${{ inputs.path }}",
        "RUBRIC": "${{ inputs.rubric }}",
        "PUSHED_AT": "${{ github.event.repository.pushed_at }}",
    }


# --- this repository's CI ---------------------------------------------------------------------------------


def test_ci_installs_cpu_torch_before_the_package():
    run = "\n".join(s.get("run", "") for s in load(CI)["jobs"]["test"]["steps"])
    assert run.index('$TORCH_INDEX_URL" torch==') < run.index("pip install -e")
    assert load(CI)["env"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"


def test_ci_publishes_only_tags_and_only_there_may_write_packages():
    workflow = load(CI)
    assert workflow["permissions"] == {"contents": "read"}
    publish = workflow["jobs"]["publish"]
    assert publish["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert publish["permissions"]["packages"] == "write"
    assert "ghcr.io/" in "\n".join(s.get("run", "") for s in publish["steps"])
    assert all(
        "packages" not in job.get("permissions", {}) for name, job in workflow["jobs"].items() if name != "publish"
    )


# --- every student's machine (issue 21) -------------------------------------------------------------------

PLATFORMS = ROOT / ".github" / "workflows" / "student-platforms.yml"


def test_student_platforms_grade_on_linux_macos_and_windows_with_cpu_torch_from_pip():
    job = load(PLATFORMS)["jobs"]["grade"]
    assert job["strategy"]["matrix"]["os"] == ["ubuntu-latest", "macos-latest", "windows-latest"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    cpu = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert cpu in script and script.index(cpu) < script.index("pip install .")  # never the CUDA build
    assert "scripts/student_platforms.py" in script


def test_student_platforms_run_the_suites_fresh_venv_test_with_cpu_torch():
    job = load(PLATFORMS)["jobs"]["declared-dependencies"]
    assert job["env"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"  # the test honours it
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "-m fresh_venv tests/test_declared_dependencies.py" in script


def test_student_platforms_assert_the_scores_the_linux_grade_of_record_gives():
    import importlib.util

    spec = importlib.util.spec_from_file_location("student_platforms", ROOT / "scripts" / "student_platforms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    assert module.EXPECTED == [
        ("reference/a9", "a9", 105.0),  # tests/test_pipeline.py
        ("reference/a9-naive", "a9", 100.0),  # tests/test_without_root.py
        ("student_template/a9", "a9", 0.0),  # tests/test_pipeline.py
        ("reference/a4", "a4", 100.0),  # tests/test_a4_pack.py
        ("reference/hw12", "hw12", 6.5),  # tests/test_hw12_pack.py
        ("reference/a5", "a5", 88.0),  # tests/test_a5_pack.py
    ]


def test_classroom_annotations_come_from_results_json_never_from_student_output(tmp_path):
    step = next(s for s in classroom_job()["steps"] if s.get("name") == "Annotations")
    assert "annotate /results.json" in step["run"] and "--network none" in step["run"]
    env = {**github_files(tmp_path), "GRADER_IMAGE": "img"}
    (tmp_path / "runner-temp" / "grader-out").mkdir()
    (tmp_path / "runner-temp" / "grader-out" / "results.json").write_text("{}")
    docker = 'printf "%s\\n" "$@" > "$RUNNER_TEMP/docker-args"\n'
    run_script(step["run"], tmp_path, env, {"docker": docker})
    args = (tmp_path / "runner-temp" / "docker-args").read_text().splitlines()
    assert args[-3:] == ["img", "annotate", "/results.json"]
    assert f"{tmp_path}/runner-temp/grader-out/results.json:/results.json:ro" in args
