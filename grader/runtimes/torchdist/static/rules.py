"""What the static analysis forbids, and how a dotted name is told to break a rule.

The rule ids a :class:`~grader.results.Finding` carries and the reason each gives; the tables of
forbidden modules, dispatcher op namespaces, private bindings, process-group methods, stores,
dynamic-access and tampering APIs; and :func:`classify`, which maps one resolved value
(``torch.distributed.all_reduce``, ``<pg>.allreduce``, ``grader.matrix``) to the rule it breaks.
Kept apart from the AST machinery so that what counts as a violation is read and changed in one
place.  The lists the runtime guard shares (collectives, process-group methods, forbidden modules)
live in :mod:`grader.runtimes.torchdist.policy`; the ones here are static-only.
"""

from __future__ import annotations

from grader.runtimes.torchdist.policy import COLLECTIVES, FORBIDDEN_MODULES, PROCESS_GROUP_METHODS

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
    # the other C++ bindings of torch.distributed, by the Python module each stands behind
    ("torch._C._distributed_rpc", "torch.distributed.rpc"),
    ("torch._C._distributed_autograd", "torch.distributed.autograd"),
    ("torch._C._distributed", "torch.distributed.tensor"),  # DTensor placements
    ("torch._ops.ops", "torch.ops"),
)
#: Names other modules bind these modules under (``torch.utils.data.distributed.dist``,
#: ``collections._sys``, ``enum.bltns``, ``torch._custom_op.impl._C``...): a module reached as an
#: attribute of another one is the module it is, whatever the chain that reached it.
_MODULE_ALIASES = {
    **dict.fromkeys(("dist", "c10d", "_c10d", "distributed_c10d", "_distributed_c10d"), _DIST),
    "_C": "torch._C",
    "_ops": "torch.ops",
    "torch": "torch",
    **dict.fromkeys(("sys", "_sys"), "sys"),
    **dict.fromkeys(("builtins", "__builtins__", "_builtins", "bltns"), "builtins"),
    **{name: name for name in ("importlib", "gc", "inspect", "ctypes", "runpy", "pkgutil")},
}
#: Real modules whose own names end in an alias but which are not what it stands for.
_NOT_ALIASES = frozenset({"torch._ops", "torch.ops.c10d"})
#: Names that *are* process groups (or hold them); attributes of ``_world`` lead to groups.
_PG_ROOTS = (
    "torch.distributed.group.WORLD",
    "torch.distributed.GroupMember.WORLD",
    "torch.distributed._world",
)
#: Calls that return a process group.
PG_FACTORIES = frozenset(
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
#: Distributed autograd moves gradients between ranks over RPC, without send/recv (static-only: the
#: runtime guard forbids RPC itself).
_RPC_ONLY = ("torch.distributed.autograd",)
_FORBIDDEN_PREFIXES = (*FORBIDDEN_MODULES, *_FORBIDDEN_OP_NAMESPACES, *_COMMUNICATING_BINDINGS, *_RPC_ONLY)
#: Calls that fetch a dispatcher op by its ``"namespace::name"`` string, as ``torch.ops`` would.
OP_LOOKUPS = frozenset(
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
TAMPER_ATTRS = frozenset({"__closure__", "__wrapped__", "__globals__", "__code__", "f_globals", "f_locals"})
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
IMPORT_MACHINERY = ("importlib", "runpy", "pkgutil", "builtins.__import__", "sys.modules")

_MAX_DOTS = 8  # longer dotted values are dropped: keeps self-referential bindings finite
Key = tuple[str, str]  # (rule, api)


def canonical(name: str) -> str:
    name = _unaliased(_prefixed(name))
    for root in _PG_ROOTS:
        if name == root:
            return PG
        if name.startswith(root + "."):
            return PG + name[len(root) :]
    return name


def _prefixed(name: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if under(name, prefix):
            name = replacement + name[len(prefix) :]
    return name


def _unaliased(name: str) -> str:
    """``name`` from the last module alias in its chain on: that is the module the chain reached."""
    parts = name.split(".")
    for index in range(len(parts) - 1, 0, -1):
        alias = _MODULE_ALIASES.get(parts[index])
        if alias is not None and ".".join(parts[: index + 1]) not in _NOT_ALIASES:
            return _prefixed(".".join([alias, *parts[index + 1 :]]))
    return name


def under(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def sensitive(value: str) -> bool:
    """Whether a non-constant attribute lookup on ``value`` could reach dist or code execution."""
    return value == "torch" or under(value, PG) or any(under(value, root) for root in _SENSITIVE_ROOTS)


def classify(value: str) -> Key | None:
    """The (rule, api) a reference to ``value`` violates, if any."""
    if value.startswith(PG + "."):
        member = value[len(PG) + 1 :]
        if member in PROCESS_GROUP_METHODS:
            return PROCESS_GROUP_METHOD, member
        return (DYNAMIC_DIST_ACCESS, "ProcessGroup." + member) if member in _NAMESPACE_ATTRS else None
    if value.startswith("<"):
        return None
    if under(value, GRADER):
        return GRADER_INTERNALS, value
    if _is_forbidden_module(value):
        return FORBIDDEN_MODULE, value
    head, _, last = value.rpartition(".")
    if last in _NAMESPACE_ATTRS and sensitive(head):
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


def tracked(value: str) -> bool:
    if value.startswith("<"):  # a marker (process group, own function...): never grows
        return True
    root, depth = value.split(".")[0], value.count(".")
    # What matters under builtins and sys is one or two names deep (builtins.exec, sys.modules.get).
    return root in _TRACKED_ROOTS and depth <= (2 if root in ("builtins", "sys") else _MAX_DOTS)


def _is_forbidden_module(value: str) -> bool:
    return any(under(value, module) for module in _FORBIDDEN_PREFIXES)


def describe(value: str) -> str:
    return "ProcessGroup" + value[len(PG) :] if value.startswith(PG) else value


def import_key(module: str) -> Key | None:
    """The rule importing ``module`` breaks (a forbidden module, the grader); other imports are aliases."""
    key = classify(module)
    return key if key is not None and key[0] in (FORBIDDEN_MODULE, GRADER_INTERNALS) else None
