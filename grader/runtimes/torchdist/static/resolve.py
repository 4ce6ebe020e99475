"""What a name may denote: the flow-insensitive fixed point over the collected bindings.

:class:`Resolver` solves the equations :class:`~.collect.Collector` gathered (imports, assignments,
parameters fed from the file's own call sites, attributes set on ``self``, return values, what is
put into containers) and then answers what an expression may be, as a set of dotted names and
markers (``<pg>``, ``<def>3``...).  A name imported from another student file is replaced by what
it is there (:class:`Siblings`, built by :func:`link`), so an alias cannot launder a collective
across files.  A file that makes the sets explode raises :class:`TooComplex`, to be reported rather
than guessed at.
"""

from __future__ import annotations

import ast
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from grader.runtimes.torchdist.static.collect import Collector, Scope, const_str, getattr_name
from grader.runtimes.torchdist.static.rules import OP_LOOKUPS, PG, PG_FACTORIES, canonical, tracked, under

#: Containers are resolved to what they hold (``[dist]`` may be what ``dist`` is), so these builtins
#: return what their arguments hold, and these methods (and ``copy``) what their container holds.
_ELEMENT_BUILTINS = frozenset(
    f"builtins.{name}"
    for name in ("list", "tuple", "set", "frozenset", "dict", "iter", "next", "reversed", "sorted", "min", "max")
)
_GETTING_METHODS = frozenset({"get", "pop", "popitem", "popleft", "setdefault", "values", "items", "__getitem__"})
_MAX_VALUES = 2000  # a binding that may denote more things than this is not analysed, but reported
_MAX_ROUNDS = 40

_RETURN = "<return>"  # the pseudo-name a function's return values are bound to in its own scope


class TooComplex(Exception):
    """The file defeats the analysis (deliberately or not); reported instead of guessed at."""


class Resolver:
    """Solves the binding equations by fixed point, then answers 'what may this expression be'."""

    def __init__(self, collected: Collector, siblings: Siblings | None = None) -> None:
        self.c = collected
        self.siblings = siblings or Siblings("", {})
        self.env: dict[tuple[Scope, str], set[str]] = defaultdict(set)
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

    def _add(self, scope: Scope, name: str, values: Iterable[str]) -> bool:
        current = self.env[scope, name]
        before = len(current)
        current.update(values)
        if len(current) > _MAX_VALUES:
            raise TooComplex(f"{name!r} may denote more than {_MAX_VALUES} different things")
        return len(current) != before

    def _store_attribute(self, obj: ast.expr, attr: str, values: set[str], scope: Scope) -> bool:
        """``obj.attr = value``: followed where ``obj`` is an instance of a class of this file."""
        changed = False
        for owner in self.resolve(obj, scope):
            if owner.startswith("<self>"):
                changed |= self._add(self.c.classes[int(owner[6:])].scope, "." + attr, values)
        return changed

    def _store_item(self, container: ast.expr, method: str, values: set[str], scope: Scope) -> bool:
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

    def _target(self, scope: Scope, name: str) -> Scope:
        """The scope a binding of ``name`` in ``scope`` really lands in (global/nonlocal)."""
        if name in scope.globals_:
            return self.c.module
        if name in scope.nonlocals:
            outer = scope.parent
            while outer is not None and (outer.kind == "class" or name not in outer.bound):
                outer = outer.parent
            return outer or self.c.module
        return scope

    def _bind_arguments(self, call: ast.Call, scope: Scope) -> bool:
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

    def _binding(self, name: str, scope: Scope) -> Scope | None:
        """The scope whose ``name`` a reference in ``scope`` reads (None: a builtin or star import)."""
        current: Scope | None = self.c.module if name in scope.globals_ else scope
        first = True
        while current is not None:
            if (first or current.kind != "class") and name in current.bound:
                return current
            current, first = current.parent, False
        return None

    def lookup(self, name: str, scope: Scope) -> set[str]:
        where = self._binding(name, scope)
        if where is not None:
            return self._linked(self.env.get((where, name), set()))
        return {f"builtins.{name}", *(f"{module}.{name}" for module in self.c.module.star_modules)}

    def _linked(self, values: set[str]) -> set[str]:
        """Replace names imported from another student file by what they are there."""
        if not self.siblings.exports:
            return values
        linked = set()
        for value in values:
            sibling = self.siblings.find(value)
            if sibling is None or not sibling[1]:
                linked.add(value)
            else:
                module, (name, *attrs) = sibling
                found = set(self.siblings.exports[module].get(name, set()))
                for attr in attrs:
                    found = {v for base in found for v in self.attribute(base, attr)}
                linked |= found
        return linked

    def attribute(self, value: str, attr: str) -> set[str]:
        if self.siblings.find(f"{value}.{attr}") is not None:
            return self._linked({f"{value}.{attr}"})
        if under(value, PG):
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
        joined = canonical(f"{value}.{attr}")
        return {joined} if tracked(joined) else set()

    def resolve(self, node: ast.AST, scope: Scope) -> set[str]:
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

    def _call(self, func: str, call: ast.Call, scope: Scope) -> set[str]:
        """What calling ``func`` may return."""
        if func in PG_FACTORIES or under(func, PG):
            return {PG}
        if func.startswith("<class>"):
            return {"<self>" + func[7:]}
        if func.startswith(("<def>", "<bound>")):
            return self.env.get((self.c.defs[int(func.split(">")[1])].scope, _RETURN), set())
        if func == "builtins.getattr" and (name := getattr_name(call)) is not None:
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
        name = const_str(call.args[0]) if call.args else None
        if name is None:
            return set()
        if func == "importlib.import_module":
            return {canonical(name)}
        if func == "builtins.__import__":  # the named module with a fromlist, else its top package
            fromlist = len(call.args) > 3 or any(keyword.arg == "fromlist" for keyword in call.keywords)
            return {canonical(name) if fromlist else name.split(".")[0]}
        if func in OP_LOOKUPS:
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
            elif (name := const_str(key)) is not None and tracked(module := canonical(name)):
                items.add(module)
        return items


def module_exports(source: str) -> dict[str, set[str]]:
    """A file's module-level names and the dotted names / process groups they may be."""
    try:
        resolver = Resolver(Collector(ast.parse(source)))
    except (SyntaxError, ValueError, RecursionError, MemoryError, TooComplex):
        return {}
    module = resolver.c.module
    # Markers of the file's own functions and classes mean nothing in another file; process groups do.
    return {
        name: {v for v in resolver.lookup(name, module) if under(v, PG) or not v.startswith("<")}
        for name in module.bound
    }


def module_name(rel_path: str) -> str:
    """The dotted module a student file is: its rubric path without ``.py``.

    ``src/collectives.py`` is ``src.collectives`` and ``lib/x.py`` is ``lib.x``: what an absolute
    import from the submission's top names it by, and what its relative imports are resolved from.
    """
    return ".".join(PurePosixPath(rel_path.removesuffix(".py")).parts)


class Siblings:
    """The other student files one file may import from, and the names it may give them."""

    def __init__(self, here: str, exports: Mapping[str, Mapping[str, set[str]]]) -> None:
        #: the file's own module name (see :func:`module_name`), which its relative imports start from
        self.here = here
        #: every other student file's module name -> its module-level names -> what each may be
        self.exports = exports
        # longest names first, so that ``a.b`` is found before a module ``a``
        self._modules = sorted((tuple(m.split(".")) for m in exports), key=len, reverse=True)
        last = Counter(m.rpartition(".")[2] for m in (here, *exports))
        #: a module by its last name alone (``collectives``), when no other student file shares it
        self._bare = {m.rpartition(".")[2]: m for m in exports if last[m.rpartition(".")[2]] == 1}

    def find(self, value: str) -> tuple[str, list[str]] | None:
        """``(module, names)`` when the dotted ``value`` is a name in another student file.

        ``value`` is what an import bound: relative (``.collectives.ar``, resolved from this file's
        package; more dots than packages stop at the top), absolute from the submission's top
        (``src.collectives.ar``), or by the module's last name alone (``collectives.ar``, as when
        its folder is on ``sys.path``).  A relative name that names no student file from this file's
        package is also tried from the top, as the analysis always has: better a link too many than
        an alias missed.  ``names`` are what follows the module (``["ar"]``).
        """
        if not self.exports:
            return None
        level = len(value) - len(value.lstrip("."))
        parts = value[level:].split(".")
        if level:
            package = self.here.split(".")[:-1]
            found = self._match(package[: max(len(package) - (level - 1), 0)] + parts)
            if found is not None:
                return found
        return self._match(parts)

    def _match(self, parts: list[str]) -> tuple[str, list[str]] | None:
        for module in self._modules:
            if tuple(parts[: len(module)]) == module:
                return ".".join(module), parts[len(module) :]
        bare = self._bare.get(parts[0])
        return (bare, parts[1:]) if bare is not None else None


def link(sources: Mapping[str, str]) -> dict[str, Siblings]:
    """For each student file (rubric path -> its text), the other files it may import from."""
    modules = {rel_path: module_name(rel_path) for rel_path in sources}
    exports = {modules[rel_path]: module_exports(text) for rel_path, text in sources.items()}
    return {
        rel_path: Siblings(here, {module: names for module, names in exports.items() if module != here})
        for rel_path, here in modules.items()
    }
