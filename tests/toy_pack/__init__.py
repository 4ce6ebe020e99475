"""The toy pack: the smallest assignment the engine can grade, and the worked example of a pack.

Two cases of one student function, ``double(x)`` in ``ops.py`` (return ``2 * x``), at world sizes 1
and 2; one rubric (``rubric.yaml``).  No vocabulary of Assignment 9 or of torch.distributed: the
engine's own tests grade it end to end, which catches an engine that names an assignment (a path, a
function, a case id) where no import rule would.  docs/ARCHITECTURE.md, "Writing a pack", walks
through it file by file.
"""
