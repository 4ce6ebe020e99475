"""Static policy analysis: which ``torch.distributed`` APIs each student function reaches.

Only the AST is read; student code is never imported or run, and torch is not imported here, so
``grader check`` is fast and runs anywhere.  The runtime guard (``grader.sandbox.guard``) is the
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
* Collectives a function's policy allows stay allowed in helpers that only it calls, so factoring a
  permitted ``all_gather`` into a helper does not turn it into a violation.
* The grader is importable where student code runs, so every mention of it (an import, a name or
  attribute that is one of its modules, its name given to the import machinery) is a
  ``grader-internals`` finding, and no policy lifts it.  Like every rule it counts against the unit
  it is in and every function that calls that unit; a mention in module or class-level code also
  counts against every function and method of the file, which that code runs before.  Under
  ``on_violation: zero`` each of those functions' items scores 0.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.policy import COLLECTIVES, FORBIDDEN_MODULES, PROCESS_GROUP_METHODS, FunctionPolicy, Policy
from grader.results import Finding

# Rule ids, as they appear in Finding.rule.
FORBIDDEN_COLLECTIVE = "forbidden-collective"
FORBIDDEN_MODULE = "forbidden-module"
PROCESS_GROUP_METHOD = "process-group-method"
DYNAMIC_DIST_ACCESS = "dynamic-dist-access"
GUARD_TAMPERING = "guard-tampering"
STORE_ACCESS = "store-access"
GRADER_INTERNALS = "grader-internals"
SYNTAX_ERROR = "syntax-error"
ANALYSIS_ERROR = "analysis-error"  # the file parses but is too deep or too convoluted to analyse

#: The rules a function's policy can lift; every other rule is a finding wherever it occurs.
POLICY_RULES = frozenset({FORBIDDEN_COLLECTIVE, PROCESS_GROUP_METHOD})

#: Why each rule exists, as the student reads it after "X is not allowed".
REASONS = {
    FORBIDDEN_COLLECTIVE: "it is a built-in collective; communicate with send/recv/isend/irecv",
    PROCESS_GROUP_METHOD: "it runs a collective on the process group; use send/recv/isend/irecv",
    FORBIDDEN_MODULE: "it runs collectives under the hood",
    DYNAMIC_DIST_ACCESS: "dynamic access to torch.distributed or code execution cannot be checked",
    GUARD_TAMPERING: "it can unwrap or patch the grader's runtime guard",
    STORE_ACCESS: "the rendezvous store must not carry data; use send/recv",
    GRADER_INTERNALS: "student code must not import, reach into or use the grader",
}

_DIST = "torch.distributed"
GRADER = "grader"  # our own package: importable in the rank processes, never the student's to touch
PG = "<pg>"  # the value of a process group (or anything obtained from one)
#: Other spellings of the same module, and the name each is known by here.
_CANONICAL_PREFIXES = (
    ("torch.distributed.distributed_c10d", _DIST),
    ("torch._C._distributed_c10d", _DIST),
    ("torch._ops.ops", "torch.ops"),
)
#: Names that *are* process groups (or hold them); attributes of ``_world`` lead to groups.
_PG_ROOTS = (
    "torch.distributed.group.WORLD",
    "torch.distributed.GroupMember.WORLD",
    "torch.distributed._world",
)
#: Calls that return a process group.
_PG_FACTORIES = frozenset(
    f"{_DIST}.{name}"
    for name in (
        "new_group",
        "new_subgroups",
        "new_subgroups_by_enumeration",
        "split_group",
        "shrink_group",
        "_get_default_group",
        "_resolve_process_group",
        "_new_group_with_tag",
        "ProcessGroup",
        "ProcessGroupGloo",
        "_current_process_group",
        "_group_or_default_group",
        "_find_pg_by_ranks_and_tag",
        "_find_or_create_pg_by_ranks_and_tag",
        "_create_shrunk_process_group",
        "_finalize_shrunk_group",
    )
)
_PG_CLASSES = frozenset({"ProcessGroup", "ProcessGroupGloo", "Backend", "_ProcessGroupWrapper"})
_STORE_NAMES = frozenset(
    {
        "Store",
        "FileStore",
        "TCPStore",
        "HashStore",
        "PrefixStore",
        "_get_default_store",
        "_get_process_group_store",
        "_store_based_barrier",
        "_StoreCollectives",
        "_create_store_from_options",
        "rendezvous",
    }
)
#: Dispatcher op namespaces that run collectives without going through ``torch.distributed``
#: (static-only: they are not importable modules, so the runtime list cannot hold them).
_FORBIDDEN_OP_NAMESPACES = (
    "torch.ops.c10d",
    "torch.ops.c10d_functional",
    "torch.ops._c10d_functional",
    "torch.ops._c10d_functional_autograd",
    "torch.ops._dtensor",
    "torch.ops.symm_mem",
)
#: Private c10d bindings that communicate without being collectives by name (DDP's bucketed
#: all-reduce, a parameter check that all-gathers); static-only, like the op namespaces.
_COMMUNICATING_BINDINGS = tuple(
    f"{_DIST}.{name}"
    for name in ("Reducer", "_verify_params_across_processes", "_register_comm_hook", "_register_builtin_comm_hook")
)
_FORBIDDEN_PREFIXES = (*FORBIDDEN_MODULES, *_FORBIDDEN_OP_NAMESPACES, *_COMMUNICATING_BINDINGS)
#: Calls that fetch a dispatcher op by its ``"namespace::name"`` string, as ``torch.ops`` would.
_OP_LOOKUPS = frozenset(
    {
        "torch._C._jit_get_operation",
        "torch._C._get_operation_overload",
        "torch._C._dispatch_find_schema_or_throw",
        "torch._ops._OpNamespace",
        "torch._library.utils.lookup_op",
    }
)
_DYNAMIC_APIS = frozenset(
    {"builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__", "builtins.__builtins__"}
)
_DYNAMIC_PREFIXES = ("importlib.", "sys.modules")
_TAMPER_ATTRS = frozenset({"__closure__", "__wrapped__", "__globals__", "__code__", "f_globals", "f_locals"})
_TAMPER_APIS = frozenset(
    {
        "gc.get_referents",
        "gc.get_referrers",
        "gc.get_objects",
        "inspect.unwrap",
        "inspect.getclosurevars",
        "inspect.currentframe",
        "inspect.stack",
        "sys._getframe",
    }
)
_NAMESPACE_ATTRS = frozenset({"__dict__", "__getattribute__", "__getattr__"})
#: Objects a non-constant ``getattr`` (or ``vars``) on could reach torch.distributed or exec.
_SENSITIVE_ROOTS = (
    "torch.distributed",
    "torch._C",
    "torch.ops",
    "builtins",
    "importlib",
    "sys",
    "gc",
    "ctypes",
)
#: The only roots a dotted value can have and still matter to a rule; others are not followed, so
#: ``x = x.attr`` on an ordinary object cannot grow a value set attribute by attribute.
_TRACKED_ROOTS = frozenset(
    {"torch", "builtins", "importlib", "sys", "gc", "inspect", "ctypes", GRADER, "runpy", "pkgutil"}
)
#: What loads modules by name: a constant naming a grader module given to one of these is a finding.
_IMPORT_MACHINERY = ("importlib", "runpy", "pkgutil", "builtins.__import__", "sys.modules")
#: Containers are resolved to what they hold (``[dist]`` may be what ``dist`` is), so these builtins
#: return what their arguments hold, these methods (and ``copy``) what their container holds, and
#: these methods put what they are given into it.
_ELEMENT_BUILTINS = frozenset(
    f"builtins.{name}"
    for name in ("list", "tuple", "set", "frozenset", "dict", "iter", "next", "reversed", "sorted", "min", "max")
)
_GETTING_METHODS = frozenset({"get", "pop", "popitem", "popleft", "setdefault", "values", "items", "__getitem__"})
_STORING_METHODS = frozenset({"append", "appendleft", "extend", "extendleft", "insert", "add", "update", "setdefault"})
_MAX_DOTS = 8  # longer dotted values are dropped: keeps self-referential bindings finite
_MAX_VALUES = 2000  # a binding that may denote more things than this is not analysed, but reported
_MAX_ROUNDS = 40

_RETURN = "<return>"  # the pseudo-name a function's return values are bound to in its own scope
#: Other student files' module-level names and what they may be: ``{"collectives": {"ar": {...}}}``.
_Exports = Mapping[str, Mapping[str, set[str]]]
_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
_Key = tuple[str, str]  # (rule, api)


# ----------------------------------------------------------------------------- values


def _canonical(name: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if _under(name, prefix):
            name = replacement + name[len(prefix) :]
    for root in _PG_ROOTS:
        if name == root:
            return PG
        if name.startswith(root + "."):
            return PG + name[len(root) :]
    return name


def _under(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def _sensitive(value: str) -> bool:
    """Whether a non-constant attribute lookup on ``value`` could reach dist or code execution."""
    return value == "torch" or _under(value, PG) or any(_under(value, root) for root in _SENSITIVE_ROOTS)


def _classify(value: str) -> _Key | None:
    """The (rule, api) a reference to ``value`` violates, if any."""
    if value.startswith(PG + "."):
        member = value[len(PG) + 1 :]
        if member in PROCESS_GROUP_METHODS:
            return PROCESS_GROUP_METHOD, member
        return (DYNAMIC_DIST_ACCESS, "ProcessGroup." + member) if member in _NAMESPACE_ATTRS else None
    if value.startswith("<"):
        return None
    if _under(value, GRADER):
        return GRADER_INTERNALS, value
    if _is_forbidden_module(value):
        return FORBIDDEN_MODULE, value
    head, _, last = value.rpartition(".")
    if last in _NAMESPACE_ATTRS and _sensitive(head):
        return DYNAMIC_DIST_ACCESS, value
    if value.startswith(_DIST + "."):
        rest = value[len(_DIST) + 1 :]
        if rest in COLLECTIVES:
            return FORBIDDEN_COLLECTIVE, rest
        if rest.split(".")[0] in _STORE_NAMES:
            return STORE_ACCESS, rest
        owner, _, method = rest.partition(".")
        if owner in _PG_CLASSES and method in PROCESS_GROUP_METHODS:
            return PROCESS_GROUP_METHOD, method
    if value in _DYNAMIC_APIS or any(value.startswith(prefix) for prefix in _DYNAMIC_PREFIXES):
        return DYNAMIC_DIST_ACCESS, value.removeprefix("builtins.")
    if value in _TAMPER_APIS or value.startswith("ctypes."):
        return GUARD_TAMPERING, value
    return None


def _tracked(value: str) -> bool:
    if value.startswith("<"):  # a marker (process group, own function...): never grows
        return True
    root, depth = value.split(".")[0], value.count(".")
    # What matters under builtins and sys is one or two names deep (builtins.exec, sys.modules.get).
    return root in _TRACKED_ROOTS and depth <= (2 if root in ("builtins", "sys") else _MAX_DOTS)


def _is_forbidden_module(value: str) -> bool:
    return any(_under(value, module) for module in _FORBIDDEN_PREFIXES)


def _describe(value: str) -> str:
    return "ProcessGroup" + value[len(PG) :] if value.startswith(PG) else value


def _const_str(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _getattr_name(call: ast.Call) -> str | None:
    """The constant attribute name of a two- or three-argument ``getattr`` call spelled as such."""
    return _const_str(call.args[1]) if len(call.args) >= 2 else None


# ----------------------------------------------------------------------------- collection


@dataclass(eq=False)
class _Scope:
    kind: str  # "module" | "class" | "function" | "comprehension"
    parent: _Scope | None
    unit: str | None
    method_of: int | None = None  # for a method's own scope: the index of its class
    bound: set[str] = field(default_factory=set)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    star_modules: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Def:
    node: _FunctionNode
    scope: _Scope
    unit: str | None
    params: list[str]  # positional parameters, in order
    keywords: set[str]  # every parameter that may be passed by keyword
    is_method: bool
    returns: list[ast.expr] = field(default_factory=list)


@dataclass(eq=False)
class _Class:
    node: ast.ClassDef
    scope: _Scope
    outer: _Scope
    methods: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Ref:
    node: ast.AST
    scope: _Scope
    unit: str | None


@dataclass(frozen=True)
class _Use:
    """One reference that violates a rule unless the unit's policy lifts it."""

    key: _Key
    node: ast.AST
    unit: str | None
    message: str


class _Collector(ast.NodeVisitor):
    """Builds scopes and binding equations, and records, in source order, every node to judge."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = _Scope("module", None, None)
        self.scope = self.module
        self.unit: str | None = None
        self.defs: list[_Def] = []
        self.classes: list[_Class] = []
        self.units: dict[str | None, str] = {None: "module"}  # unit -> "module" | "class" | "function"
        self.const: list[tuple[_Scope, str, frozenset[str]]] = []
        self.binds: list[tuple[_Scope, str, ast.expr, _Scope]] = []
        self.attr_binds: list[tuple[ast.expr, str, ast.expr, _Scope]] = []
        self.item_binds: list[tuple[ast.expr, str, ast.expr, _Scope]] = []  # container, method, what it is given
        self.calls: list[tuple[ast.Call, _Scope]] = []
        self.refs: list[_Ref] = []
        self.exempt: set[int] = set()  # ids of alias right-hand sides: a definition is not a use
        self.subscripted: dict[int, ast.Subscript] = {}  # globals()/locals() call id -> its subscript
        self.def_stack: list[_Def] = []
        self.lambdas: dict[int, int] = {}  # id of a Lambda node -> its index in defs
        self.visit(tree)

    # -- scopes and bindings

    def _mark(self, scope: _Scope, name: str) -> None:
        if name in scope.globals_:
            self.module.bound.add(name)
        elif name not in scope.nonlocals:
            scope.bound.add(name)

    def _bind_const(self, name: str, value: str) -> None:
        self._mark(self.scope, name)
        self.const.append((self.scope, name, frozenset({value})))

    def _bind(self, target: ast.expr, value: ast.expr, *, alias: bool) -> None:
        """Bind ``target = value``; ``alias`` marks a plain ``name = chain`` as a non-use."""
        if isinstance(target, ast.Name):
            self._mark(self.scope, target.id)
            self.binds.append((self.scope, target.id, value, self.scope))
            if alias and self.scope.kind in ("module", "function") and _is_chain(value):
                self.exempt.add(id(value))
        elif isinstance(target, ast.Tuple | ast.List):
            pairwise = (
                isinstance(value, ast.Tuple | ast.List)
                and len(value.elts) == len(target.elts)
                and not any(isinstance(e, ast.Starred) for e in (*value.elts, *target.elts))
            )
            for index, element in enumerate(target.elts):
                if pairwise:
                    assert isinstance(value, ast.Tuple | ast.List)
                    self._bind(element, value.elts[index], alias=alias)
                else:
                    self._bind(element, value, alias=False)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, value, alias=False)
        elif isinstance(target, ast.Attribute):
            self.attr_binds.append((target.value, target.attr, value, self.scope))
        elif isinstance(target, ast.Subscript):
            self.item_binds.append((target.value, "__setitem__", value, self.scope))

    def _enter(self, kind: str, unit: str | None, method_of: int | None = None) -> _Scope:
        previous = self.scope
        self.scope = _Scope(kind, previous, unit, method_of)
        self.unit = unit
        return previous

    def _leave(self, previous: _Scope) -> None:
        self.scope, self.unit = previous, previous.unit

    def _visit_in_unit(self, nodes: Iterable[ast.AST | None], unit: str | None) -> None:
        """Visit expressions evaluated in the current scope but belonging to ``unit`` (defaults...)."""
        saved, self.unit = self.unit, unit
        for node in nodes:
            if node is not None:
                self.visit(node)
        self.unit = saved

    # -- definitions

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_function(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_function(node)

    def _visit_function(self, node: _FunctionNode) -> None:
        outer = self.scope
        owner = self._class_of(outer)
        if isinstance(node, ast.Lambda):
            unit = self.unit
        elif outer is self.module:
            unit = node.name
        elif owner is not None and outer.parent is self.module:
            unit = f"{owner.node.name}.{node.name}"
        else:
            unit = self.unit
        if unit not in self.units:
            self.units[unit] = "function"
        is_method = (
            owner is not None
            and not isinstance(node, ast.Lambda)
            and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        )
        args = node.args
        extras = [
            *(a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)),
            *(a.annotation for a in (args.vararg, args.kwarg) if a is not None),
        ]
        if not isinstance(node, ast.Lambda):
            extras += [*node.decorator_list, node.returns]
        self._visit_in_unit([*args.defaults, *args.kw_defaults, *extras], unit)

        index = len(self.defs)
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        keywords = {a.arg for a in (*args.args, *args.kwonlyargs)}
        definition = _Def(node, outer, unit, positional, keywords, is_method)
        self.defs.append(definition)
        if isinstance(node, ast.Lambda):
            self.lambdas[id(node)] = index
        else:
            self._bind_const(node.name, f"<def>{index}")
            if owner is not None and outer is owner.scope:
                owner.methods[node.name] = index

        previous = self._enter("function", unit, self.classes.index(owner) if is_method and owner else None)
        definition.scope = self.scope
        every = [*positional, *(a.arg for a in args.kwonlyargs)]
        every += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        for name in every:
            self._mark(self.scope, name)
        if is_method and positional and owner is not None:
            self.const.append((self.scope, positional[0], frozenset({f"<self>{self.classes.index(owner)}"})))
        defaults = [*args.posonlyargs, *args.args][len(positional) - len(args.defaults) :]
        for param, default in zip(defaults, args.defaults, strict=True):
            self.binds.append((self.scope, param.arg, default, outer))
        for kwparam, kwdefault in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if kwdefault is not None:
                self.binds.append((self.scope, kwparam.arg, kwdefault, outer))

        self.def_stack.append(definition)
        if isinstance(node, ast.Lambda):
            definition.returns.append(node.body)
            self.visit(node.body)
        else:
            for statement in node.body:
                self.visit(statement)
        self.def_stack.pop()
        self._leave(previous)

    def _class_of(self, scope: _Scope) -> _Class | None:
        return next((c for c in self.classes if c.scope is scope), None)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        unit = node.name if self.scope is self.module else self.unit
        if unit not in self.units:
            self.units[unit] = "class"
        self._visit_in_unit([*node.decorator_list, *node.bases, *node.keywords], self.unit)
        index = len(self.classes)
        self._bind_const(node.name, f"<class>{index}")
        outer = self.scope
        previous = self._enter("class", unit)
        self.classes.append(_Class(node, self.scope, outer))
        for statement in node.body:
            self.visit(statement)
        self._leave(previous)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and self.def_stack:
            self.def_stack[-1].returns.append(node.value)
        self.generic_visit(node)

    def _visit_comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, results: list[ast.expr]
    ) -> None:
        self.visit(node.generators[0].iter)
        previous = self._enter("comprehension", self.unit)
        for position, generator in enumerate(node.generators):
            if position:
                self.visit(generator.iter)
            iter_scope = previous if position == 0 else self.scope
            for name in _names(generator.target):
                self._mark(self.scope, name)
                self.binds.append((self.scope, name, generator.iter, iter_scope))
            for condition in generator.ifs:
                self.visit(condition)
        for result in results:
            self.visit(result)
        self._leave(previous)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._visit_comprehension(node, [node.elt])

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._visit_comprehension(node, [node.elt])

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self._visit_comprehension(node, [node.elt])

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._visit_comprehension(node, [node.key, node.value])

    # -- statements that bind

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._bind(target, node.value, alias=True)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value, alias=True)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._bind(node.target, node.value, alias=False)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        scope = self.scope
        while scope.kind == "comprehension" and scope.parent is not None:
            scope = scope.parent
        self._mark(scope, node.target.id)
        self.binds.append((scope, node.target.id, node.value, self.scope))
        if scope.kind in ("module", "function") and _is_chain(node.value):
            self.exempt.add(id(node.value))
        self.visit(node.value)

    def visit_For(self, node: ast.For) -> None:
        self._bind(node.target, node.iter, alias=False)
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._bind(node.target, node.iter, alias=False)
        self.generic_visit(node)

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._bind(node.optional_vars, node.context_expr, alias=False)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.globals_.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.nonlocals.update(node.names)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._mark(self.scope, node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self._mark(self.scope, node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._mark(self.scope, node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self._mark(self.scope, node.rest)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self._bind_const(alias.asname, _canonical(alias.name))
            else:
                top = alias.name.split(".")[0]
                self._bind_const(top, top)
        self.refs.append(_Ref(node, self.scope, self.unit))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.module.star_modules.append(_canonical(module))
            else:
                joined = f"{module}.{alias.name}" if node.module else module + alias.name
                self._bind_const(alias.asname or alias.name, _canonical(joined))
        self.refs.append(_Ref(node, self.scope, self.unit))

    # -- expressions to judge

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self._mark(self.scope, node.id)
        self.refs.append(_Ref(node, self.scope, self.unit))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.refs.append(_Ref(node, self.scope, self.unit))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.refs.append(_Ref(node, self.scope, self.unit))
        self.calls.append((node, self.scope))
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STORING_METHODS:
            for arg in (*node.args, *(keyword.value for keyword in node.keywords)):
                self.item_binds.append((node.func.value, node.func.attr, arg, self.scope))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.refs.append(_Ref(node, self.scope, self.unit))
        if isinstance(node.value, ast.Call) and isinstance(node.ctx, ast.Load):
            self.subscripted[id(node.value)] = node
        self.generic_visit(node)


def _names(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _is_chain(node: ast.expr) -> bool:
    """A bare name, attribute chain or constant ``getattr``: what an alias assignment looks like."""
    if isinstance(node, ast.Name | ast.Attribute):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and _getattr_name(node) is not None
    )


# ----------------------------------------------------------------------------- resolution


class _TooComplex(Exception):
    """The file defeats the analysis (deliberately or not); reported instead of guessed at."""


class _Resolver:
    """Solves the binding equations by fixed point, then answers 'what may this expression be'."""

    def __init__(self, collected: _Collector, exports: _Exports | None = None) -> None:
        self.c = collected
        self.exports = exports or {}
        self.env: dict[tuple[_Scope, str], set[str]] = defaultdict(set)
        for scope, name, values in collected.const:
            self.env[self._target(scope, name), name].update(values)
        for _ in range(_MAX_ROUNDS):
            if not self._round():
                break

    def _round(self) -> bool:
        changed = False
        for scope, name, expr, expr_scope in self.c.binds:
            changed |= self._add(self._target(scope, name), name, self.resolve(expr, expr_scope))
        for obj, attr, expr, expr_scope in self.c.attr_binds:
            changed |= self._store_attribute(obj, attr, self.resolve(expr, expr_scope), expr_scope)
        for container, method, expr, expr_scope in self.c.item_binds:
            changed |= self._store_item(container, method, self.resolve(expr, expr_scope), expr_scope)
        for definition in self.c.defs:  # what a call returns is one more equation, not a recursion
            for ret in definition.returns:
                changed |= self._add(definition.scope, _RETURN, self.resolve(ret, definition.scope))
        for call, scope in self.c.calls:
            changed |= self._bind_arguments(call, scope)
        return changed

    def _add(self, scope: _Scope, name: str, values: Iterable[str]) -> bool:
        current = self.env[scope, name]
        before = len(current)
        current.update(values)
        if len(current) > _MAX_VALUES:
            raise _TooComplex(f"{name!r} may denote more than {_MAX_VALUES} different things")
        return len(current) != before

    def _store_attribute(self, obj: ast.expr, attr: str, values: set[str], scope: _Scope) -> bool:
        """``obj.attr = value``: followed where ``obj`` is an instance of a class of this file."""
        changed = False
        for owner in self.resolve(obj, scope):
            if owner.startswith("<self>"):
                changed |= self._add(self.c.classes[int(owner[6:])].scope, "." + attr, values)
        return changed

    def _store_item(self, container: ast.expr, method: str, values: set[str], scope: _Scope) -> bool:
        """``c[k] = value`` or ``c.append(value)``: the container now also holds what ``value`` is,
        unless it is an object of a class of this file with that method (its parameters receive it)."""
        for owner in self.resolve(container, scope):
            if owner.startswith("<self>") and self.method(int(owner[6:]), method) is not None:
                return False
        while isinstance(container, ast.Subscript):
            container = container.value
        if isinstance(container, ast.Attribute):
            return self._store_attribute(container.value, container.attr, values, scope)
        if isinstance(container, ast.Name) and (where := self._binding(container.id, scope)) is not None:
            return self._add(where, container.id, values)
        return False

    def _target(self, scope: _Scope, name: str) -> _Scope:
        """The scope a binding of ``name`` in ``scope`` really lands in (global/nonlocal)."""
        if name in scope.globals_:
            return self.c.module
        if name in scope.nonlocals:
            outer = scope.parent
            while outer is not None and (outer.kind == "class" or name not in outer.bound):
                outer = outer.parent
            return outer or self.c.module
        return scope

    def _bind_arguments(self, call: ast.Call, scope: _Scope) -> bool:
        """Feed argument values into the parameters of the file's own functions it may call."""
        changed = False
        for callee in self.resolve(call.func, scope):
            if callee.startswith("<class>"):
                init = self.method(int(callee[7:]), "__init__")
                targets = [] if init is None else [(self.c.defs[init], 1)]
            elif callee.startswith(("<def>", "<bound>")):
                definition = self.c.defs[int(callee.split(">")[1])]
                targets = [(definition, 1 if callee.startswith("<bound>") and definition.is_method else 0)]
            else:
                continue
            for definition, skip in targets:
                for position, arg in enumerate(call.args):
                    if isinstance(arg, ast.Starred) or position + skip >= len(definition.params):
                        break
                    param = definition.params[position + skip]
                    changed |= self._add(definition.scope, param, self.resolve(arg, scope))
                for keyword in call.keywords:
                    if keyword.arg in definition.keywords:
                        changed |= self._add(definition.scope, keyword.arg, self.resolve(keyword.value, scope))
        return changed

    def bases(self, class_index: int) -> list[int]:
        """The classes of this file that a class names as its bases."""
        cls = self.c.classes[class_index]
        values = sorted(v for base in cls.node.bases for v in self.resolve(base, cls.outer))
        return [int(v[7:]) for v in values if v.startswith("<class>")]

    def method(self, class_index: int, name: str, seen: frozenset[int] = frozenset()) -> int | None:
        """The def index of ``name`` on a class of this file, following bases defined here."""
        if name in self.c.classes[class_index].methods:
            return self.c.classes[class_index].methods[name]
        for base in self.bases(class_index):
            if base not in seen | {class_index}:
                found = self.method(base, name, seen | {class_index})
                if found is not None:
                    return found
        return None

    def _binding(self, name: str, scope: _Scope) -> _Scope | None:
        """The scope whose ``name`` a reference in ``scope`` reads (None: a builtin or star import)."""
        current: _Scope | None = self.c.module if name in scope.globals_ else scope
        first = True
        while current is not None:
            if (first or current.kind != "class") and name in current.bound:
                return current
            current, first = current.parent, False
        return None

    def lookup(self, name: str, scope: _Scope) -> set[str]:
        where = self._binding(name, scope)
        if where is not None:
            return self._linked(self.env.get((where, name), set()))
        return {f"builtins.{name}", *(f"{module}.{name}" for module in self.c.module.star_modules)}

    def _sibling(self, value: str) -> tuple[str, list[str]] | None:
        """``(module, names)`` when ``value`` is in another student file (``.collectives.x``, ``src.collectives``)."""
        parts = value.lstrip(".").split(".")
        parts = parts[1:] if parts[0] == "src" else parts
        return (parts[0], parts[1:]) if parts and parts[0] in self.exports else None

    def _linked(self, values: set[str]) -> set[str]:
        """Replace names imported from another student file by what they are there."""
        if not self.exports:
            return values
        linked = set()
        for value in values:
            sibling = self._sibling(value)
            if sibling is None or not sibling[1]:
                linked.add(value)
            else:
                module, (name, *attrs) = sibling
                found = set(self.exports[module].get(name, set()))
                for attr in attrs:
                    found = {v for base in found for v in self.attribute(base, attr)}
                linked |= found
        return linked

    def attribute(self, value: str, attr: str) -> set[str]:
        if self._sibling(f"{value}.{attr}") is not None:
            return self._linked({f"{value}.{attr}"})
        if _under(value, PG):
            return {f"{PG}.{attr}"}
        if value.startswith("<super>"):
            inherited = (self.method(base, attr) for base in self.bases(int(value[7:])))
            return {f"<bound>{index}" for index in inherited if index is not None}
        for prefix, make in (("<self>", "<bound>"), ("<class>", "<def>")):
            if value.startswith(prefix):
                index = int(value[len(prefix) :])
                found = self.method(index, attr)
                scope = self.c.classes[index].scope
                on_class = self.env.get((scope, attr), set())
                if prefix == "<self>":  # a function stored on the class is bound when reached through an instance
                    on_class = {"<bound>" + v[5:] if v.startswith("<def>") else v for v in on_class}
                values = on_class | self.env.get((scope, "." + attr), set())
                return values | ({f"{make}{found}"} if found is not None else set())
        if value.startswith("<"):
            return set()
        joined = _canonical(f"{value}.{attr}")
        return {joined} if _tracked(joined) else set()

    def resolve(self, node: ast.AST, scope: _Scope) -> set[str]:
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope)
        if isinstance(node, ast.Attribute):
            return {v for base in self.resolve(node.value, scope) for v in self.attribute(base, node.attr)}
        if isinstance(node, ast.Call):
            return {v for func in self.resolve(node.func, scope) for v in self._call(func, node, scope)}
        if isinstance(node, ast.Subscript):
            return self._items(self.resolve(node.value, scope), node.slice)
        if isinstance(node, ast.Lambda):
            return {f"<def>{self.c.lambdas[id(node)]}"}
        children: list[ast.expr] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            children = node.elts
        elif isinstance(node, ast.Dict | ast.BoolOp):
            children = node.values
        elif isinstance(node, ast.IfExp):
            children = [node.body, node.orelse]
        elif isinstance(node, ast.NamedExpr | ast.Await | ast.Starred):
            children = [node.value]
        return {v for child in children for v in self.resolve(child, scope)}

    def _call(self, func: str, call: ast.Call, scope: _Scope) -> set[str]:
        """What calling ``func`` may return."""
        if func in _PG_FACTORIES or _under(func, PG):
            return {PG}
        if func.startswith("<class>"):
            return {"<self>" + func[7:]}
        if func.startswith(("<def>", "<bound>")):
            return self.env.get((self.c.defs[int(func.split(">")[1])].scope, _RETURN), set())
        if func == "builtins.getattr" and (name := _getattr_name(call)) is not None:
            return {v for base in self.resolve(call.args[0], scope) for v in self.attribute(base, name)}
        if func == "builtins.super":
            owner = scope
            while owner.parent is not None and owner.method_of is None:
                owner = owner.parent
            return set() if owner.method_of is None else {f"<super>{owner.method_of}"}
        if func in _ELEMENT_BUILTINS:
            held = [*call.args, *(keyword.value for keyword in call.keywords if func == "builtins.dict")]
            return {v for arg in held for v in self.resolve(arg, scope)}
        container, _, method = func.rpartition(".")
        if container not in ("", "builtins"):  # builtins.get is a bare name, not a method
            if method == "copy":
                return {container}
            if method in _GETTING_METHODS:
                return self._items({container}, call.args[0] if call.args else None)
        name = _const_str(call.args[0]) if call.args else None
        if name is None:
            return set()
        if func == "importlib.import_module":
            return {_canonical(name)}
        if func == "builtins.__import__":  # the named module with a fromlist, else its top package
            fromlist = len(call.args) > 3 or any(keyword.arg == "fromlist" for keyword in call.keywords)
            return {_canonical(name) if fromlist else name.split(".")[0]}
        if func in _OP_LOOKUPS:
            return {"torch.ops." + name.replace("::", ".")}
        return set()

    @staticmethod
    def _items(held: Iterable[str], key: ast.expr | None) -> set[str]:
        """What indexing a value that may be any of ``held`` yields (``key``: the index, if known).

        Containers are resolved to what they hold, so an item of one is any of that; ``sys.modules``
        maps a constant module name to the module, any other key to nothing this can follow.
        """
        items = set()
        for value in held:
            if value != "sys.modules":
                items.add(value)
            elif (name := _const_str(key)) is not None and _tracked(module := _canonical(name)):
                items.add(module)
        return items


# ----------------------------------------------------------------------------- judging


class _Analysis:
    def __init__(self, source: str, rel_path: str, policy: Policy, tree: ast.Module, exports: _Exports) -> None:
        self.lines = source.splitlines()
        self.rel_path = rel_path
        self.policy = policy
        self.collected = _Collector(tree)
        self.resolver = _Resolver(self.collected, exports)
        self.uses: list[_Use] = []
        self.edges: dict[str | None, list[tuple[str | None, ast.AST]]] = defaultdict(list)
        self._judge()

    # -- per-node judgement

    def _judge(self) -> None:
        suppressed: dict[int, set[str]] = {}  # chain children whose parent already reported that rule
        for ref in self.collected.refs:
            node = ref.node
            keys = self._keys(ref)
            rules = {key[0] for key, _ in keys}
            reported = [(k, m) for k, m in keys if k[0] not in suppressed.get(id(node), set())]
            for key, message in reported:
                self.uses.append(_Use(key, node, ref.unit, message))
            if isinstance(node, ast.Attribute):
                suppressed[id(node.value)] = rules
            if id(node) not in self.collected.exempt:
                self._record_edges(ref)

    def _keys(self, ref: _Ref) -> list[tuple[_Key, str]]:
        node, scope = ref.node, ref.scope
        resolve = self.resolver.resolve
        found: list[tuple[_Key, str]] = []
        exempt = id(node) in self.collected.exempt
        if isinstance(node, ast.Import | ast.ImportFrom):
            return [(key, f"import {m}") for m in _imported(node) if (key := _import_key(m)) is not None]
        if isinstance(node, ast.Subscript) and "sys.modules" in resolve(node.value, scope):
            return self._grader_modules(node, [node.slice])
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            owners = resolve(node.value, scope)
            if any(_sensitive(v) for v in owners):
                target = f"{_describe(sorted(owners)[0])}.{node.attr}"
                found.append(((GUARD_TAMPERING, target), f"assigning to or deleting {target}"))
        elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            values = resolve(node, scope)
            # An alias is not a use, except of the grader: every mention of it is one.
            found += self._value_keys(node, {v for v in values if _under(v, GRADER)} if exempt else values)
        if isinstance(node, ast.Attribute) and node.attr in _TAMPER_ATTRS:
            found.append(((GUARD_TAMPERING, node.attr), _show(node)))
        if isinstance(node, ast.Call):
            for func in sorted(resolve(node.func, scope)):
                found += self._call_keys(func, node, scope, exempt)
        return found

    def _value_keys(self, node: ast.AST, values: set[str]) -> list[tuple[_Key, str]]:
        found = []
        for value in sorted(values):
            key = _classify(value)
            if key is not None:
                shown, described = _show(node), _describe(value)
                suffix = "" if shown.endswith(described.rpartition(".")[2]) else f" (it is {described})"
                found.append((key, f"{shown}{suffix}"))
        return found

    def _call_keys(self, func: str, call: ast.Call, scope: _Scope, exempt: bool) -> list[tuple[_Key, str]]:
        resolve = self.resolver.resolve
        first = resolve(call.args[0], scope) if call.args else set()
        shown = _show(call)
        if any(_under(func, machinery) for machinery in _IMPORT_MACHINERY):
            return self._grader_modules(call, [*call.args, *(keyword.value for keyword in call.keywords)])
        if func in _OP_LOOKUPS and call.args:
            if _const_str(call.args[0]) is None:
                return [((DYNAMIC_DIST_ACCESS, func), f"{shown} (an operator looked up at run time)")]
            return self._value_keys(call, resolve(call, scope))
        if func == "builtins.getattr" and len(call.args) >= 2:
            name = _getattr_name(call)
            if name is None:
                if any(_sensitive(v) for v in first):
                    return [((DYNAMIC_DIST_ACCESS, "getattr"), f"{shown} (a name looked up at run time)")]
                return []
            found = [] if exempt else self._value_keys(call, resolve(call, scope))
            if name in _TAMPER_ATTRS:
                found.append(((GUARD_TAMPERING, name), shown))
            return found
        if func in ("builtins.setattr", "builtins.delattr") and any(_sensitive(v) for v in first):
            return [((GUARD_TAMPERING, func.removeprefix("builtins.")), shown)]
        if func == "builtins.vars" and call.args:
            if any(_sensitive(v) for v in first):
                return [((DYNAMIC_DIST_ACCESS, "vars"), shown)]
            return []
        if func in ("builtins.globals", "builtins.locals", "builtins.vars") and not self._harmless_lookup(call, scope):
            api = func.removeprefix("builtins.")
            return [((DYNAMIC_DIST_ACCESS, api), shown)]
        return []

    @staticmethod
    def _grader_modules(node: ast.AST, args: Iterable[ast.expr]) -> list[tuple[_Key, str]]:
        """A grader module named to the import machinery (``sys.modules["grader.x"]``, ``runpy``...)."""
        names = [name for arg in args if (name := _const_str(arg)) is not None and _under(name, GRADER)]
        return [((GRADER_INTERNALS, names[0]), _show(node))] if names else []

    def _harmless_lookup(self, call: ast.Call, scope: _Scope) -> bool:
        """``globals()["CONSTANT"]`` naming something that is not torch.distributed is fine."""
        subscript = self.collected.subscripted.get(id(call))
        key = _const_str(subscript.slice) if subscript is not None else None
        if key is None or call.args:
            return False
        where = self.collected.module if _call_name(call) == "globals" else scope
        values = self.resolver.lookup(key, where)
        return not any(_sensitive(v) or _classify(v) for v in values)

    def _record_edges(self, ref: _Ref) -> None:
        node = ref.node
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            values = self.resolver.resolve(node, ref.scope)
        elif isinstance(node, ast.Call):
            values = set()
            for func in self.resolver.resolve(node.func, ref.scope):
                values |= self._implicit_calls(func)
            if "builtins.getattr" in self.resolver.resolve(node.func, ref.scope):
                values |= self.resolver.resolve(node, ref.scope)
        else:
            return
        for value in sorted(values):
            if value.startswith(("<def>", "<bound>")):
                callee = self.collected.defs[int(value.split(">")[1])].unit
                if callee != ref.unit:
                    self.edges[ref.unit].append((callee, node))

    def _implicit_calls(self, func: str) -> set[str]:
        """Methods a call runs without naming them: constructors, and ``__call__``/``forward``."""
        names: tuple[str, ...]
        if func.startswith("<class>"):
            names, index = ("__new__", "__init__", "__post_init__"), int(func[7:])
        elif func.startswith("<self>"):
            names, index = ("__call__", "forward"), int(func[6:])
        else:
            return set()
        found = (self.resolver.method(index, name) for name in names)
        return {f"<def>{i}" for i in found if i is not None}

    # -- policy and taint

    def _function_policy(self, unit: str | None) -> FunctionPolicy:
        if unit is not None and "." in unit and f"{self.rel_path}::{unit}" not in self.policy.functions:
            unit = unit.rpartition(".")[2]
        return self.policy.for_function(self.rel_path, unit)

    def _permitted_units(self, key: _Key, callers: dict[str | None, set[str | None]]) -> set[str | None]:
        """Units allowed ``key``: by their own policy, or because only such units call them."""
        rule, api = key
        if rule not in POLICY_RULES:
            return set()
        allowed = {u for u in self.collected.units if not self._function_policy(u).forbids(api)}
        grew = True
        while grew:
            grew = False
            for unit in self.collected.units:
                if unit not in allowed and callers[unit] and callers[unit] <= allowed:
                    allowed.add(unit)
                    grew = True
        return allowed

    def results(self) -> list[tuple[Finding, str]]:
        """Every finding, each with the api it names (what :func:`reached_apis` reports)."""
        callers: dict[str | None, set[str | None]] = defaultdict(set)
        for unit, edges in self.edges.items():
            for callee, _ in edges:
                callers[callee].add(unit)
        pairs: list[tuple[Finding, str]] = []
        touching: list[tuple[str | None, Finding, str]] = []  # the grader-internals findings, with their units
        for key in sorted({use.key for use in self.uses}):
            allowed = self._permitted_units(key, callers)
            direct = [use for use in self.uses if use.key == key and use.unit not in allowed]
            found = [(u.unit, self._finding(key, u.node, u.unit, f"{u.message} is not allowed")) for u in direct]
            found += self._taint(key, direct, allowed, callers)
            pairs += [(finding, key[1]) for _, finding in found]
            if key[0] == GRADER_INTERNALS:
                touching += [(unit, finding, key[1]) for unit, finding in found]
        pairs += self._at_import(touching)
        pairs.sort(key=lambda pair: (pair[0].line, pair[0].col, pair[0].rule, pair[0].message))
        return pairs

    def _at_import(self, touching: list[tuple[str | None, Finding, str]]) -> list[tuple[Finding, str]]:
        """Module and class bodies run when the file is imported, before any function in it is graded,
        so the first of them to touch the grader counts against every function and method of the file."""
        kinds = self.collected.units
        early = [(finding, api) for unit, finding, api in touching if kinds[unit] != "function"]
        if not early:
            return []
        first, api = min(early, key=lambda pair: (pair[0].line, pair[0].col))
        before = "this top-level code runs when the file is imported, before"
        reported = {unit for unit, _, _ in touching}
        return [
            (dataclasses.replace(first, function=name, message=f"{before} {name}: {first.message}"), api)
            for unit, kind in kinds.items()
            if kind == "function" and unit not in reported and (name := _public(unit)) is not None
        ]

    def _taint(
        self, key: _Key, direct: list[_Use], allowed: set[str | None], callers: dict[str | None, set[str | None]]
    ) -> list[tuple[str | None, Finding]]:
        """A finding at the first call from each unit to each callee that leads to a direct use."""
        # Walk back from the direct uses: next_hop[u] is the callee through which u reaches one.
        first_use: dict[str | None, _Use] = {}
        for use in direct:
            first_use.setdefault(use.unit, use)
        next_hop: dict[str | None, str | None] = {}
        queue = deque(first_use)
        while queue:
            reached = queue.popleft()
            for caller in sorted(callers[reached], key=str):
                if caller not in allowed and caller not in first_use and caller not in next_hop:
                    next_hop[caller] = reached
                    queue.append(caller)
        found = []
        for unit, edges in self.edges.items():
            if unit in allowed:
                continue
            seen: set[str | None] = set()
            for callee, node in edges:
                if callee in seen or (callee not in first_use and callee not in next_hop):
                    continue
                seen.add(callee)
                chain = [unit, callee]
                while chain[-1] not in first_use:
                    chain.append(next_hop[chain[-1]])
                path = " -> ".join("<module>" if u is None else u for u in chain)  # qualified: unambiguous
                message = f"this call leads to a forbidden API: {path} -> {first_use[chain[-1]].message}"
                found.append((unit, self._finding(key, node, unit, message)))
        return found

    def _finding(self, key: _Key, node: ast.AST, unit: str | None, message: str) -> Finding:
        line = getattr(node, "lineno", 1)
        source = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return Finding(
            rule=key[0],
            message=f"{message} ({REASONS[key[0]]})",
            file=self.rel_path,
            line=line,
            col=getattr(node, "col_offset", 0),
            function=_public(unit),
            source=source,
        )


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import statement names; ``from M import *`` and an import from a module a rule
    forbids as a whole name that module, once."""
    if isinstance(node, ast.Import):
        return [_canonical(alias.name) for alias in node.names]
    if node.level or node.module is None:
        return []
    module = _canonical(node.module)
    if _import_key(module) is not None or any(a.name == "*" for a in node.names):
        return [module]
    return [_canonical(f"{node.module}.{a.name}") for a in node.names]


def _import_key(module: str) -> _Key | None:
    """The rule importing ``module`` breaks (a forbidden module, the grader); other imports are aliases."""
    key = _classify(module)
    return key if key is not None and key[0] in (FORBIDDEN_MODULE, GRADER_INTERNALS) else None


def _call_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else ""


def _show(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _public(unit: str | None) -> str | None:
    """A unit as findings name it: methods by their bare name (see the module docstring)."""
    return None if unit is None else unit.rpartition(".")[2]


# ----------------------------------------------------------------------------- entry points


def _run(
    source: str, rel_path: str, policy: Policy, exports: _Exports | None = None
) -> tuple[list[tuple[Finding, str]], dict[str | None, str]]:
    try:
        tree = ast.parse(source, filename=rel_path)
    except SyntaxError as exc:
        line = exc.lineno or 1
        finding = Finding(
            rule=SYNTAX_ERROR,
            message=exc.msg,
            file=rel_path,
            line=line,
            col=max((exc.offset or 1) - 1, 0),
            source=(exc.text or "").strip(),
        )
        return [(finding, "")], {}
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting the parser refuses
        return [(Finding(SYNTAX_ERROR, f"the file cannot be parsed: {exc}", rel_path, 1), "")], {}
    try:
        analysis = _Analysis(source, rel_path, policy, tree, exports or {})
        return analysis.results(), analysis.collected.units
    except RecursionError:
        message = "the file is nested too deeply to be checked; simplify the deepest expression"
        return [(Finding(ANALYSIS_ERROR, message, rel_path, 1), "")], {}
    except _TooComplex as exc:
        return [(Finding(ANALYSIS_ERROR, f"the file is too convoluted to be checked: {exc}", rel_path, 1), "")], {}


def analyze_source(source: str, rel_path: str, policy: Policy) -> list[Finding]:
    """Findings for one file on its own, sorted by position.  Never raises on bad student code."""
    return [finding for finding, _ in _run(source, rel_path, policy)[0]]


def analyze_submission(root: Path, files: Iterable[str], policy: Policy) -> list[Finding]:
    """Findings for the named files under ``root`` (paths relative to it); missing files are skipped.

    The files are analysed together: a name one imports from another (``from .collectives import
    ar``) is judged by what it is there, so an alias cannot launder a collective across files.
    """
    return _check_files({rel: Path(root) / rel for rel in files if (Path(root) / rel).is_file()}, policy)


def _check_files(paths: Mapping[str, Path], policy: Policy) -> list[Finding]:
    sources: dict[str, str | Finding] = {}
    for rel_path, path in paths.items():
        try:
            sources[rel_path] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            sources[rel_path] = Finding(SYNTAX_ERROR, f"the file is not UTF-8 text: {exc.reason}", rel_path, 1)
    exports = {Path(rel).stem: _module_exports(text) for rel, text in sources.items() if isinstance(text, str)}
    findings: list[Finding] = []
    for rel_path, text in sources.items():
        if isinstance(text, Finding):
            findings.append(text)
            continue
        others = {stem: names for stem, names in exports.items() if stem != Path(rel_path).stem}
        findings += [finding for finding, _ in _run(text, rel_path, policy, others)[0]]
    return findings


def _module_exports(source: str) -> dict[str, set[str]]:
    """A file's module-level names and the dotted names / process groups they may be."""
    try:
        resolver = _Resolver(_Collector(ast.parse(source)))
    except (SyntaxError, ValueError, RecursionError, MemoryError, _TooComplex):
        return {}
    module = resolver.c.module
    # Markers of the file's own functions and classes mean nothing in another file; process groups do.
    return {
        name: {v for v in resolver.lookup(name, module) if _under(v, PG) or not v.startswith("<")}
        for name in module.bound
    }


def reached_apis(source: str, rel_path: str, policy: Policy) -> dict[str, set[str]]:
    """For each top-level function and method, the forbidden APIs it uses or reaches through calls.

    Keys follow the ``Finding.function`` convention (methods of different classes that share a name
    share a key); every function and method of the file is a key, clean ones with an empty set.  The
    names are collective names (``"all_reduce"``), process-group method names (``"allreduce"``), or,
    for the rules no policy can lift, the dotted name reached
    (``"torch.distributed._functional_collectives.all_reduce"``, ``"getattr"``, ``"__closure__"``,
    ``"_get_default_store"``...).  ``policy`` (a rubric's) decides which collectives count as
    forbidden for which function.
    """
    pairs, units = _run(source, rel_path, policy)
    reached: dict[str, set[str]] = {
        name: set() for u, kind in units.items() if kind == "function" and (name := _public(u)) is not None
    }
    for finding, api in pairs:
        if finding.function in reached:
            reached[finding.function].add(api)
    return reached


# ----------------------------------------------------------------------------- grader check


def find_student_files(root: Path, wanted: Iterable[str]) -> dict[str, Path]:
    """Map each wanted path (``src/collectives.py``) to the file holding it: in place, or flat."""
    found = {}
    for rel_path in wanted:
        for candidate in (root / rel_path, root / Path(rel_path).name):
            if candidate.is_file():
                found[rel_path] = candidate
                break
    return found


def _settings(rubric_path: Path | None) -> tuple[Policy, tuple[str, ...]]:
    """The rubric's policy and the Python files among its student files (the default rubric when None)."""
    from grader.rubric import load_rubric

    rubric = load_rubric(rubric_path)
    return rubric.policy, tuple(str(f) for f in rubric.student_files if str(f).endswith(".py"))


def format_finding(finding: Finding) -> str:
    """``file:line:col: rule in function: message`` and the quoted line, as a compiler prints them."""
    where = f" in {finding.function}" if finding.function else ""
    head = f"{finding.file}:{finding.line}:{finding.col + 1}: {finding.rule}{where}: {finding.message}"
    return f"{head}\n    {finding.source}" if finding.source else head


def main(args: argparse.Namespace) -> int:
    """``grader check``: print the static findings.  Findings are a report, not a failure (exit 0)."""
    root = Path(args.submission)
    if not root.exists():
        raise UserError(f"{root} does not exist")
    policy, wanted = _settings(args.rubric)
    if root.is_file():
        name = next((w for w in wanted if Path(w).name == root.name), root.name)
        files, root = {name: root}, root.parent
    else:
        files = find_student_files(root, wanted)
    if not files:
        raise UserError(f"no student files in {root} (looked for {', '.join(wanted)}, also without src/)")
    # Each file is judged under its rubric name (the policy's key), reported where it really is.
    shown = {rel_path: path.relative_to(root).as_posix() for rel_path, path in files.items()}
    findings = [dataclasses.replace(f, file=shown[f.file]) for f in _check_files(files, policy)]
    if args.json:
        payload: dict[str, Any] = {
            "submission": str(args.submission),
            "files": sorted(shown.values()),
            "findings": [dataclasses.asdict(f) for f in findings],
        }
        print(json.dumps(payload, indent=2))
        return 0
    for finding in findings:
        print(format_finding(finding))
    checked = ", ".join(sorted(shown.values()))
    count = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}" if findings else "no findings"
    print(f"{count} in {checked}")
    return 0
