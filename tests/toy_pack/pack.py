"""The toy pack as the engine loads it: ``grader grade SUB --rubric tests/toy_pack/rubric.yaml``
(the rubric names ``tests.toy_pack.pack:PACK``; an installed pack would be named by its entry point)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from grader.pack import AssignmentPack, Case, Prepared

HERE = Path(__file__).resolve().parent


def cases() -> list[Case]:
    """The matrix: pure data.  A case's name is ``test[id]``, what rubric patterns match."""
    return [Case("test_double", f"ws{ws}", ws, "double", {"rows": 3}) for ws in (1, 2)]


def prepare(case: Case, salt: str) -> Prepared:
    """Session side: every rank's input and the value it must return, keyed by the secret salt."""
    seed = int.from_bytes(hashlib.sha256(f"{salt}|{case.name}".encode()).digest()[:8], "little")
    gen = torch.Generator().manual_seed(seed)
    inputs = [{"x": torch.randn(case.params["rows"], 4, generator=gen)} for _ in range(case.world_size)]
    return Prepared(
        inputs=inputs,
        expected=[{"out": 2 * i["x"]} for i in inputs],
        tensor_bytes=inputs[0]["x"].numel() * 4,
        tolerance={"rtol": 1e-6, "atol": 1e-6},
    )


PACK = AssignmentPack(
    id="toy",
    title="The toy pack",
    rubric=HERE / "rubric.yaml",
    test_file=HERE / "test_toy.py",
    bodies="tests.toy_pack.bodies",
    cases=cases,
    prepare=prepare,
    module_of={"double": "ops"},
    function_of={"double": "double"},
)
