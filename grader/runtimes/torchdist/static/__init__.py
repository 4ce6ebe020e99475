"""Static policy analysis: which ``torch.distributed`` APIs each student function reaches.

Only the AST is read; student code is never imported or run, and torch is not imported here, so
``grader check`` is fast and runs anywhere.  The runtime guard (``grader.runtimes.torchdist.guard``) is the
backstop for whatever a static reading cannot see; this stage exists to point at a line.

How names are followed.  Every binding in a file (imports, assignments, ``for``/``with`` targets,
parameters fed from the file's own call sites, ``self.x = ...`` attributes, return values) is
resolved to a set of *values* by a flow-insensitive fixed point: dotted names such as
``torch.distributed.all_reduce`` (``distributed_c10d`` folded into ``torch.distributed``), ``<pg>``
for anything derived from a process group, and markers for the file's own functions and classes.
A container is resolved to what it holds, so an item of one (``(dist,)[0]``, ``box.get(k)``,
``next(iter(box))``) may be anything put in it, also later (``box.append(dist)``, ``box[k] = dist``);
``sys.modules["name"]`` is the named module.  A reference is then judged by what it may denote, not
by how it is spelled.

Conventions (shared with the scorer and the runtime findings):

* ``Finding.function`` names the *unit* the code belongs to: a top-level function, or a method
  of a top-level class by its bare name (``forward_ulysses``, as rubric items and policy keys name
  it).  Nested functions and classes belong to their enclosing unit, code in a class body outside
  methods to the class's name, module-level code to ``None``.  Internally, and in the call chains
  messages print, methods stay qualified (``BasicTransformerBlock.forward_ulysses``) so two
  classes' ``forward`` are not confused, and a policy key may use that form: ``file::Class.method``
  is tried first, then ``file::method``.
* ``Finding.line`` is 1-based and ``Finding.col`` 0-based (as ``ast`` reports them); the text
  report prints ``col + 1`` as compilers do.
* An alias (``f = dist.all_reduce`` or an import) is not a use; every use through it is, also in
  another student file that imports it (:func:`analyze_submission` analyses the files together).
  A student file is the module its rubric path names (``src/collectives.py`` is ``src.collectives``,
  ``lib/x.py`` is ``lib.x``), imported relatively, from the top, or by its last name alone.
* Collectives a function's policy allows stay allowed in helpers that only it calls, so factoring a
  permitted ``all_gather`` into a helper does not turn it into a violation.
* The grader is importable where student code runs, so every mention of it (an import, a name or
  attribute that is one of its modules, its name given to the import machinery) is a
  ``grader-internals`` finding, and no policy lifts it.  Like every rule it counts against the unit
  it is in and every function that calls that unit; a mention in module or class-level code also
  counts against every function and method of the file, which that code runs before.  Under
  ``on_violation: zero`` each of those functions' items scores 0.

The package, in the order a file goes through it: :mod:`.rules` (rule ids, reasons, the tables of
what is forbidden, the classification of dotted names), :mod:`.collect` (the AST pass: scopes,
definitions, bindings, references), :mod:`.resolve` (the fixed point over the bindings, and names
linked across student files) and :mod:`.judge` (findings under a policy, taint through calls, the
entry points re-exported here).
"""

from grader.runtimes.torchdist.static.judge import analyze_files, analyze_source, analyze_submission, reached_apis
from grader.runtimes.torchdist.static.rules import (
    ANALYSIS_ERROR,
    DYNAMIC_DIST_ACCESS,
    FORBIDDEN_COLLECTIVE,
    FORBIDDEN_MODULE,
    GRADER_INTERNALS,
    GUARD_TAMPERING,
    POLICY_RULES,
    PROCESS_GROUP_METHOD,
    REASONS,
    STORE_ACCESS,
    SYNTAX_ERROR,
)

__all__ = [
    "ANALYSIS_ERROR",
    "DYNAMIC_DIST_ACCESS",
    "FORBIDDEN_COLLECTIVE",
    "FORBIDDEN_MODULE",
    "GRADER_INTERNALS",
    "GUARD_TAMPERING",
    "POLICY_RULES",
    "PROCESS_GROUP_METHOD",
    "REASONS",
    "STORE_ACCESS",
    "SYNTAX_ERROR",
    "analyze_files",
    "analyze_source",
    "analyze_submission",
    "reached_apis",
]
