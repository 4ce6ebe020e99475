"""``grader bench``: the same cases under the course-style launcher and under ours, in one run.

Course style = what the handout's public tests do: ``torch.multiprocessing.spawn`` per case and
a TCP rendezvous on a port picked as "free".  Ours = ``RankGroup`` exactly as a grading runs it
(forked from the zygote, every isolation layer this process can build, traffic measured, per-group
FileStore, group reused across clean cases).  Both run the same case bodies on the same inputs;
only ours is checked, as the point here is the cost of launching.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from grader.matrix.plugin import BODIES
from grader.packs.a9 import catalog, expected
from grader.sandbox.isolation import default_allow_read, default_hide
from grader.sandbox.launcher import Limits, RankGroup, Sandboxing, Zygote

SALT = "bench"


def _spawned_rank(
    rank: int, world_size: int, port: int, sandbox: str, kind: str, params: dict[str, Any], inputs: str
) -> None:
    import os
    import sys

    import torch.distributed as dist

    from grader.packs.a9.bodies import BODIES

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"})
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    sys.path.append(sandbox)
    import importlib

    class Student:
        stand_ins: dict[Any, str] = {}  # noqa: RUF012 - nothing stands in for the student here

        def module(self, name: str) -> Any:
            return importlib.import_module(name)

    tensors = torch.load(inputs, weights_only=True)[rank]  # our own file, written by the bench
    BODIES[kind](Student(), params, tensors)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:  # the racy idiom the course uses; measured here, never used to grade
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_spawn(cases: list[catalog.Case], sandbox: Path) -> float:
    import torch.multiprocessing as mp

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            path = f"{tmp}/inputs{i}.pt"
            torch.save(expected.prepare(case, SALT).inputs, path)
            args = (case.world_size, _free_port(), str(sandbox), case.kind, case.params, path)
            mp.spawn(_spawned_rank, args=args, nprocs=case.world_size, join=True)
    return time.monotonic() - t0


def run_ours(cases: list[catalog.Case], sandbox: Path) -> tuple[float, int]:
    from grader.matrix import verdicts

    passed = 0
    groups: dict[int, RankGroup] = {}
    isolation = {"sandbox": str(sandbox), **{k: getattr(Limits(), k) for k in ("memory_mb", "nproc", "cpu_s")}}
    isolation |= {"file_size_mb": Limits().file_size_mb, "allow_read": [str(p) for p in default_allow_read()]}
    isolation["hide"] = [str(p) for p in default_hide()]
    zygote = Zygote(BODIES)
    zygote.wait_ready()  # once per grading, like the session's own torch import: not a per-case cost
    sandboxing = Sandboxing.for_this_process(isolation)
    t0 = time.monotonic()
    try:
        for case in cases:
            group = groups.get(case.world_size)
            if group is None or not group.alive:
                group = groups[case.world_size] = RankGroup(case.world_size, sandbox, Limits(), zygote, sandboxing)
                group.start()
            prepared = expected.prepare(case, SALT)
            header = {"kind": case.kind, "params": case.params, "allowed": [], "keep_events": False}
            run = group.run_case(header, prepared.inputs, 10.0)
            passed += verdicts.decide(case, prepared, run).verdict.value == "pass"
    finally:
        for group in groups.values():
            if group.alive:
                group.close()
        zygote.close()
        sandboxing.close()
    return time.monotonic() - t0, passed


def main(args: argparse.Namespace) -> int:
    from grader.errors import UserError

    tree = Path(args.submission)
    if not (tree / "src" / "collectives.py").exists():
        raise UserError(f"{tree}: expected a student repo with src/collectives.py")
    with tempfile.TemporaryDirectory(prefix="grader-bench-") as tmp:
        sandbox = Path(tmp)
        sandbox.chmod(0o755)  # as intake leaves a sandbox: readable by the ranks' own uids
        (sandbox / "src").mkdir()
        (sandbox / "src" / "__init__.py").write_text("")
        (sandbox / "src" / "collectives.py").write_bytes((tree / "src" / "collectives.py").read_bytes())
        # 4-rank Task 1 cases, spread over the five collectives
        pool = [c for c in catalog.all_cases() if c.world_size == 4 and c.task == 1 and "large" not in c.id]
        cases = pool[:: max(1, len(pool) // args.cases)][: args.cases]
        spawn_s = run_spawn(cases, sandbox)
        ours_s, passed = run_ours(cases, sandbox)
    n = len(cases)
    print(f"{'launcher':<28}{'cases':>6}{'seconds':>10}{'s/case':>10}")
    print(f"{'spawn per case + TCP port':<28}{n:>6}{spawn_s:>10.2f}{spawn_s / n:>10.3f}")
    print(f"{'grader RankGroup (fork)':<28}{n:>6}{ours_s:>10.2f}{ours_s / n:>10.3f}")
    print(f"per-case speed-up: {spawn_s / max(ours_s, 1e-9):.1f}x  ({passed}/{n} cases passed under ours)")
    return 0
