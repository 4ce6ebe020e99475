"""Assignment 4: a single-device baseline step, gradient accumulation, data parallelism, and a
column-parallel linear layer whose autograd functions move data and gradients between ranks.

The hand-in is the handout's script (``assignment4.py``), whose module level starts NCCL on GPUs:
nothing of it runs but the definitions the handout names, read out of the source and executed in
the grader's rank processes on CPU/Gloo with the grader's own helpers and globals (``bodies``).
Session side: ``pack`` (the AssignmentPack), ``catalog`` (the cases) and ``expected`` (the trusted
baseline step).
"""
