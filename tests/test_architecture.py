"""docs/ARCHITECTURE.md names only modules and commands that exist (issue 40: it had drifted from the
code in eight places, silently).

What the document names, and how each is checked (pure Python: the text, the tree and the argparse
parser, nothing imported but ``grader.cli``):

- a path under ``grader/`` (``grader/matrix/plugin.py``, ``grader/packs/a9/``): that file or folder;
- a path relative to ``grader/`` (the layout and the tables: ``runtimes/torchdist/launcher.py``, or
  the shorter ``torchdist/rank.py``): a file or folder of ``grader/`` whose path ends so;
- a module alone in the layout or a table's first column (``intake.py``, ``portable_group.py``): a
  module of that name in ``grader/`` (in prose a lone ``ops.py`` is a student's file, not checked);
- a dotted name (``grader.pack.Case``): the modules it walks, then a top-level name of the last one;
- ``grader COMMAND``: a sub-command of ``grader.cli.build_parser()`` (and its own sub-command, as in
  ``grader rubric validate``), and the layout's "argparse front end" lists every one of them.
"""

from __future__ import annotations

import argparse
import ast
import re
from functools import cache
from pathlib import Path

import pytest

from grader.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
GRADER = ROOT / "grader"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

PATH = re.compile(r"(?:[\w-]+/)*[\w-]+(?:\.py|/)")  # a module or a folder, as the document writes it
DOTTED = re.compile(r"(?<![\w./-])grader(?:\.\w+)+")
COMMAND = re.compile(r"^grader ([a-z]+)(?: ([a-z]+))?")
FRONT_END = re.compile(r"^cli\.py +argparse front end: (.*?)\n(?=\S)", re.M | re.S)


def layout(text: str) -> str:
    """The first fenced block: the package's layout, one entry per line."""
    return text.split("```", 2)[1]


def table_heads(text: str) -> list[str]:
    """Each table row's first cell."""
    return [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]


def spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


@cache
def grader_paths() -> tuple[str, ...]:
    """Every file and folder of ``grader/``, relative to it ("runtimes/torchdist/" for a folder)."""
    found = [p for p in GRADER.rglob("*") if "__pycache__" not in p.parts]
    return tuple(p.relative_to(GRADER).as_posix() + ("/" if p.is_dir() else "") for p in found)


def path_exists(token: str) -> bool:
    if token.startswith(("grader/", "tests/", "scripts/", "docs/")):
        return (ROOT / token).exists()
    return any(p == token or p.endswith("/" + token) for p in grader_paths())


def top_level_names(module: Path) -> set[str]:
    """What a module defines, assigns or imports at its top level."""
    names = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def dotted_exists(name: str) -> bool:
    """``grader.a.b.C``: packages and modules as far as they go, then a top-level name of the last module."""
    here, parts = ROOT, name.split(".")
    while parts and ((here / parts[0]).is_dir() or (here / f"{parts[0]}.py").is_file()):
        here = here / parts[0] if (here / parts[0]).is_dir() else here / f"{parts[0]}.py"
        parts.pop(0)
    module = here if here.is_file() else here / "__init__.py"
    return not parts or (module.is_file() and parts[0] in top_level_names(module))


def unknown_modules(text: str) -> list[str]:
    """What the document names as a module, package or name of ``grader`` that does not exist."""
    named = {s for s in spans(text) if PATH.fullmatch(s) and ("/" in s.rstrip("/") or s == "grader/")}
    named |= set(re.findall(r"grader/[\w/.-]*[\w/]", text))
    heads = [t for line in [*layout(text).splitlines(), *table_heads(text)] for t in re.split(r"[\s`,;:()]+", line)]
    named |= {t for t in heads if PATH.fullmatch(t)}
    missing = sorted(t for t in named if not path_exists(t))
    return missing + sorted({d for d in DOTTED.findall(text) if not dotted_exists(d)})


def commands() -> dict[str, set[str]]:
    """``grader``'s sub-commands, each with its own sub-commands (``rubric``: ``validate``)."""

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return {name: sub for a in actions for name, sub in a.choices.items()}

    return {name: set(subcommands(sub)) for name, sub in subcommands(build_parser()).items()}


def unknown_commands(text: str) -> list[str]:
    """``grader X`` the parser does not know, and how the layout's list of commands differs from the parser's."""
    known = commands()
    mentions = [s for s in spans(text) if s.startswith("grader ")] + layout(text).splitlines()
    wrong = set()
    for mention in mentions:
        found = COMMAND.match(mention)
        if found is None:
            continue
        command, second = found.groups()
        if command not in known or (known[command] and second not in known[command]):
            wrong.add(" ".join(w for w in found.groups() if w))
    front_end = FRONT_END.search(layout(text))
    listed = {item.strip() for item in front_end.group(1).replace("\n", " ").split(",")} if front_end else set()
    every = {f"{name} {sub}".strip() for name, subs in known.items() for sub in (subs or {""})}
    return sorted(wrong) + [f"front end lists {sorted(listed)}, the parser has {sorted(every)}"] * (listed != every)


def test_every_module_and_package_the_architecture_names_exists() -> None:
    assert unknown_modules(DOC.read_text()) == []


def test_every_command_the_architecture_names_is_one_of_the_cli() -> None:
    assert unknown_commands(DOC.read_text()) == []


@pytest.mark.parametrize(
    ("drift", "reported"),
    [
        ("grader/bogus.py is where it happens", "grader/bogus.py"),
        ("see `runtimes/torchdist/bogus.py`", "runtimes/torchdist/bogus.py"),
        ("| `sandbox/bogus.py` | rank | nothing |", "sandbox/bogus.py"),
        ("`grader.pack.Bogus` is the contract", "grader.pack.Bogus"),
        ("`grader.bogus.thing` is the contract", "grader.bogus.thing"),
    ],
)
def test_a_module_that_does_not_exist_is_reported(drift: str, reported: str) -> None:
    assert reported in unknown_modules(DOC.read_text() + "\n" + drift + "\n")


def test_a_layout_entry_that_does_not_exist_is_reported() -> None:
    text = DOC.read_text().replace("  limits.py ", "  bogus.py  ", 1)
    assert unknown_modules(text) == ["bogus.py"]


def test_a_command_that_does_not_exist_or_is_left_off_the_list_is_reported() -> None:
    text = DOC.read_text()
    assert unknown_commands(text + "\nrun `grader bogus DIR`\n") == ["bogus"]
    assert unknown_commands(text + "\nrun `grader rubric bogus`\n") == ["rubric bogus"]
    left_off = unknown_commands(text.replace(" annotate,\n", "\n", 1))
    assert len(left_off) == 1 and left_off[0].startswith("front end lists")
