"""The tutorial pack: a ring all-reduce in three functions, graded on the engine's torchdist runtime.

docs/packs/write-your-own.md builds it step by step and includes its code from these files;
tests/test_tutorial_pack.py grades its reference (full marks) and its template (0) through ``grader grade``.
It is loaded by module path (``ringpack.pack:PACK``, with ``docs/tutorial`` on ``PYTHONPATH``), as a course's
own pack would be before it is installed.  Rank processes import this package too (for ``ringpack.bodies``):
nothing here may import the session side.
"""
