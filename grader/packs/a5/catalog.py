"""The matrix of Assignment 5 as plain data (no torch).

Shapes are the handout's scaled down with their ratios kept (intermediate = 3.5 x hidden, as
14336 / 4096): sequence 8, hidden 16, intermediate 56.  Pipeline sizes 2, 3 and 4; every pipelined
case meets the Q2 conditions (layers divide evenly; at least one micro-batch per stage).  A case id
reads ``pp{stages}-l{layers}-b{global batch}-m{micro-batch}``.
"""

from __future__ import annotations

from grader.pack import Case, engine_params

SEQUENCE, HIDDEN, INTERMEDIATE = 8, 16, 56
#: (pp, layers, global batch, micro-batch): the handout's 4 x 12 layers x 8 micro-batches first
PIPELINES = ((4, 12, 16, 2), (2, 4, 8, 2), (2, 6, 12, 4), (3, 6, 12, 2), (3, 9, 6, 2), (4, 8, 8, 2))
#: (layers, stages) that divide evenly, and those that do not ("as evenly as possible")
EVEN_PAIRS = tuple((k * s, s) for s in (1, 2, 3, 4, 6, 8) for k in (1, 2, 3, 5))
UNEVEN_PAIRS = tuple((layers, s) for s in (2, 3, 4, 8) for layers in range(s + 1, 3 * s) if layers % s)
#: Q2's argument sets (pp, global batch, micro-batch, layers) that meet both conditions
BALANCED = ((4, 16, 2, 12), (2, 16, 2, 4), (3, 24, 4, 9))
#: Q2's argument sets that break one condition, by case: each case also holds ``BALANCED``, so that
#: accepting valid arguments is a condition of its credit, never credit on its own (issue 57)
ASSERTION_ARGS = {
    "unbalanced": ((4, 16, 2, 10), (3, 24, 2, 8), (2, 16, 2, 5)),
    "few-microbatches": ((4, 6, 2, 12), (4, 4, 4, 8), (3, 4, 2, 6)),
}

#: The operations of ``pipeline_communicate``, each guarded in the starter by one condition of Q7's.
OPERATIONS = ("recv_forward", "send_forward", "recv_backward", "send_backward")

#: What each kind exercises, by the question the report answers it under (the rubric's items).  Q7 has
#: two kinds: each operation called alone (its condition judged apart, what pays) and the whole pipeline
#: with the student's function (feedback); a hang of the one is not a hang of the other.  Q8 has two:
#: its forward loop alone (the last stage's outputs) and the whole schedule (every stage's gradients).
FUNCTION_OF = {
    "q2": "Q2 assertions",
    "q3": "Q3 tensor_shapes",
    "q4": "Q4 baseline",
    "q5": "distribute_layers",
    "q6": "Q6 dataloader",
    "q7": "pipeline_communicate, one operation alone",
    "q7_pipelined": "pipeline_communicate in the pipeline",
    "q8_forward": "Q8 pipelined forward",
    "q8": "Q8 pipelined forward and backward",
    "q9": "Q9 output check",
    "q10": "Q10 gradient check",
}


def question(kind: str) -> str:
    """The report's question a case of ``kind`` grades (``q7_pipelined``: Q7)."""
    return kind.partition("_")[0].upper()


def _args(pp: int, layers: int, batch: int, micro: int) -> dict[str, int]:
    return {
        "pp": pp,
        "number_of_layers": layers,
        "global_batch_size": batch,
        "micro_batch_size": micro,
        "sequence_length": SEQUENCE,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
    }


def _id(pp: int, layers: int, batch: int, micro: int) -> str:
    return f"pp{pp}-l{layers}-b{batch}-m{micro}"


#: Said when a pipelined stage's values hold NaN (the grader's poison, see bodies).
NAN_HINT = (
    "NaN: a stage computed from weights or data that are not its own (each stage is given only its own "
    "layers' weights, and only the first stage real data); a stage must run its own layers on what it receives"
)


def all_cases() -> list[Case]:
    cases = [
        Case("test_assertions", name, 1, "q2", {"args": [list(a) for a in (*args, *BALANCED)], **_args(4, 12, 16, 2)})
        for name, args in ASSERTION_ARGS.items()
    ]
    cases += [Case("test_tensor_shapes", _id(1, *p[1:]), 1, "q3", _args(1, *p[1:])) for p in PIPELINES[:3]]
    cases += [Case("test_baseline", _id(1, *p[1:]), 1, "q4", _args(1, *p[1:])) for p in PIPELINES[:3]]
    for name, pairs in (("even", EVEN_PAIRS), ("uneven", UNEVEN_PAIRS)):
        cases.append(Case("test_distribute_layers", name, 1, "q5", {"pairs": [list(p) for p in pairs]}))
    cases += [Case("test_dataloader", _id(*p), p[0], "q6", _args(*p)) for p in PIPELINES[:4]]
    shapes = [2, SEQUENCE, HIDDEN]  # one micro-batch's activation
    cases += [
        Case("test_condition", f"{operation}-pp{pp}", pp, "q7", {"operation": operation, "shapes": shapes})
        for operation in OPERATIONS
        for pp in (2, 3, 4)
    ]
    for test, kind in (
        ("test_communicate", "q7_pipelined"),
        ("test_pipelined_forward", "q8_forward"),
        ("test_pipelined", "q8"),
    ):
        own = {"outputs": False} if kind == "q8" else {}  # Q8's outputs are its forward case's
        cases += [
            Case(test, _id(*p), p[0], kind, {**_args(*p), **own, **engine_params(nan_hint=NAN_HINT)}) for p in PIPELINES
        ]
    for test, kind in (("test_output_check", "q9"), ("test_gradient_check", "q10")):
        cases += [Case(test, _id(*p), p[0], kind, _args(*p)) for p in (PIPELINES[0], PIPELINES[1], PIPELINES[3])]
    return cases
