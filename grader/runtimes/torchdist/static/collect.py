"""One pass over a file's AST: its scopes, definitions and bindings, and every node to judge.

:class:`Collector` records equations, not answers: ``ar = dist.all_reduce`` becomes "``ar`` in this
scope may be whatever that expression is", solved later by :mod:`.resolve`.  It also decides the
*unit* each node belongs to (the top-level function, method or class findings name: see the
package docstring), and which right-hand sides are alias definitions rather than uses.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from grader.runtimes.torchdist.static.rules import canonical

#: Methods that put what they are given into the container they are called on (a container is
#: resolved to what it holds: see :mod:`.resolve`).
_STORING_METHODS = frozenset({"append", "appendleft", "extend", "extendleft", "insert", "add", "update", "setdefault"})
_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def const_str(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def getattr_name(call: ast.Call) -> str | None:
    """The constant attribute name of a two- or three-argument ``getattr`` call spelled as such."""
    return const_str(call.args[1]) if len(call.args) >= 2 else None


@dataclass(eq=False)
class Scope:
    kind: str  # "module" | "class" | "function" | "comprehension"
    parent: Scope | None
    unit: str | None
    method_of: int | None = None  # for a method's own scope: the index of its class
    bound: set[str] = field(default_factory=set)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    star_modules: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Def:
    node: _FunctionNode
    scope: Scope
    unit: str | None
    params: list[str]  # positional parameters, in order
    keywords: set[str]  # every parameter that may be passed by keyword
    is_method: bool
    returns: list[ast.expr] = field(default_factory=list)


@dataclass(eq=False)
class _Class:
    node: ast.ClassDef
    scope: Scope
    outer: Scope
    methods: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Ref:
    node: ast.AST
    scope: Scope
    unit: str | None


class Collector(ast.NodeVisitor):
    """Builds scopes and binding equations, and records, in source order, every node to judge."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = Scope("module", None, None)
        self.scope = self.module
        self.unit: str | None = None
        self.defs: list[_Def] = []
        self.classes: list[_Class] = []
        self.units: dict[str | None, str] = {None: "module"}  # unit -> "module" | "class" | "function"
        self.const: list[tuple[Scope, str, frozenset[str]]] = []
        self.binds: list[tuple[Scope, str, ast.expr, Scope]] = []
        self.attr_binds: list[tuple[ast.expr, str, ast.expr, Scope]] = []
        self.item_binds: list[tuple[ast.expr, str, ast.expr, Scope]] = []  # container, method, what it is given
        self.calls: list[tuple[ast.Call, Scope]] = []
        self.refs: list[Ref] = []
        self.exempt: set[int] = set()  # ids of alias right-hand sides: a definition is not a use
        self.subscripted: dict[int, ast.Subscript] = {}  # globals()/locals() call id -> its subscript
        self.def_stack: list[_Def] = []
        self.lambdas: dict[int, int] = {}  # id of a Lambda node -> its index in defs
        self.visit(tree)

    # -- scopes and bindings

    def _mark(self, scope: Scope, name: str) -> None:
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

    def _enter(self, kind: str, unit: str | None, method_of: int | None = None) -> Scope:
        previous = self.scope
        self.scope = Scope(kind, previous, unit, method_of)
        self.unit = unit
        return previous

    def _leave(self, previous: Scope) -> None:
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

    def _class_of(self, scope: Scope) -> _Class | None:
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
                self._bind_const(alias.asname, canonical(alias.name))
            else:
                top = alias.name.split(".")[0]
                self._bind_const(top, top)
        self.refs.append(Ref(node, self.scope, self.unit))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.module.star_modules.append(canonical(module))
            else:
                joined = f"{module}.{alias.name}" if node.module else module + alias.name
                self._bind_const(alias.asname or alias.name, canonical(joined))
        self.refs.append(Ref(node, self.scope, self.unit))

    # -- expressions to judge

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self._mark(self.scope, node.id)
        self.refs.append(Ref(node, self.scope, self.unit))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.refs.append(Ref(node, self.scope, self.unit))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.refs.append(Ref(node, self.scope, self.unit))
        self.calls.append((node, self.scope))
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STORING_METHODS:
            for arg in (*node.args, *(keyword.value for keyword in node.keywords)):
                self.item_binds.append((node.func.value, node.func.attr, arg, self.scope))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.refs.append(Ref(node, self.scope, self.unit))
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
        and getattr_name(node) is not None
    )
