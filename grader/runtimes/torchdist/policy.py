"""The communication policy: which ``torch.distributed`` APIs student code may reach.

One list serves both enforcement layers, so they cannot drift apart: the static analysis
(``grader.runtimes.torchdist.static``) reports uses of these names with a line number, and the runtime guard
(``grader.runtimes.torchdist.guard``) replaces them inside every rank process before student code loads.
The rubric chooses, per student function, which of them are allowed (Task 2 may use
``all_reduce``/``all_gather`` as the handout permits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.handin import hand_in_file

#: ``torch.distributed`` module-level collectives (also reachable through ``distributed_c10d``).
COLLECTIVES: frozenset[str] = frozenset(
    {
        "broadcast",
        "all_reduce",
        "reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_gather_coalesced",
        "all_reduce_coalesced",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "_all_gather_base",
        "_reduce_scatter_base",
        "_broadcast_coalesced",
        "all_gather_single",
        "reduce_scatter_single",
    }
)

#: Methods of ``ProcessGroup``/``Backend`` objects that perform a collective.
PROCESS_GROUP_METHODS: frozenset[str] = frozenset(
    {
        "allreduce",
        "allreduce_coalesced",
        "allgather",
        "allgather_coalesced",
        "allgather_into_tensor_coalesced",
        "_allgather_base",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "reduce_scatter",
        "reduce_scatter_tensor_coalesced",
        "_reduce_scatter_base",
        "alltoall",
        "alltoall_base",
        "barrier",
        "monitored_barrier",
        "all_gather_single",
        "all_gather_single_coalesced",
        "all_to_all_single",
        "reduce_scatter_single",
        "reduce_scatter_single_coalesced",
    }
)

#: Whole modules whose every use is a collective in disguise.
FORBIDDEN_MODULES: frozenset[str] = frozenset(
    {
        "torch.distributed._functional_collectives",
        "torch.distributed._functional_collectives_impl",  # its own module, not a submodule of the above
        "torch.distributed.nn",
        "torch.distributed.nn.functional",
        "torch.distributed.algorithms",
        "torch.distributed.fsdp",
        "torch.nn.parallel",
        "torch.distributed.rpc",  # moves tensors between ranks without send/recv
        "torch.distributed.tensor",  # DTensor: redistribute() runs collectives
        "torch.distributed._tensor",
        "torch.distributed.device_mesh",  # hands out process groups the analysis cannot follow
    }
)


@dataclass(frozen=True)
class FunctionPolicy:
    """What one student function may call.  ``allowed`` lifts names out of :data:`COLLECTIVES`."""

    allowed: frozenset[str] = field(default_factory=frozenset)

    def forbids(self, name: str) -> bool:
        return (name in COLLECTIVES or name in PROCESS_GROUP_METHODS) and name not in self.allowed


@dataclass(frozen=True)
class Policy:
    """Per-file, per-function policy, built from the rubric's ``policy`` section.

    ``functions`` maps ``"<file>::<function>"`` (e.g. ``"src/transformer.py::forward_tensor_parallel"``)
    or ``"<file>"`` to a :class:`FunctionPolicy`; the most specific key wins, and the default
    forbids every collective.
    """

    functions: dict[str, FunctionPolicy] = field(default_factory=dict)

    def for_function(self, file: str, function: str | None) -> FunctionPolicy:
        file = hand_in_file(file)  # a notebook's cell is its notebook's
        if function is not None and f"{file}::{function}" in self.functions:
            return self.functions[f"{file}::{function}"]
        return self.functions.get(file, FunctionPolicy())

    def to_dict(self) -> dict[str, list[str]]:
        """The rubric's ``policy.allow`` form: what the matrix session and the rank guards receive."""
        return {key: sorted(rule.allowed) for key, rule in sorted(self.functions.items())}

    @classmethod
    def from_dict(cls, allow: dict[str, list[str]]) -> Policy:
        return cls({key: FunctionPolicy(frozenset(names)) for key, names in allow.items()})


STRICT = Policy()
