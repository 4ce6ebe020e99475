"""scripts/bench-classroom.py measures the workflow's own grading step: it must find that step and read
its `docker run` options as bash expands them on a runner, so the bench follows every change to the
workflow instead of timing a stale copy."""

from __future__ import annotations

import base64
import json
import os
import runpy
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench-classroom.py"


def test_the_bench_runs_the_workflows_docker_options_expanded_as_on_a_runner() -> None:
    bench = runpy.run_path(str(BENCH))  # its functions, without running main()
    script = bench["grading_step"]()
    env = {**os.environ, "RUNNER_TEMP": "/runner/tmp", "GITHUB_WORKSPACE": "/repo", "GRADER_IMAGE": "img"}
    options = bench["docker_options"](script, env)
    assert "docker run " in script and "classroom.json" in script
    assert options[options.index("--network") + 1] == "none"
    assert options[options.index("--group-add") + 1] == str(os.getgid())  # "$(id -g)", expanded
    assert "/repo:/submission:ro" in options and "/runner/tmp/grader-out:/results" in options
    assert "img" not in options and "grade" not in options  # image and command are the bench's to choose


def test_the_door_check_takes_each_packs_own_workflow() -> None:
    bench = runpy.run_path(str(BENCH))
    for pack in ("a9", "a4", "hw12", "a5"):
        assert f"--pack {pack}" in bench["grading_step"](pack)


def test_the_door_check_reads_the_step_output_as_the_reporter_does(tmp_path: Path) -> None:
    """One ``result=`` line of base64 JSON; the tests' scores added left to right as doubles (so 0.1 + 0.2
    is not 0.3 there either), over ``max_score``."""
    bench = runpy.run_path(str(BENCH))
    result = {"max_score": 10, "tests": [{"score": 0.1}, {"score": 0.2}, {"score": 5}]}
    output = tmp_path / "github-output"
    output.write_text("other=1\nresult=" + base64.b64encode(json.dumps(result).encode()).decode() + "\n")
    assert bench["reporter_points"](output) == (0.1 + 0.2 + 5, 10.0)
    output.write_text("other=1\n")
    with pytest.raises(SystemExit, match="0 result= lines"):
        bench["reporter_points"](output)
