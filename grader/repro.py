"""``grader repro CASE_ID [--out FILE]``: one visible case as a script a student can debug in an IDE.

The script is the course's own harness shape: ``torch.multiprocessing.spawn`` starts one process
per rank, each joins a Gloo group with the repository's ``src.dist_init.init_process_group()``
(the ``env://`` rendezvous ``torchrun`` uses; plain ``init_process_group("gloo")`` where the
hand-in has no such module), runs the case exactly as the grader's rank does (the pack's own case
body, imported from the installed grader), and compares each rank's result with the expected one
using the grader's own comparison, printing where it differs.  A breakpoint in the student's code
stops there, in an ordinary process.

The inputs are the case's, generated with a public salt (``REPRO_SALT``): the same shapes, dtypes,
world size and parameters as the graded case, never the values of a grading's secret salt.  A rubric
that hides case ids from students gets no script (which case is which is what it hides).
"""

from __future__ import annotations

import base64
import difflib
import io
from pathlib import Path

import torch

from grader.errors import UserError
from grader.pack import AssignmentPack, Case, load_pack
from grader.rubric import Rubric

REPRO_SALT = "grader-repro"  # public on purpose: a repro must never carry a grading's secret inputs


def case_of(rubric: Rubric, case_id: str) -> tuple[AssignmentPack, Case]:
    """The visible case named ``case_id``; the user's error, with the nearest ids, otherwise."""
    if rubric.visibility.hidden:
        raise UserError(f"{case_id}: this rubric hides its cases from students; their inputs stay secret")
    pack = load_pack(rubric.assignment.pack)
    cases = {case.name: case for case in pack.cases()}
    if case_id not in cases or case_id not in rubric.case_ids:
        near = difflib.get_close_matches(case_id, list(cases), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else " (ids as `grader grade` prints them)"
        raise UserError(f"{case_id}: no such visible case{hint}")
    return pack, cases[case_id]


def script(rubric: Rubric, case_id: str) -> str:
    """The standalone script reproducing ``case_id``."""
    pack, case = case_of(rubric, case_id)
    prepared = pack.prepare(case, REPRO_SALT)
    buffer = io.BytesIO()
    torch.save({"inputs": prepared.inputs, "expected": prepared.expected}, buffer)
    data = base64.b64encode(buffer.getvalue()).decode()
    lines = [data[i : i + 100] for i in range(0, len(data), 100)]
    return _TEMPLATE.format(
        case=repr(case.name),
        title=pack.title,
        world_size=case.world_size,
        kind=repr(case.kind),
        params=repr(dict(sorted(case.params.items()))),  # Python literals: plain data only (str, numbers, lists)
        bodies=repr(pack.bodies),
        tolerance=repr(dict(sorted(prepared.tolerance.items()))),
        data="\n".join(f'    "{line}"' for line in lines),
    )


def main(args: object) -> int:
    from grader.rubric import load_rubric

    rubric = load_rubric(getattr(args, "rubric", None))
    case_id = str(getattr(args, "case_id", ""))
    out = getattr(args, "out", None) or Path(f"repro_{_file_name(case_id)}.py")
    Path(out).write_text(script(rubric, case_id))
    print(f"wrote {out}: run `python {out}` from your repository's root (inputs from a public salt)")
    return 0


def _file_name(case_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in case_id).strip("_")


_TEMPLATE = '''"""Reproduces {case} of {title}, as `grader repro` wrote it.

Run it from the root of your repository:   python this_file.py
Each rank is a process started by torch.multiprocessing.spawn and joined to a Gloo group by your
src.dist_init (as torchrun would); the case runs exactly as the grader's rank runs it, and every
rank's result is compared with the expected one.  Put a breakpoint in your code to stop there.
The inputs come from a public salt: same shapes and parameters as the graded case, other values.
"""

import base64
import importlib
import io
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CASE = {case}
WORLD_SIZE = {world_size}
KIND = {kind}
PARAMS = {params}
BODIES = {bodies}
TOLERANCE = {tolerance}
DATA = (
{data}
)


class Student:
    """What the grader's case body asks of the submission: its modules, imported from here."""

    sandbox = os.getcwd()
    stand_ins = {{}}

    def module(self, name):
        return importlib.import_module(name)


def join(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE))
    try:
        from src.dist_init import init_process_group
    except ImportError:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=WORLD_SIZE)
    else:
        init_process_group()


def run_rank(rank, port):
    sys.path.insert(0, os.getcwd())
    torch.set_num_threads(1)
    data = torch.load(io.BytesIO(base64.b64decode("".join(DATA))), weights_only=True)
    join(rank, port)
    from grader.matrix.verdicts import compare

    body = importlib.import_module(BODIES).BODIES[KIND]
    with torch.no_grad():
        got = body(Student(), PARAMS, data["inputs"][rank])
    problem = compare(got, data["expected"][rank], TOLERANCE)
    print(f"rank {{rank}}: " + (problem or "matches the expected result"), flush=True)
    dist.destroy_process_group()
    if problem:
        raise SystemExit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    print(f"{{CASE}}: {{WORLD_SIZE}} rank(s)")
    try:
        mp.spawn(run_rank, args=(free_port(),), nprocs=WORLD_SIZE, join=True)
    except mp.ProcessExitedException:
        sys.exit("the result differs on some rank (above)")
    except mp.ProcessRaisedException as exc:
        sys.exit(f"a rank raised: {{exc}}")
'''
