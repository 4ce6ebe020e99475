"""What a rank is told about its launch is what torchrun tells it (issue 24).

A real ``torchrun`` launch of 2 nodes x 2 processes (two agents on this host, static rendezvous)
writes each worker's environment; :func:`torchrun_env` must give every rank the same values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.runtimes.torchdist.torchrun_env import MASTER_PORT, torchrun_env

WORKER = """
import json, os, sys
with open(os.path.join(sys.argv[1], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ), f)
"""
#: what a launch sets that cannot be the same here: the agent's own error file, and the port we chose
SET_BY_THE_LAUNCH = {"TORCHELASTIC_ERROR_FILE", "MASTER_PORT"}


@pytest.mark.slow
def test_every_rank_of_a_two_node_launch_is_told_what_torchrun_tells_it(tmp_path: Path) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    port = str(MASTER_PORT + 111)
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=2"]
    launch += ["--master_addr=127.0.0.1", f"--master_port={port}", "--rdzv_backend=static"]
    agents = [
        subprocess.Popen(
            [*launch, f"--node_rank={node}", "worker.py", str(tmp_path)],
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(tmp_path)},  # each agent's torchelastic_* log directory: here, not in /tmp
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for node in (0, 1)
    ]
    assert [agent.wait(timeout=120) for agent in agents] == [0, 0]
    for rank in range(4):
        seen = json.loads((tmp_path / f"{rank}.json").read_text())
        ours = torchrun_env(rank, nodes=2, per_node=2)
        torchrun = {k: seen.get(k) for k in ours if k not in SET_BY_THE_LAUNCH}
        assert {k: v for k, v in ours.items() if k not in SET_BY_THE_LAUNCH} == torchrun
        assert seen["MASTER_PORT"] == port and "NODE_RANK" not in seen
        launched = {k for k in seen if k.startswith("TORCHELASTIC_") or k in ours}
        assert launched - SET_BY_THE_LAUNCH <= set(ours), "torchrun set a variable a rank is not told"


def test_on_the_a4_handouts_four_nodes_every_local_rank_is_0() -> None:
    envs = [torchrun_env(rank, nodes=4, per_node=1) for rank in range(4)]
    assert [e["LOCAL_RANK"] for e in envs] == ["0"] * 4
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["GROUP_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"1"} and {e["WORLD_SIZE"] for e in envs} == {"4"}
    with pytest.raises(ValueError):
        torchrun_env(4, nodes=4, per_node=1)
