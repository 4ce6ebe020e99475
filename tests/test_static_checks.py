"""The static policy check: what it reports about student files, and what it must leave alone.

The corpus under ``tests/corpus/policy`` is the bulk of the specification: every file in
``evasions/`` declares its findings in header lines ``# expect: RULE@LINE in FUNCTION`` (``in
FUNCTION`` omitted for module-level code) and must produce exactly those; every file in ``clean/``
must produce none.  A header ``# path: src/transformer.py`` judges a file as that student file
(default ``src/collectives.py``), under :data:`POLICY`.  The files are only ever parsed here.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import grader.rubric
from grader import cli
from grader.results import Finding
from grader.rubric import Rubric, load_rubric
from grader.runtimes.torchdist.policy import COLLECTIVES, PROCESS_GROUP_METHODS, STRICT, FunctionPolicy, Policy
from grader.runtimes.torchdist.static import analyze_source, analyze_submission, reached_apis

CORPUS = Path(__file__).parent / "corpus" / "policy"
EVASIONS = sorted((CORPUS / "evasions").glob("*.py"))
CLEAN = sorted((CORPUS / "clean").glob("*.py"))
EXPECT = re.compile(r"^# expect: (?P<rule>[\w-]+)@(?P<line>\d+)(?: in (?P<function>\S+))?$", re.MULTILINE)
PATH = re.compile(r"^# path: (\S+)$", re.MULTILINE)
STUDENT_FUNCTIONS = {"my_broadcast", "my_allreduce", "my_allgather", "my_reduce_scatter", "my_all_to_all"}
EVERYTHING_ALLOWED = FunctionPolicy(allowed=COLLECTIVES | PROCESS_GROUP_METHODS)
STUDENT_FILES = ("src/collectives.py", "src/transformer.py")
A9 = load_rubric()
TP_COLLECTIVES = FunctionPolicy(allowed=frozenset({"all_reduce", "all_gather"}))
#: The policy the corpus and these tests are written against: the handout's Task 2 tensor-parallel
#: functions may call ``dist.all_reduce``/``dist.all_gather``, everything else is held to send/recv.
#: Narrower than ``rubrics/a9.yaml`` (which allows them anywhere in ``transformer.py``), so that a
#: collective in ``forward_ulysses`` still shows.
POLICY = Policy(
    {
        "src/transformer.py::forward_tensor_parallel": TP_COLLECTIVES,
        "src/transformer.py::init_tensor_parallel_shards": TP_COLLECTIVES,
    }
)


def rel_path_of(text: str) -> str:
    match = PATH.search(text)
    return match.group(1) if match else "src/collectives.py"


STAND_INS = [p for p in EVASIONS + CLEAN if rel_path_of(p.read_text()) == "src/collectives.py"]


def declared(text: str) -> Counter[tuple[str, int, str | None]]:
    return Counter((m["rule"], int(m["line"]), m["function"]) for m in EXPECT.finditer(text))


def found(source: str, rel_path: str = "src/collectives.py", policy: Policy = POLICY) -> set[tuple]:
    return {(f.rule, f.line, f.function) for f in analyze_source(source, rel_path, policy)}


# --------------------------------------------------------------------------- the corpus


def test_corpus_covers_at_least_14_evasions_and_8_clean_files() -> None:
    assert len(EVASIONS) >= 14 and len(CLEAN) >= 8


@pytest.mark.parametrize("path", EVASIONS, ids=lambda p: p.stem)
def test_every_evasion_declares_what_it_expects(path: Path) -> None:
    # Without this an evasion file with a typo'd header would pass by finding nothing.
    assert declared(path.read_text()), f"{path.name} has no '# expect: RULE@LINE in FUNCTION' line"


@pytest.mark.parametrize("path", EVASIONS, ids=lambda p: p.stem)
def test_each_evasion_is_reported_with_its_rule_line_and_function(path: Path) -> None:
    text = path.read_text()
    findings = analyze_source(text, rel_path_of(text), POLICY)
    assert Counter((f.rule, f.line, f.function) for f in findings) == declared(text)


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: p.stem)
def test_clean_lookalikes_produce_no_finding(path: Path) -> None:
    text = path.read_text()
    assert analyze_source(text, rel_path_of(text), POLICY) == []


@pytest.mark.parametrize("path", STAND_INS, ids=lambda p: p.stem)
def test_collectives_stand_ins_define_the_five_functions(path: Path) -> None:
    # The runtime-guard tests drop these files in as a student's src/collectives.py.
    defined = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
    assert defined >= STUDENT_FUNCTIONS


# --------------------------------------------------------------------------- one finding


def test_a_finding_names_file_position_function_and_the_stripped_line() -> None:
    source = "import torch.distributed as dist\n\ndef my_allreduce(t):\n    if t.numel():\n        dist.all_reduce(t)\n"
    (finding,) = analyze_source(source, "src/collectives.py", POLICY)
    assert (finding.rule, finding.file, finding.line, finding.col) == (
        "forbidden-collective",
        "src/collectives.py",
        5,
        8,
    )
    assert finding.function == "my_allreduce" and finding.source == "dist.all_reduce(t)"
    assert finding.message.startswith("dist.all_reduce is not allowed") and finding.origin == "static"


def test_an_alias_names_what_it_stands_for() -> None:
    source = "from torch.distributed import all_gather as g\n\ndef my_allgather(t):\n    g([t], t)\n"
    (finding,) = analyze_source(source, "src/collectives.py", POLICY)
    assert finding.message.startswith("g (it is torch.distributed.all_gather) is not allowed")


def test_methods_are_named_by_their_bare_name_as_rubric_items_name_them() -> None:
    source = (
        "import torch.distributed as dist\nclass Block:\n    def forward_ulysses(self, x):\n        dist.barrier()\n"
    )
    assert found(source, "src/transformer.py") == {("forbidden-collective", 4, "forward_ulysses")}


def test_module_level_code_has_no_function() -> None:
    assert found("import torch.distributed as dist\ndist.barrier()\n") == {("forbidden-collective", 2, None)}


def test_an_alias_is_not_a_use_but_every_use_through_it_is() -> None:
    source = (
        "import torch.distributed as dist\n"
        "unused = dist.broadcast\n"
        "ar = dist.all_reduce\n"
        "def my_allreduce(t):\n"
        "    ar(t)\n"
        "def my_broadcast(t, src=0):\n"
        "    ar(t)\n"
    )
    assert found(source) == {("forbidden-collective", 5, "my_allreduce"), ("forbidden-collective", 7, "my_broadcast")}


def test_a_class_attribute_alias_is_reported_where_it_is_defined() -> None:
    # Attributes can be read in ways the analysis does not follow, so the definition counts too.
    source = (
        "import torch.distributed as dist\n"
        "class C:\n"
        "    op = dist.all_reduce\n"
        "    def go(self, t):\n"
        "        self.op(t)\n"
    )
    assert found(source) == {("forbidden-collective", 3, "C"), ("forbidden-collective", 5, "go")}


def test_a_process_group_method_needs_a_process_group() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def my_allreduce(t, comm):\n"
        "    comm.allreduce(t)\n"  # an unknown object: not a process group
        "    dist.new_group([0, 1]).allreduce([t])\n"
        "    dist.GroupMember.WORLD.barrier()\n"
    )
    assert found(source) == {("process-group-method", 4, "my_allreduce"), ("process-group-method", 5, "my_allreduce")}


# --------------------------------------------------------------------------- following calls


def test_a_helper_chain_taints_each_caller_at_its_call_and_names_the_chain() -> None:
    text = (CORPUS / "evasions" / "helper_taint.py").read_text()
    finding = next(f for f in analyze_source(text, "src/collectives.py", POLICY) if f.function == "my_allreduce")
    assert finding.source == "tensor.copy_(_combine(tensor))"
    assert "my_allreduce -> _combine -> _accumulate -> dist.all_reduce" in finding.message


def test_a_helper_called_twice_taints_its_caller_once_at_the_first_call() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def _h(t):\n"
        "    dist.barrier()\n"
        "def my_broadcast(t, src=0):\n"
        "    _h(t)\n"
        "    _h(t)\n"
    )
    assert found(source) == {("forbidden-collective", 3, "_h"), ("forbidden-collective", 5, "my_broadcast")}


def test_a_call_to_a_method_of_the_same_class_is_followed() -> None:
    source = (
        "import torch.distributed as dist\n"
        "class Block:\n"
        "    def forward_ulysses(self, x):\n"
        "        return self._mix(x)\n"
        "    def _mix(self, x):\n"
        "        return dist.all_to_all_single(x, x)\n"
    )
    assert found(source, "src/transformer.py") == {
        ("forbidden-collective", 4, "forward_ulysses"),
        ("forbidden-collective", 6, "_mix"),
    }


def test_a_method_called_through_self_receives_its_arguments_after_self() -> None:
    # Keeping the group on the object is honest; binding it to `self` made it look like tampering.
    source = (
        "import torch.distributed as dist\n"
        "class Ring:\n"
        "    def start(self):\n"
        "        self.attach(dist.group.WORLD)\n"
        "    def attach(self, group):\n"
        "        self.group = group\n"
    )
    assert found(source) == set()


def test_always_forbidden_rules_are_followed_through_helpers_too() -> None:
    source = (
        "import importlib\n"
        "def _load(name):\n"
        "    return importlib.import_module(name)\n"
        "def my_allreduce(t):\n"
        "    _load('x')\n"
    )
    assert found(source) == {("dynamic-dist-access", 3, "_load"), ("dynamic-dist-access", 5, "my_allreduce")}


# --------------------------------------------------------------------------- containers


@pytest.mark.parametrize(
    "expression",
    [
        "(dist,)[0]",
        "[torch.distributed][-1]",
        '{"d": dist}["d"]',
        "[dist][:1][0]",
        'getattr([torch][0], "distributed")',
        "list((dist,))[0]",
        "next(iter([dist]))",
        '{"d": dist}.get("d")',
        "[dist].pop()",
    ],
)
def test_an_item_of_a_container_may_be_anything_the_container_holds(expression: str) -> None:
    source = f"import torch\nimport torch.distributed as dist\ndef my_allreduce(t):\n    {expression}.all_reduce(t)\n"
    assert found(source) == {("forbidden-collective", 4, "my_allreduce")}


@pytest.mark.parametrize(
    "fill",
    [
        "BOX.append(dist)",
        "BOX.extend([dist])",
        "BOX.insert(0, dist)",
        'BOX["d"] = dist',
        "BOX.update(d=dist)",
        "def _fill():\n    BOX.append(dist)",  # a function fills the module's container
    ],
)
def test_a_container_holds_what_is_put_into_it_later(fill: str) -> None:
    source = f"import torch.distributed as dist\nBOX = []\n{fill}\ndef my_allreduce(t):\n    BOX[0].all_reduce(t)\n"
    line = source.splitlines().index("    BOX[0].all_reduce(t)") + 1
    assert ("forbidden-collective", line, "my_allreduce") in found(source)


def test_an_object_of_a_class_of_the_file_holds_only_what_its_methods_keep() -> None:
    # Its own append receives the group as an argument; the object does not become the group.
    source = (
        "import torch.distributed as dist\n"
        "class Ring:\n"
        "    def append(self, group):\n"
        "        self.group = group\n"
        "    def broadcast(self, t, src):\n"
        "        dist.send(t, 1)\n"
        "def my_broadcast(t, src=0):\n"
        "    ring = Ring()\n"
        "    ring.append(dist.group.WORLD)\n"
        "    ring.broadcast(t, src)\n"
    )
    assert found(source) == set()


def test_sys_modules_indexed_by_a_constant_is_that_module() -> None:
    source = "import sys\ndef my_allreduce(t):\n    sys.modules['torch.distributed'].all_reduce(t)\n"
    assert found(source) == {("dynamic-dist-access", 3, "my_allreduce"), ("forbidden-collective", 3, "my_allreduce")}


# --------------------------------------------------------------------------- private bindings and dispatcher ops


@pytest.mark.parametrize(
    ("call", "rule"),
    [
        ("torch._C._distributed_c10d._broadcast_coalesced(g, [t], 1, 0)", "forbidden-collective"),
        ("torch._C._distributed_c10d._verify_params_across_processes(g, [t])", "forbidden-module"),
        ("torch.distributed.Reducer([t], [[0]], [0], g)", "forbidden-module"),
        ("torch._C._distributed_c10d._current_process_group().allreduce([t])", "process-group-method"),
        ("torch.distributed.distributed_c10d._group_or_default_group().broadcast([t])", "process-group-method"),
        ("torch.distributed._functional_collectives_impl._all_reduce(t, 'sum', '', [0], 1)", "forbidden-module"),
        ("torch.ops._c10d_functional_autograd.all_to_all_single(t, [1], [1], 'g')", "forbidden-module"),
        ("torch._ops.ops._c10d_functional.all_reduce(t, 'sum', 'g')", "forbidden-module"),
        ("torch._C._jit_get_operation('_c10d_functional::all_reduce')", "forbidden-module"),
        ("torch._C._get_operation_overload('c10d::allreduce_', '')", "forbidden-module"),
        ("torch._ops._OpNamespace('c10d').broadcast_", "forbidden-module"),
        ("torch._C._jit_get_operation(t.name)", "dynamic-dist-access"),
    ],
)
def test_private_c10d_bindings_and_dispatcher_ops_are_findings(call: str, rule: str) -> None:
    source = f"import torch\ndef my_allreduce(t, g):\n    {call}\n"
    assert found(source) == {(rule, 3, "my_allreduce")}


def test_an_operator_of_another_namespace_looked_up_by_name_is_fine() -> None:
    assert found("import torch\ndef my_allreduce(t):\n    torch._C._jit_get_operation('aten::add')\n") == set()


# --------------------------------------------------------------------------- the grader


@pytest.mark.parametrize(
    "mention",
    [
        "import grader",
        "import grader.matrix.guard as g",
        "from grader.matrix import catalog",
        "from grader import *",
        "importlib.import_module('grader.matrix')",
        "importlib.import_module('.guard', package='grader.matrix')",
        "importlib.util.find_spec('grader')",
        "__import__('grader')",
        "sys.modules['grader.matrix']",
        "sys.modules.get('grader')",
        "runpy.run_module('grader')",
        "[importlib.import_module][0]('grader.cli')",
    ],
)
def test_every_mention_of_the_grader_in_a_function_is_a_finding_there(mention: str) -> None:
    source = f"import importlib, runpy, sys\ndef my_allreduce(t):\n    {mention}\n"
    assert ("grader-internals", 3, "my_allreduce") in found(source)


def test_the_grader_reached_through_another_student_file_is_a_finding_where_it_is_used(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "transformer.py").write_text("import grader.matrix.guard\n")
    (tmp_path / "src" / "collectives.py").write_text(
        "from . import transformer\ndef my_allreduce(t):\n    transformer.grader.matrix.guard.dist.all_reduce(t)\n"
    )
    findings = analyze_submission(tmp_path, ["src/collectives.py", "src/transformer.py"], STRICT)
    assert ("src/collectives.py", "grader-internals", 3, "my_allreduce") in {
        (f.file, f.rule, f.line, f.function) for f in findings
    }


def test_top_level_code_that_touches_the_grader_counts_against_every_function_of_the_file() -> None:
    # It runs when the file is imported, before any function is graded: patching the grader's
    # case bodies there would change every case without one function mentioning the grader.
    source = (
        "import torch\n"
        "def my_broadcast(t, src=0):\n"
        "    return t\n"
        "class Block:\n"
        "    cases = __import__('grader.matrix.cases_a9', fromlist=['BODIES'])\n"
        "    def forward_ulysses(self, x):\n"
        "        return x\n"
    )
    findings = analyze_source(source, "src/collectives.py", POLICY)
    assert {(f.rule, f.line, f.function) for f in findings} == {
        ("dynamic-dist-access", 5, "Block"),
        ("grader-internals", 5, "Block"),
        ("grader-internals", 5, "my_broadcast"),
        ("grader-internals", 5, "forward_ulysses"),
    }
    message = next(f.message for f in findings if f.function == "my_broadcast")
    assert message.startswith("this top-level code runs when the file is imported, before my_broadcast: ")


def test_a_function_that_reaches_the_grader_through_a_helper_is_reported_at_its_call() -> None:
    source = "def _peek():\n    import grader\ndef my_allreduce(t):\n    _peek()\n"
    assert found(source) == {("grader-internals", 2, "_peek"), ("grader-internals", 4, "my_allreduce")}


def test_the_grader_rule_says_plainly_what_is_wrong_and_no_policy_lifts_it() -> None:
    policy = Policy({"src/collectives.py": EVERYTHING_ALLOWED})
    (finding,) = analyze_source("def my_allreduce(t):\n    import grader\n", "src/collectives.py", policy)
    assert finding.rule == "grader-internals" and finding.function == "my_allreduce"
    assert (
        finding.message == "import grader is not allowed (student code must not import, reach into or use the grader)"
    )


@pytest.mark.parametrize(
    "honest",
    [
        "# the grader calls this; see grader.matrix\n",
        "note = 'import grader'\n",
        "print('grader.matrix.catalog')\n",
        "import graders\n",  # another package whose name starts alike
        "grader = object()\ngrader.matrix = 1\n",  # the student's own name
        "def f(grader):\n    return grader.score\n",
    ],
)
def test_the_word_grader_is_not_the_grader(honest: str) -> None:
    assert found(honest) == set()


# --------------------------------------------------------------------------- the policy


TP_BLOCK = (
    "import torch.distributed as dist\n"
    "class BasicTransformerBlock:\n"
    "    def forward_tensor_parallel(self, x):\n"
    "        dist.all_reduce(x)\n"
    "    def forward_ulysses(self, x):\n"
    "        dist.all_reduce(x)\n"
)


def test_the_handout_policy_allows_tensor_parallel_collectives_only_in_their_functions() -> None:
    assert found(TP_BLOCK, "src/transformer.py") == {("forbidden-collective", 6, "forward_ulysses")}


def test_the_strict_policy_forbids_them_everywhere() -> None:
    assert found(TP_BLOCK, "src/transformer.py", STRICT) == {
        ("forbidden-collective", 4, "forward_tensor_parallel"),
        ("forbidden-collective", 6, "forward_ulysses"),
    }


def test_a_policy_key_may_qualify_a_method_with_its_class() -> None:
    policy = Policy({"src/transformer.py::Other.forward_ulysses": EVERYTHING_ALLOWED})
    source = TP_BLOCK + "class Other:\n    def forward_ulysses(self, x):\n        dist.all_reduce(x)\n"
    assert ("forbidden-collective", 9, "forward_ulysses") not in found(source, "src/transformer.py", policy)
    assert ("forbidden-collective", 6, "forward_ulysses") in found(source, "src/transformer.py", policy)


SHARED_HELPER = (
    "import torch.distributed as dist\n"
    "class BasicTransformerBlock:\n"
    "    def forward_tensor_parallel(self, x):\n"
    "        return self._sum(x)\n"
    "    def forward_ulysses(self, x):\n"
    "        return {ulysses}\n"
    "    def _sum(self, x):\n"
    "        dist.all_reduce(x)\n"
)


def test_a_helper_called_only_from_allowed_functions_shares_their_permission() -> None:
    assert found(SHARED_HELPER.format(ulysses="x"), "src/transformer.py") == set()


def test_a_helper_also_called_from_a_forbidden_function_is_reported_with_that_caller() -> None:
    assert found(SHARED_HELPER.format(ulysses="self._sum(x)"), "src/transformer.py") == {
        ("forbidden-collective", 6, "forward_ulysses"),
        ("forbidden-collective", 8, "_sum"),
    }


def test_dynamic_access_tampering_store_and_forbidden_modules_ignore_the_policy() -> None:
    source = (
        "import torch.distributed as dist\n"
        "import torch.distributed.nn\n"
        "def my_allreduce(t):\n"
        "    getattr(dist, t.name)\n"
        "    dist.all_reduce.__wrapped__\n"
        "    dist.TCPStore('h', 1)\n"
    )
    policy = Policy({"src/collectives.py": EVERYTHING_ALLOWED})
    assert found(source, policy=policy) == {
        ("forbidden-module", 2, None),
        ("dynamic-dist-access", 4, "my_allreduce"),
        ("guard-tampering", 5, "my_allreduce"),
        ("store-access", 6, "my_allreduce"),
    }


# --------------------------------------------------------------------------- bad input


def test_a_syntax_error_is_one_finding_at_its_position() -> None:
    (finding,) = analyze_source("def my_allreduce(t):\n    return t +\n", "src/collectives.py", POLICY)
    assert (finding.rule, finding.line, finding.col) == ("syntax-error", 2, 14)
    assert finding.message == "invalid syntax" and finding.source == "return t +"


@pytest.fixture
def default_recursion_limit() -> Iterator[None]:
    """CPython's default, which the grader runs under: a module that raised it for the whole test process
    (jedi, imported with IPython by the notebook tests, sets 3000) made the deep expression checkable."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(before)


@pytest.mark.usefixtures("default_recursion_limit")
def test_unparseable_bytes_and_runaway_nesting_are_findings_not_exceptions() -> None:
    null_byte = analyze_source("x = 1\0\n", "src/collectives.py", POLICY)
    too_deep_to_parse = analyze_source("x = " + ".".join(["a"] * 50_000), "src/collectives.py", POLICY)
    too_deep_to_check = analyze_source("x = " + ".".join(["a"] * 900), "src/collectives.py", POLICY)
    assert [f.rule for f in null_byte + too_deep_to_parse] == ["syntax-error", "syntax-error"]
    assert [f.rule for f in too_deep_to_check] == ["analysis-error"]


def test_a_file_built_to_blow_up_the_analysis_is_reported_instead_of_analysed() -> None:
    # Each rebinding multiplies what `a` may denote; unbounded, this never finishes.
    source = "import torch\na = torch\n" + "".join(f"a = a.{name}\n" for name in "bcdef")
    assert found(source) == {("analysis-error", 1, None)}


def test_analyze_submission_reads_the_named_files_and_skips_missing_ones(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "collectives.py").write_text("import torch.distributed as dist\ndist.barrier()\n")
    (tmp_path / "src" / "transformer.py").write_bytes(b"x = '\xff'\n")
    findings = analyze_submission(tmp_path, ["src/collectives.py", "src/transformer.py", "src/missing.py"], STRICT)
    assert [(f.file, f.rule) for f in findings] == [
        ("src/collectives.py", "forbidden-collective"),
        ("src/transformer.py", "syntax-error"),
    ]


@pytest.mark.parametrize(
    ("import_line", "call"),
    [
        ("from .collectives import ar", "ar(x)"),
        ("from src.collectives import ar as reduce_", "reduce_(x)"),
        ("from . import collectives", "collectives.ar(x)"),
        ("import src.collectives", "src.collectives.ar(x)"),
        ("from collectives import ar", "ar(x)"),
    ],
)
def test_names_imported_from_another_student_file_are_judged_by_what_they_are_there(
    tmp_path: Path, import_line: str, call: str
) -> None:
    # A module-level alias is not a use where it is defined, so only its use can give it away.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "collectives.py").write_text("import torch.distributed as dist\nar = dist.all_reduce\n")
    transformer = f"{import_line}\nclass Block:\n    def forward_ulysses(self, x):\n        {call}\n"
    (tmp_path / "src" / "transformer.py").write_text(transformer)
    findings = analyze_submission(tmp_path, ["src/collectives.py", "src/transformer.py"], STRICT)
    assert [(f.file, f.rule, f.line, f.function) for f in findings] == [
        ("src/transformer.py", "forbidden-collective", 4, "forward_ulysses")
    ]


@pytest.mark.parametrize(
    ("import_line", "call"),
    [
        ("from .helpers import ar", "ar(t)"),
        ("from lib.helpers import ar", "ar(t)"),
        ("from helpers import ar", "ar(t)"),
        ("import lib.helpers as helpers", "helpers.ar(t)"),
        ("from lib import helpers", "helpers.ar(t)"),
    ],
)
def test_a_rubric_may_name_student_files_outside_src(tmp_path: Path, import_line: str, call: str) -> None:
    # lib/ops.py is the module lib.ops: its imports of lib/helpers.py resolve, however spelled.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helpers.py").write_text("import torch.distributed as dist\nar = dist.all_reduce\n")
    ops = f"{import_line}\n\ndef reduce_all(t):\n    {call}\n\ndef reduce_allowed(t):\n    {call}\n"
    (tmp_path / "lib" / "ops.py").write_text(ops)
    policy = Policy({"lib/ops.py::reduce_allowed": TP_COLLECTIVES})
    findings = analyze_submission(tmp_path, ["lib/ops.py", "lib/helpers.py"], policy)
    assert [(f.file, f.rule, f.line, f.function) for f in findings] == [
        ("lib/ops.py", "forbidden-collective", 4, "reduce_all")
    ]


# --------------------------------------------------------------------------- reached_apis


def test_reached_apis_lists_every_function_with_what_it_reaches_transitively() -> None:
    text = (CORPUS / "evasions" / "helper_taint.py").read_text()
    reached = reached_apis(text, "src/collectives.py", POLICY)
    assert reached["my_allreduce"] == reached["_combine"] == reached["_accumulate"] == {"all_reduce"}
    assert reached["my_broadcast"] == set()


def test_reached_apis_applies_the_policy_it_is_given() -> None:
    assert reached_apis(TP_BLOCK, "src/transformer.py", POLICY) == {
        "forward_tensor_parallel": set(),
        "forward_ulysses": {"all_reduce"},
    }
    assert reached_apis(TP_BLOCK, "src/transformer.py", STRICT)["forward_tensor_parallel"] == {"all_reduce"}


def test_reached_apis_names_process_group_methods_and_always_forbidden_apis() -> None:
    text = (CORPUS / "evasions" / "closure_unwrap.py").read_text()
    assert reached_apis(text, "src/collectives.py", POLICY)["my_allreduce"] == {"all_reduce", "__closure__"}
    text = (CORPUS / "evasions" / "pg_on_self.py").read_text()
    assert reached_apis(text, "src/collectives.py", POLICY)["my_allreduce"] == {"allreduce"}


# --------------------------------------------------------------------------- independence from torch


def test_the_module_imports_without_torch() -> None:
    code = "import sys, grader.check, grader.runtimes.torchdist.static; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent).returncode == 0


# --------------------------------------------------------------------------- grader check


def submission(root: Path, *, flat: bool = False) -> Path:
    """A student repo: collectives with a tainted helper, and a transformer using TP collectives."""
    src = root if flat else root / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "collectives.py").write_text((CORPUS / "evasions" / "helper_taint.py").read_text())
    (src / "transformer.py").write_text(TP_BLOCK)
    return root


@pytest.fixture
def rubric(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default rubric with :data:`POLICY` instead of its own (which allows Task 2 collectives anywhere)."""
    text = (Path(__file__).parent.parent / "rubrics" / "a9.yaml").read_text()
    allow = "    src/transformer.py: [all_reduce, all_gather]\n"
    assert allow in text
    functions = ("forward_tensor_parallel", "init_tensor_parallel_shards")
    path = tmp_path_factory.mktemp("rubric") / "a9.yaml"
    path.write_text(
        text.replace(allow, "".join(f"    src/transformer.py::{f}: [all_reduce, all_gather]\n" for f in functions))
    )
    return path


def test_check_prints_each_finding_like_a_compiler_and_exits_0(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(submission(tmp_path)), "--rubric", str(rubric)]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("src/collectives.py:11:5:")))
    assert lines[first].startswith(
        "src/collectives.py:11:5: forbidden-collective in _accumulate: dist.all_reduce is not allowed"
    )
    assert lines[first + 1] == "    dist.all_reduce(buffer)"
    assert any(line.startswith("src/transformer.py:6:9: forbidden-collective in forward_ulysses:") for line in lines)
    assert lines[-1] == "4 findings in src/collectives.py, src/transformer.py"


def test_check_json_lists_the_findings_as_result_dicts(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(submission(tmp_path)), "--json", "--rubric", str(rubric)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["files"] == ["src/collectives.py", "src/transformer.py"]
    assert {(f["file"], f["line"], f["function"]) for f in payload["findings"]} == {
        ("src/collectives.py", 11, "_accumulate"),
        ("src/collectives.py", 16, "_combine"),
        ("src/collectives.py", 21, "my_allreduce"),
        ("src/transformer.py", 6, "forward_ulysses"),
    }
    assert set(payload["findings"][0]) == {"rule", "message", "file", "line", "col", "function", "source", "origin"}


def test_check_accepts_a_flat_directory_and_names_files_by_their_rubric_paths(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # transformer.py at the top level is still src/transformer.py for the policy: TP stays allowed.
    assert cli.main(["check", str(submission(tmp_path, flat=True)), "--json", "--rubric", str(rubric)]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {(f["file"], f["function"]) for f in findings if f["file"] == "src/transformer.py"} == {
        ("src/transformer.py", "forward_ulysses")
    }


def test_check_finds_the_files_where_grading_does(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A GitHub Classroom download wraps the repo in a folder: intake looks there, so check does too.
    download = tmp_path / "download"
    submission(download / "a9-student")
    assert cli.main(["check", str(download), "--json", "--rubric", str(rubric)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["files"] == ["src/collectives.py", "src/transformer.py"]
    assert [Finding(**f) for f in payload["findings"]] == analyze_submission(
        download / "a9-student", STUDENT_FILES, POLICY
    )


def test_check_takes_an_archive_as_grading_does(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = submission(tmp_path / "repo")
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(root.rglob("*.py")):
            zipped.write(path, path.relative_to(root).as_posix())
    assert cli.main(["check", str(archive), "--rubric", str(rubric)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "4 findings in src/collectives.py, src/transformer.py"


def test_check_refuses_what_grading_refuses_and_says_why(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = submission(tmp_path / "repo")
    outside = tmp_path / "elsewhere.py"
    (root / "src" / "transformer.py").rename(outside)
    (root / "src" / "transformer.py").symlink_to(outside)
    assert cli.main(["check", str(root), "--rubric", str(rubric)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "3 findings in src/collectives.py"
    assert "grader: note: src/transformer.py is a symlink: refused" in captured.err.splitlines()


def test_check_of_a_folder_holding_several_submissions_exits_1(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    submission(tmp_path / "alice")
    submission(tmp_path / "bob")
    assert cli.main(["check", str(tmp_path), "--rubric", str(rubric)]) == 1
    assert "several submissions" in capsys.readouterr().err


def test_check_accepts_a_single_file(tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = submission(tmp_path) / "src" / "transformer.py"
    assert cli.main(["check", str(path), "--rubric", str(rubric)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 finding in transformer.py"


def test_check_shows_the_findings_grading_uses(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `grader grade` calls analyze_submission; `grader check` must not tell the student otherwise.
    root = submission(tmp_path)
    collectives = root / "src" / "collectives.py"
    collectives.write_text("from grader.matrix import guard\n" + collectives.read_text())
    assert cli.main(["check", str(root), "--json", "--rubric", str(rubric)]) == 0
    shown = [Finding(**f) for f in json.loads(capsys.readouterr().out)["findings"]]
    graded = analyze_submission(root, STUDENT_FILES, POLICY)
    assert shown == graded and "grader-internals" in {f.rule for f in shown}


def test_check_uses_the_rubric_policy_and_student_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []

    def load_rubric(path: Path | None) -> Rubric:
        seen.append(path)
        policy = Policy({"src/collectives.py": EVERYTHING_ALLOWED})
        return dataclasses.replace(A9, policy=policy, student_files=("src/collectives.py",))

    monkeypatch.setattr(grader.rubric, "load_rubric", load_rubric)
    rubric = tmp_path / "rubric.yaml"
    assert cli.main(["check", str(submission(tmp_path)), "--rubric", str(rubric)]) == 0
    assert seen == [rubric]
    assert capsys.readouterr().out.splitlines() == ["no findings in src/collectives.py"]


def test_check_of_a_missing_path_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(tmp_path / "nowhere")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_check_of_a_directory_without_student_files_exits_1(
    tmp_path: Path, rubric: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(tmp_path), "--rubric", str(rubric)]) == 1
    assert "no student files" in capsys.readouterr().err


def test_grader_check_runs_as_a_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(submission(tmp_path))],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert "src/collectives.py:21:18: forbidden-collective in my_allreduce:" in result.stdout
