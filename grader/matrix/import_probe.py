"""Session side: a case left a thread running; was it its modules' import?  (issue 39)

In fresh ranks, the modules the case imports are imported one at a time, in the case's order, with
no body run, and /proc says after which import a thread was left running.  A thread started at
import is one defect of that module, charged as an import that never finished is: every later case
of the module is a ``hang`` without a run, naming the thread, and the modules importing it are graded
with the pack's placeholder and the grader's own functions in its place, so the defect costs nothing
outside its module.  Running those cases would only start the thread again in ranks replaced after
every case: a grading as long as 264 group starts.  A thread no import left running is the call's:
each case that leaves one is a ``hang`` (``verdicts.decide``).
"""

from __future__ import annotations

from grader.matrix.verdicts import threads_left
from grader.pack import AssignmentPack, Case
from grader.results import Verdict
from grader.runtimes.torchdist.runs import Group, GroupStartError

#: module -> (verdict, message) of an import that failed, hung, or left a thread running
Failures = dict[str, tuple[Verdict, str]]


def probe_imports(group: Group, pack: AssignmentPack, case: Case, failures: Failures, timeout_s: float) -> None:
    """Import ``case``'s modules one at a time in ``group`` (fresh, not yet launched; closed here), and
    add the first that leaves a thread running to ``failures``."""
    module = pack.module_of[case.kind]
    try:
        group.launch()
        group.wait_ready()
        for name in [*pack.imports_before.get(module, ()), module]:
            if name in failures:
                continue  # the ranks import its placeholder
            header = {
                "op": "import",
                "module": name,
                "layout": [case.launch.nodes, case.launch.per_node],
                "broken": {m: message for m, (_, message) in failures.items()},
            }
            run = group.run_case(header, [{} for _ in range(group.world_size)], timeout_s)
            left = threads_left(run)
            if left:
                file = pack.file_of(name).rsplit("/", 1)[-1]
                failures[name] = (
                    Verdict.HANG,
                    f"importing {file} leaves a thread running, which no case can end: {left}",
                )
            if left or any(rep.status != "ok" for rep in run.ranks):
                return
    except GroupStartError:
        return  # the probe decides nothing then: each case is charged its own threads
    finally:
        group.close()  # again, if a case that left it unclean or a failed start closed it: that is safe
