"""A report's code blocks as Python statements ready to splice: parsed leniently, GPU idioms mapped.

Students write their snippets for the course's GPU nodes and in every shape: a whole function, a
loop, the lines of a ``# TODO``, a lone ``if cond:`` line.  This module turns the code blocks under
one question into statements the grader's CPU/Gloo ranks can run, or says why it cannot.  It only
parses (``ast``): nothing here executes a snippet.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from grader.handin.blocks import NOT_PYTHON as NOT_PYTHON  # re-exported: the pack's review reads it
from grader.handin.blocks import is_python, python_source
from grader.handin.report import CodeBlock
from grader.packs.a5.tree import CPU_DEVICE

_CUDA_DEVICE = re.compile(r"^cuda(:\d+)?$")
_HALF = {"bfloat16", "float16", "half", "bf16"}
#: torch.cuda calls that do nothing on CPU: synchronising, choosing or seeding a device
_CUDA_NO_OPS = {
    "synchronize",
    "set_device",
    "empty_cache",
    "manual_seed",
    "manual_seed_all",
    "reset_peak_memory_stats",
    "ipc_collect",
}


@dataclass
class Parsed:
    statements: list[ast.stmt]
    lines: list[int]  # report lines of the blocks used
    problem: str = ""  # why nothing usable was found ("" when statements were)
    note: str = ""  # blocks left out, said to the student


class CpuMapped(ast.NodeTransformer):
    """GPU idioms of the handout's setting, rewritten by their meaning for the grader's CPU ranks,
    whatever their spelling (spacing, keyword order, aliases are not in an AST):

    - ``x.cuda(...)`` with any arguments (``non_blocking=True``, a device) is ``x``;
    - a device argument, ``.to``'s first or any call's ``device=``, goes through the rank's
      :func:`~grader.packs.a5.tree.cpu_device`, which makes a CUDA device of any form (a string, a
      ``torch.device``, an index such as ``local_rank``) the CPU by its value: ``.to(device)`` with a
      CUDA ``device`` maps however ``device`` was made;
    - ``torch.cuda.synchronize()`` and the other calls that only choose, seed or wait for a GPU are
      ``None``, through any name of the module (``torch.cuda``, ``cuda``, ``T.cuda``);
    - ``"cuda"``/``"cuda:0"``/``f"cuda:{r}"`` are ``"cpu"``; NCCL is Gloo; bf16 and fp16 are float32."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda":
            return func.value  # tensor.cuda(), model.cuda(device), batch.cuda(non_blocking=True)
        if isinstance(func, ast.Attribute) and func.attr in _CUDA_NO_OPS and _is_cuda_module(func.value):
            return ast.Constant(None)
        if isinstance(func, ast.Attribute) and func.attr == "to" and node.args:
            node.args[0] = _on_cpu(node.args[0])
        for keyword in node.keywords:
            if keyword.arg == "device":
                keyword.value = _on_cpu(keyword.value)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and _CUDA_DEVICE.match(node.value):
            return ast.Constant("cpu")
        if node.value == "nccl":
            return ast.Constant("gloo")
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        first = node.values[0] if node.values else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("cuda"):
            return ast.Constant("cpu")  # f"cuda:{local_rank}"
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in _HALF and isinstance(node.value, ast.Name) and node.value.id == "torch":
            return ast.copy_location(ast.Attribute(node.value, "float32", node.ctx), node)
        return node


def _is_cuda_module(node: ast.expr) -> bool:
    """``torch.cuda``, ``T.cuda`` or ``cuda`` (``from torch import cuda``)."""
    return (isinstance(node, ast.Attribute) and node.attr == "cuda") or (
        isinstance(node, ast.Name) and node.id == "cuda"
    )


def _on_cpu(device: ast.expr) -> ast.expr:
    """``device`` passed through the rank's ``cpu_device``, decided on its value when it runs."""
    call = ast.Call(ast.Name(CPU_DEVICE, ast.Load()), [device], [])
    return ast.copy_location(call, device)


def _completed(source: str) -> str:
    """A lone header line (``if cond:``, ``for x in y:``) given a body, so that it parses."""
    lines = source.rstrip().splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        out.append(line)
        stripped = line.split("#", 1)[0].rstrip()
        if stripped.endswith(":"):
            indent = len(line) - len(line.lstrip())
            following = next((ln for ln in lines[i + 1 :] if ln.strip()), None)
            if following is None or len(following) - len(following.lstrip()) <= indent:
                out.append(" " * indent + "    pass")
    return "\n".join(out) + "\n"


def parse_block(text: str) -> tuple[list[ast.stmt] | None, str]:
    """A block's statements with GPU idioms mapped, or None and why it does not parse."""
    source = python_source(text)  # the one reader of a block, the similarity check's too
    error: SyntaxError | None = None
    for attempt in (source, _completed(source)):
        try:
            tree = ast.parse(attempt)
        except SyntaxError as exc:
            error = error or exc
            continue
        except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte, absurd nesting
            return None, f"does not parse ({type(exc).__name__})"
        mapped = CpuMapped().visit(tree)
        ast.fix_missing_locations(mapped)
        return list(mapped.body), ""
    assert error is not None
    return None, f"does not parse: line {error.lineno}: {error.msg}"


def parse_blocks(blocks: list[CodeBlock]) -> Parsed:
    """Every Python block of one answer, in order, as one list of statements."""
    statements: list[ast.stmt] = []
    used: list[int] = []
    skipped: list[str] = []
    for block in blocks:
        if not is_python(block.info):
            continue
        parsed, problem = parse_block(block.text)
        if parsed is None:
            skipped.append(f"the block at line {block.line} {problem}")
            continue
        for stmt in parsed:  # report lines, so that a traceback points into the report
            ast.increment_lineno(stmt, block.line)
            stmt.a5_report = True  # type: ignore[attr-defined]
        statements.extend(parsed)
        used.append(block.line)
    if not statements:
        empty = "its code block holds no code, only comments" if used else "no code block found"
        problem = "; ".join(skipped) if skipped else empty
        return Parsed([], [], problem)
    return Parsed(statements, used, note=("; ".join(skipped) + ", left out") if skipped else "")


def same(a: ast.AST, b: ast.AST) -> bool:
    """The same code, whatever its formatting and comments."""
    return ast.dump(a) == ast.dump(b)


def defines(statements: list[ast.stmt], name: str) -> list[ast.FunctionDef]:
    return [s for s in statements if isinstance(s, ast.FunctionDef) and s.name == name]
