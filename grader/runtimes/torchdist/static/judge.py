"""From resolved references to findings under a rubric's policy, and the analysis's entry points.

Each reference the collector recorded is classified by what it may denote (:mod:`.rules`); the
file's own calls make a call graph along which a use taints its callers, unless the policy (per
file and function) lifts it there or only permitted functions call the helper; module and class
code that touches the grader counts against every function of the file.  :func:`analyze_source`,
:func:`analyze_submission` and :func:`reached_apis` are what the rest of the grader calls.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.results import Finding
from grader.runtimes.torchdist.policy import FunctionPolicy, Policy
from grader.runtimes.torchdist.static.collect import Collector, Ref, Scope, const_str, getattr_name
from grader.runtimes.torchdist.static.resolve import Resolver, Siblings, TooComplex, link
from grader.runtimes.torchdist.static.rules import (
    ANALYSIS_ERROR,
    DYNAMIC_DIST_ACCESS,
    GRADER,
    GRADER_INTERNALS,
    GUARD_TAMPERING,
    IMPORT_MACHINERY,
    OP_LOOKUPS,
    POLICY_RULES,
    REASONS,
    SYNTAX_ERROR,
    TAMPER_ATTRS,
    Key,
    canonical,
    classify,
    describe,
    import_key,
    sensitive,
    under,
)


@dataclass(frozen=True)
class _Use:
    """One reference that violates a rule unless the unit's policy lifts it."""

    key: Key
    node: ast.AST
    unit: str | None
    message: str


class _Analysis:
    def __init__(self, source: str, rel_path: str, policy: Policy, tree: ast.Module, siblings: Siblings | None) -> None:
        self.lines = source.splitlines()
        self.rel_path = rel_path
        self.policy = policy
        self.collected = Collector(tree)
        self.resolver = Resolver(self.collected, siblings)
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

    def _keys(self, ref: Ref) -> list[tuple[Key, str]]:
        node, scope = ref.node, ref.scope
        resolve = self.resolver.resolve
        found: list[tuple[Key, str]] = []
        exempt = id(node) in self.collected.exempt
        if isinstance(node, ast.Import | ast.ImportFrom):
            return [(key, f"import {m}") for m in _imported(node) if (key := import_key(m)) is not None]
        if isinstance(node, ast.Subscript) and "sys.modules" in resolve(node.value, scope):
            return self._grader_modules(node, [node.slice])
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            owners = resolve(node.value, scope)
            if any(sensitive(v) for v in owners):
                target = f"{describe(sorted(owners)[0])}.{node.attr}"
                found.append(((GUARD_TAMPERING, target), f"assigning to or deleting {target}"))
        elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            values = resolve(node, scope)
            # An alias is not a use, except of the grader: every mention of it is one.
            found += self._value_keys(node, {v for v in values if under(v, GRADER)} if exempt else values)
        if isinstance(node, ast.Attribute) and node.attr in TAMPER_ATTRS:
            found.append(((GUARD_TAMPERING, node.attr), _show(node)))
        if isinstance(node, ast.Call):
            for func in sorted(resolve(node.func, scope)):
                found += self._call_keys(func, node, scope, exempt)
        return found

    def _value_keys(self, node: ast.AST, values: set[str]) -> list[tuple[Key, str]]:
        found = []
        for value in sorted(values):
            key = classify(value)
            if key is not None:
                shown, described = _show(node), describe(value)
                suffix = "" if shown.endswith(described.rpartition(".")[2]) else f" (it is {described})"
                found.append((key, f"{shown}{suffix}"))
        return found

    def _call_keys(self, func: str, call: ast.Call, scope: Scope, exempt: bool) -> list[tuple[Key, str]]:
        resolve = self.resolver.resolve
        first = resolve(call.args[0], scope) if call.args else set()
        shown = _show(call)
        if any(under(func, machinery) for machinery in IMPORT_MACHINERY):
            return self._grader_modules(call, [*call.args, *(keyword.value for keyword in call.keywords)])
        if func in OP_LOOKUPS and call.args:
            if const_str(call.args[0]) is None:
                return [((DYNAMIC_DIST_ACCESS, func), f"{shown} (an operator looked up at run time)")]
            return self._value_keys(call, resolve(call, scope))
        if func == "builtins.getattr" and len(call.args) >= 2:
            name = getattr_name(call)
            if name is None:
                if any(sensitive(v) for v in first):
                    return [((DYNAMIC_DIST_ACCESS, "getattr"), f"{shown} (a name looked up at run time)")]
                return []
            found = [] if exempt else self._value_keys(call, resolve(call, scope))
            if name in TAMPER_ATTRS:
                found.append(((GUARD_TAMPERING, name), shown))
            return found
        if func in ("builtins.setattr", "builtins.delattr") and any(sensitive(v) for v in first):
            return [((GUARD_TAMPERING, func.removeprefix("builtins.")), shown)]
        if func == "builtins.vars" and call.args:
            if any(sensitive(v) for v in first):
                return [((DYNAMIC_DIST_ACCESS, "vars"), shown)]
            return []
        if func in ("builtins.globals", "builtins.locals", "builtins.vars") and not self._harmless_lookup(call, scope):
            api = func.removeprefix("builtins.")
            return [((DYNAMIC_DIST_ACCESS, api), shown)]
        return []

    @staticmethod
    def _grader_modules(node: ast.AST, args: Iterable[ast.expr]) -> list[tuple[Key, str]]:
        """A grader module named to the import machinery (``sys.modules["grader.x"]``, ``runpy``...)."""
        names = [name for arg in args if (name := const_str(arg)) is not None and under(name, GRADER)]
        return [((GRADER_INTERNALS, names[0]), _show(node))] if names else []

    def _harmless_lookup(self, call: ast.Call, scope: Scope) -> bool:
        """``globals()["CONSTANT"]`` naming something that is not torch.distributed is fine."""
        subscript = self.collected.subscripted.get(id(call))
        key = const_str(subscript.slice) if subscript is not None else None
        if key is None or call.args:
            return False
        where = self.collected.module if _call_name(call) == "globals" else scope
        values = self.resolver.lookup(key, where)
        return not any(sensitive(v) or classify(v) for v in values)

    def _record_edges(self, ref: Ref) -> None:
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

    def _permitted_units(self, key: Key, callers: dict[str | None, set[str | None]]) -> set[str | None]:
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
        self, key: Key, direct: list[_Use], allowed: set[str | None], callers: dict[str | None, set[str | None]]
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

    def _finding(self, key: Key, node: ast.AST, unit: str | None, message: str) -> Finding:
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
        return [canonical(alias.name) for alias in node.names]
    if node.level or node.module is None:
        return []
    module = canonical(node.module)
    if import_key(module) is not None or any(a.name == "*" for a in node.names):
        return [module]
    return [canonical(f"{node.module}.{a.name}") for a in node.names]


def _call_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else ""


def _show(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _public(unit: str | None) -> str | None:
    """A unit as findings name it: methods by their bare name (see the package docstring)."""
    return None if unit is None else unit.rpartition(".")[2]


def _run(
    source: str, rel_path: str, policy: Policy, siblings: Siblings | None = None
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
        analysis = _Analysis(source, rel_path, policy, tree, siblings)
        return analysis.results(), analysis.collected.units
    except RecursionError:
        message = "the file is nested too deeply to be checked; simplify the deepest expression"
        return [(Finding(ANALYSIS_ERROR, message, rel_path, 1), "")], {}
    except TooComplex as exc:
        return [(Finding(ANALYSIS_ERROR, f"the file is too convoluted to be checked: {exc}", rel_path, 1), "")], {}


def analyze_source(source: str, rel_path: str, policy: Policy) -> list[Finding]:
    """Findings for one file on its own, sorted by position.  Never raises on bad student code."""
    return [finding for finding, _ in _run(source, rel_path, policy)[0]]


def analyze_submission(root: Path, files: Iterable[str], policy: Policy) -> list[Finding]:
    """Findings for the named files under ``root`` (paths relative to it); missing files are skipped.

    The files are analysed together: a name one imports from another (``from .collectives import
    ar``) is judged by what it is there, so an alias cannot launder a collective across files.
    """
    python = [rel for rel in files if rel.endswith(".py")]  # a report's snippets run only in the sandbox
    return analyze_files({rel: Path(root) / rel for rel in python if (Path(root) / rel).is_file()}, policy)


def analyze_files(paths: Mapping[str, Path], policy: Policy) -> list[Finding]:
    """Findings for student files given by rubric path (the policy's key, and the module name the
    others import it by) -> where the file is, analysed together as :func:`analyze_submission` does."""
    sources: dict[str, str | Finding] = {}
    for rel_path, path in paths.items():
        try:
            sources[rel_path] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            sources[rel_path] = Finding(SYNTAX_ERROR, f"the file is not UTF-8 text: {exc.reason}", rel_path, 1)
    siblings = link({rel_path: text for rel_path, text in sources.items() if isinstance(text, str)})
    findings: list[Finding] = []
    for rel_path, text in sources.items():
        if isinstance(text, Finding):
            findings.append(text)
            continue
        findings += [finding for finding, _ in _run(text, rel_path, policy, siblings[rel_path])[0]]
    return findings


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
