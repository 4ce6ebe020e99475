"""The threads runtime: student code that simulates a distributed backend with Python threads
(HW12's ``DistributedContext``), graded in sandboxed processes.

A pack names it (``AssignmentPack.runtime = "threads"``), and its ranks then import this runtime's
rank-side module before the pack's bodies (``grader.runtimes.RANK_MODULES``).  It adds that one
rank-side piece to the process machinery it shares with ``torchdist`` (the zygote,
rank groups, every ``grader.sandbox`` layer, the wire and the session's verdicts): ``harness``, which
runs a case's N student threads inside one rank process, with a seeded arrival order, and turns a
deadlock or a thread left running into a ``hang`` that names each stuck thread's line (the process
then ends with the case), and a thread's exception into the student's ``crash`` with its line.

A case of world size N runs as one process of N threads (``harness``) or as N processes of one
thread each: its ``engine_params(processes=)`` says how many processes (see ``grader.pack``).  What
the student's threads call is the assignment's, not the runtime's: HW12's ``DistributedContext``
API, and the trusted one whose collectives cross between processes, live in its pack
(``grader.packs.hw12.context``).
"""
