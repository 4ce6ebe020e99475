"""Session side: what only Assignment 5 knows to check, decided from the ranks' answers and the wire.

Called after a case passed the engine's checks (no crash, hang or tampering; the values that have
an expected tensor equal it).  Every expectation is computed here from the case's parameters; a
rank's reply is only its answer (did the assertion raise, which layers).  The schedule is read from
the point-to-point messages in the order they crossed the wire; which stages read data (Q6) from
the values (only the first stage is given real data) and the wire (the first stage feeds the rest).
"""

from __future__ import annotations

from typing import Any

from grader.pack import Case, Prepared

Verdict = tuple[str, str] | None


def _flags(reply: dict[str, Any], name: str) -> list[int]:
    value = reply.get(name)
    return [] if value is None else [int(v) for v in value.reshape(-1).tolist()]


def _assertions(case: Case, replies: list[dict[str, Any]]) -> Verdict:
    raised = _flags(replies[0], "raised")
    for (pp, batch, micro, layers), got in zip(case.params["args"], raised, strict=False):
        unbalanced, few = layers % pp != 0, batch // micro < pp
        args = f"pp={pp}, number_of_layers={layers}, global_batch_size={batch}, micro_batch_size={micro}"
        if got and not (unbalanced or few):
            return "wrong", f"the assertions fail for arguments that meet both conditions ({args})"
        if not got and unbalanced:
            return "wrong", f"the assertions let an unbalanced pipeline through ({args}: layers do not divide)"
        if not got and few:
            return "wrong", f"the assertions let too few micro-batches through ({args}: fewer than the stages)"
    if len(raised) != len(case.params["args"]):
        return "wrong", "the run answered for fewer argument sets than it was given"
    return None


class _Stated:
    """A rank's flat reply, read in order.  The reply is untrusted: a count it states is believed no
    further than the numbers it sent (a forged 10**12 must not build a list that long here)."""

    def __init__(self, numbers: list[int]) -> None:
        self._numbers = numbers
        self._left = iter(numbers)

    def number(self, missing: int = -1) -> int:
        return next(self._left, missing)

    def bounded(self, count: int) -> int:
        return min(max(count, 0), len(self._numbers))

    def count(self) -> int:
        """The next number, as a count of what follows."""
        return self.bounded(self.number(0))


def _distribution(case: Case, replies: list[dict[str, Any]]) -> Verdict:
    reply = _Stated(_flags(replies[0], "layers"))
    for layers, stages in case.params["pairs"]:
        split = [[reply.number() for _ in range(reply.count())] for _ in range(stages)]
        where = f"distribute_layers({layers} layers, {stages} stages)"
        joined = [i for stage in split for i in stage]
        if sorted(joined) != list(range(layers)):
            return "wrong", f"{where} gives {split}: every layer must be in exactly one stage"
        if joined != list(range(layers)):
            return "wrong", f"{where} gives {split}: each stage's layers must be contiguous and in order"
        sizes = [len(stage) for stage in split]
        if max(sizes) - min(sizes) > 1:
            return "wrong", f"{where} gives stages of {sizes} layers: not as evenly as possible"
    return None


def _schedule(case: Case, messages: list[tuple[int, int, int]] | None) -> Verdict:
    """All forward, then all backward, between neighbours only, one activation per micro-batch."""
    if messages is None:  # not measured (no root): the values were checked, the order cannot be
        return None
    p = case.params
    stages, count = case.world_size, p["global_batch_size"] // p["micro_batch_size"]
    size = p["micro_batch_size"] * p["sequence_length"] * p["hidden_size"] * 4
    if not messages:
        return "not_parallel", "no stage sent a single message: the stages did not communicate"
    for src, dst, nbytes in messages:
        if abs(src - dst) != 1:
            return "wrong", f"stage {src} sent stage {dst} a message: stages talk to their neighbours only"
        if nbytes != size:
            return "wrong", f"stage {src} sent stage {dst} {nbytes} bytes; one micro-batch's activation is {size}"
    for stage in range(stages - 1):
        forward = [i for i, (s, d, _) in enumerate(messages) if (s, d) == (stage, stage + 1)]
        backward = [i for i, (s, d, _) in enumerate(messages) if (s, d) == (stage + 1, stage)]
        if len(forward) != count or len(backward) != count:
            return "wrong", (
                f"stage {stage} sent stage {stage + 1} {len(forward)} activations and got {len(backward)} "
                f"gradients back; {count} micro-batches need {count} of each"
            )
        early = sum(1 for i in forward if i < backward[0])
        if early < count:
            return "wrong", (
                f"not all-forward-then-all-backward: stage {stage + 1} sent a gradient back to stage {stage} "
                f"after only {early} of the {count} forward activations"
            )
    return None


def _posted(flat: list[int]) -> list[tuple[int, int, bool, list[int]]]:
    """A Q7 reply's operations, (kind, peer, the tensor given, shape), read as :class:`_Stated`."""
    reply, ops = _Stated(flat), []
    for _ in range(reply.count()):
        kind, peer, given, ndim = (reply.number() for _ in range(4))
        ops.append((kind, peer, given == 1, [reply.number() for _ in range(reply.bounded(ndim))]))
    return ops


def _operation(case: Case, replies: list[dict[str, Any]]) -> Verdict:
    """One operation of ``pipeline_communicate`` on every stage: the first stage receives nothing
    forward and sends nothing backward, the last the reverse; every other call posts one operation
    with its neighbour and returns what the starter returns."""
    from grader.packs.a5.bodies import IRECV, ISEND, RETURNED_NONE, RETURNED_POSTED

    operation, stages = case.params["operation"], case.world_size
    receive, forward = operation.startswith("recv"), operation.endswith("forward")
    for stage, reply in enumerate(replies):
        call = f"pipeline_communicate('{operation}') on stage {stage} of {stages}"
        ops, returned = _posted(_flags(reply, "posted")), (_flags(reply, "returned") or [-1])[0]
        peer = stage - 1 if receive == forward else stage + 1  # a forward comes from below, a backward from above
        if not 0 <= peer < stages:
            edge = "first" if peer < 0 else "last"
            if ops:
                return "wrong", f"{call} posted an operation with stage {peer}: the {edge} stage has no such neighbour"
            if returned != RETURNED_NONE:
                return "wrong", f"{call} returned a value: it must return None when it performs no P2P communication"
            continue
        verb = f"receive from stage {peer}" if receive else f"send to stage {peer}"
        if not ops:
            return "wrong", f"{call} returned without communicating: it must {verb}"
        if len(ops) > 1:
            return "wrong", f"{call} posted {len(ops)} operations: it must {verb}, once"
        kind, got_peer, given, shape = ops[0]
        if kind != (IRECV if receive else ISEND) or got_peer != peer:
            posted = {ISEND: "an isend to", IRECV: "an irecv from"}.get(kind, "an operation with")
            return "wrong", f"{call} posted {posted} stage {got_peer}: it must {verb}"
        if receive and (shape != list(case.params["shapes"]) or returned != RETURNED_POSTED):
            return "wrong", f"{call} must receive a tensor of the shapes it is given and return it"
        if not receive and (not given or returned != RETURNED_NONE):
            return "wrong", f"{call} must send the tensor it is given and return None"
    return None


def _check(case: Case, replies: list[dict[str, Any]]) -> Verdict:
    """The check must pass on the right results and fail where the grader made them wrong."""
    runs = [[*_flags(r, "raised"), 0, 0][:2] for r in replies]
    what = "output" if case.kind == "q9" else "gradient"
    alarms = [stage for stage, (right, _) in enumerate(runs) if right]
    if alarms:
        return "wrong", f"the check fails on stage {alarms[0]} although every {what} is right"
    stages = [case.world_size - 1] if case.kind == "q9" else list(range(case.world_size))
    missed = [stage for stage in stages if not runs[stage][1]]
    if missed:
        which = "the last micro-batch's output" if case.kind == "q9" else "the fc2 gradient of the stage's last layer"
        return "wrong", f"the check passes on stage {missed[0]} although the grader made {which} wrong"
    return None


def judge(
    case: Case, prepared: Prepared, replies: list[dict[str, Any]], messages: list[tuple[int, int, int]] | None
) -> Verdict:
    if case.kind == "q2":
        return _assertions(case, replies)
    if case.kind == "q5":
        return _distribution(case, replies)
    if case.kind == "q7":
        return _operation(case, replies)
    if case.kind in ("q6", "q7_pipelined", "q8"):  # Q6: the first stage feeds the rest, on the wire
        # (Q8's forward case is judged on its values: only the first stage has real data and each
        # stage only its own layers' weights, so the last stage's outputs are right only if they came
        # through every stage)
        return _schedule(case, messages)
    if case.kind in ("q9", "q10"):
        return _check(case, replies)
    return None
