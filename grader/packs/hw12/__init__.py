"""Homework 12: a thread-simulated ``DistributedContext``, data parallelism, and column/row-parallel
linear layers with hand-written backward passes, handed in as a Jupyter notebook.

The notebook is read, never run (``grader.handin.notebook``): each case takes the definitions the
handout names out of it and runs them on the threads runtime with the grader's own copies of the
code the handout marks "DO NOT CHANGE" (``given``).  Session side: ``pack``, ``catalog`` (the cases)
and ``expected``; rank side: ``bodies``, ``given`` and ``trusted`` (the grader's own solution, a
stand-in for a failed context and the session's reference for tensor-parallel training).
"""
