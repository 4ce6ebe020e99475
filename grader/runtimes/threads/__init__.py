"""The threads runtime: student code that simulates a distributed backend with Python threads
(HW12's ``DistributedContext``), graded in sandboxed processes.

It adds two rank-side pieces to the process machinery it shares with ``torchdist`` (the zygote,
rank groups, every ``grader.sandbox`` layer, the wire and the session's verdicts):

- ``harness``: runs a case's N student threads inside one rank process, with a seeded arrival
  order, and turns a deadlock or a thread left running into a ``hang`` that names each stuck
  thread's line (the process then ends with the case), and a thread's exception into the
  student's ``crash`` with its line.
- ``hub``: a trusted ``DistributedContext`` for cases whose ranks must each hold only their own
  data: every rank is its own process, and the context's collectives cross between processes as
  torch.distributed collectives (measured on the wire like any other), never through a shared heap.

A case of world size N runs as N processes of one thread each (``hub``) or as one process of N
threads (``harness``): its ``engine_params(processes=)`` says how many processes (see ``grader.pack``).
"""
