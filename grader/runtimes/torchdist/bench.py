"""``grader bench``: the same cases under the course-style launcher and under ours, in one run.

Course style = what the handout's public tests do: ``torch.multiprocessing.spawn`` per case and
a TCP rendezvous on a port picked as "free".  Ours = ``RankGroup`` exactly as a grading runs it
(forked from the zygote, every isolation layer this process can build, traffic measured, per-group
FileStore, group reused across clean cases).  Both run the same case bodies on the same inputs;
only ours is checked, as the point here is the cost of launching.  Then the whole grading of the
submission (``grader grade``, every stage and layer, its start-up and all its cases), per case: the
figure issue 23 states its goal in.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from grader.limits import Limits
from grader.pack import AssignmentPack, Case, load_pack
from grader.runtimes.torchdist.launcher import RankGroup
from grader.runtimes.torchdist.session import Sandboxing, Zygote, student_config
from grader.sandbox.isolation import default_allow_read, default_hide

SALT = "bench"


def _spawned_rank(rank: int, world_size: int, port: int, sandbox: str, bodies: str, case: Case, inputs: str) -> None:
    import importlib
    import os
    import sys

    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"})
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    sys.path.append(sandbox)

    class Student:
        stand_ins: dict[Any, str] = {}  # noqa: RUF012 - nothing stands in for the student here

        def __init__(self) -> None:
            self.sandbox = sandbox  # where a pack that reads its hand-in (A4, HW12) finds it

        def module(self, name: str) -> Any:
            return importlib.import_module(name)

    tensors = torch.load(inputs, weights_only=True)[rank]  # our own file, written by the bench
    importlib.import_module(bodies).BODIES[case.kind](Student(), case.params, tensors)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:  # the racy idiom the course uses; measured here, never used to grade
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_spawn(pack: AssignmentPack, cases: list[Case], sandbox: Path) -> float:
    import torch.multiprocessing as mp

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            path = f"{tmp}/inputs{i}.pt"
            torch.save(pack.prepare(case, SALT).inputs, path)
            args = (case.processes, _free_port(), str(sandbox), pack.bodies, case, path)
            mp.spawn(_spawned_rank, args=args, nprocs=case.processes, join=True)
    return time.monotonic() - t0


def run_ours(
    pack: AssignmentPack, cases: list[Case], sandbox: Path, policy: dict[str, list[str]], limits: Limits
) -> tuple[float, int]:
    from grader.matrix import verdicts
    from grader.runtimes.torchdist.policy import Policy

    passed = 0
    groups: dict[int, RankGroup] = {}
    isolation = {"sandbox": str(sandbox), **{k: getattr(limits, k) for k in ("memory_mb", "nproc", "cpu_s")}}
    isolation |= {"file_size_mb": limits.file_size_mb, "allow_read": [str(p) for p in default_allow_read()]}
    isolation["hide"] = [str(p) for p in default_hide()]
    student = student_config(pack, policy)
    zygote = Zygote.start(pack.rank_side)
    zygote.wait_ready()  # once per grading, like the session's own torch import: not a per-case cost
    sandboxing = Sandboxing.for_this_process(isolation)
    t0 = time.monotonic()
    try:
        for case in cases:
            group = groups.get(case.processes)
            if group is None or not group.alive:
                group = RankGroup(case.processes, sandbox, limits, zygote, sandboxing, student)
                groups[case.processes] = group
                group.start()
            prepared = pack.prepare(case, SALT)
            params = pack.case_params(case, sandbox)
            header = {"kind": case.kind, "module": pack.module_to_import(case.kind), "params": params}
            run = group.run_case(header, prepared.inputs, limits.case_timeout_s)
            file = pack.file_of(pack.module_of[case.kind])
            allowed = Policy.from_dict(policy).for_function(file, pack.function_of[case.kind]).allowed
            passed += verdicts.decide(case, prepared, run, allowed).verdict.value == "pass"
    finally:
        for group in groups.values():
            if group.alive:
                group.close()
        zygote.close()
        sandboxing.close()
    return time.monotonic() - t0, passed


def main(args: argparse.Namespace) -> int:
    """``grader bench SUBMISSION``: the submission taken in as a grading takes it, then the same
    world-size-4 cases of its pack (spread over the kinds whose module it has) under both launchers,
    with the rubric's limits.  A case runs in as many processes as it has (``Case.processes``: HW12's
    thread cases in one)."""
    from grader import intake
    from grader.errors import UserError
    from grader.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    pack = load_pack(rubric.assignment.pack)
    with tempfile.TemporaryDirectory(prefix="grader-bench-") as tmp:
        taken = intake.take(args.submission, rubric, Path(tmp) / "sandbox")
        present = set(taken.student_files)
        pool = [
            c
            for c in pack.cases()
            if c.world_size == 4
            and set(pack.files_of(pack.module_of[c.kind])) & present
            and not c.keep_events
            and c.kind not in pack.handoffs  # two groups per case (see pack.Handoff): not one launcher's case
        ]
        if not pool:
            raise UserError(f"{args.submission}: none of the pack's world-size-4 cases can run on it")
        cases = pool[:: max(1, len(pool) // args.cases)][: args.cases]
        spawn_s = run_spawn(pack, cases, taken.sandbox)
        ours_s, passed = run_ours(pack, cases, taken.sandbox, rubric.policy.to_dict(), rubric.limits)
    whole_s, graded = run_whole(args.submission, args.rubric)
    n = len(cases)
    print(f"{'launcher':<34}{'cases':>6}{'seconds':>10}{'s/case':>10}")
    print(f"{'spawn per case + TCP port':<34}{n:>6}{spawn_s:>10.2f}{spawn_s / n:>10.3f}")
    print(f"{'grader RankGroup (fork)':<34}{n:>6}{ours_s:>10.2f}{ours_s / n:>10.3f}")
    print(f"{'grader grade, the whole grading':<34}{graded:>6}{whole_s:>10.2f}{whole_s / max(graded, 1):>10.3f}")
    print(f"per-case speed-up: {spawn_s / max(ours_s, 1e-9):.1f}x  ({passed}/{n} cases passed under ours)")
    print(f"per-case speed-up of the whole grading: {spawn_s / n / max(whole_s / max(graded, 1), 1e-9):.1f}x")
    return 0


def run_whole(submission: str, rubric: Path | None) -> tuple[float, int]:
    """Seconds of a whole grading of ``submission`` as ``grader grade`` runs it, and its cases."""
    from grader import pipeline

    t0 = time.monotonic()
    result = pipeline.grade(submission, rubric)
    return time.monotonic() - t0, len(result.cases)
