"""scripts/bench-classroom.py measures the workflow's own grading step: it must find that step and read
its `docker run` options as bash expands them on a runner, so the bench follows every change to the
workflow instead of timing a stale copy."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

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
