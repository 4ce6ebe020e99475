"""The site's reference pages, generated from the code so they cannot drift from it.

``{cli-reference}`` walks ``grader.cli.build_parser()``: a section per subcommand (nested ones too) with
its usage line and every argument that ``--help`` shows.  ``{format-reference}`` walks every JSON Schema
in ``grader/schemas/``: a section per file with a row per field, its path, type, whether it is required
and its description.  Both build docutils nodes from the text as plain text, never parsing a help string
or a description as markup, so no character in them can break the build.  ``tests/test_docs.py`` checks
the built pages name every flag and every field.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

SCHEMAS = Path(__file__).resolve().parents[2] / "grader" / "schemas"


def _section(directive: SphinxDirective, title: str, anchor: str) -> nodes.section:
    section = nodes.section(ids=[nodes.make_id(anchor)], names=[nodes.fully_normalize_name(anchor)])
    section += nodes.title(text=title)
    directive.state.document.note_implicit_target(section, section)
    return section


def _paragraph(text: str) -> nodes.paragraph:
    return nodes.paragraph(text=text)


def _table(header: list[str], rows: list[list[nodes.Node | str]], widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["reference-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    body = nodes.tbody()
    group += body
    for target, cells in ((head, [header]), (body, rows)):
        for cells_of_row in cells:
            row = nodes.row()
            for cell in cells_of_row:
                entry = nodes.entry()
                entry += cell if isinstance(cell, nodes.Node) else _paragraph(cell)
                row += entry
            target += row
    return table


def _literal(text: str) -> nodes.paragraph:
    paragraph = nodes.paragraph()
    paragraph += nodes.literal(text=text)
    return paragraph


# ---- the command line ------------------------------------------------------------------------------


def shown_arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The arguments ``--help`` lists: not the subcommand dispatcher, not the suppressed ones."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        yield action


def subcommands(
    parser: argparse.ArgumentParser, prefix: str = "grader"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(\"grader rubric validate\", parser)`` for every subcommand, depth first, in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield f"{prefix} {name}", child
                yield from subcommands(child, f"{prefix} {name}")


def _argument_row(action: argparse.Action) -> list[nodes.Node | str]:
    name = ", ".join(action.option_strings) if action.option_strings else action.metavar or action.dest
    if action.option_strings and action.nargs != 0:
        metavar = action.metavar or (
            f"{{{','.join(map(str, action.choices))}}}" if action.choices else action.dest.upper()
        )
        name = f"{name} {metavar}"
    details = [action.help or ""]
    if action.choices and not isinstance(action.choices, dict):
        details.append(f"choices: {', '.join(map(str, action.choices))}")
    if action.required and action.option_strings:
        details.append("required")
    if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
        details.append(f"default: {action.default}")
    return [_literal(name), "; ".join(part for part in details if part)]


class CliReference(SphinxDirective):
    """``{cli-reference}``: the whole ``grader`` command line."""

    def run(self) -> list[nodes.Node]:
        from grader.cli import build_parser

        parser = build_parser()
        parser.prog = "grader"
        found: list[nodes.Node] = []
        for command, child in [("grader", parser), *subcommands(parser)]:
            section = _section(self, command, f"cli-{command}")
            child.prog = command
            if child.description or command == "grader":
                section += _paragraph((child.description or "").strip().split("\n\n")[0])
            help_line = _help_of(parser, command)
            if help_line:
                section += _paragraph(help_line)
            section += _literal_block(_usage(child))
            rows = [_argument_row(action) for action in shown_arguments(child)]
            if rows:
                section += _table(["argument", "what it does"], rows, [30, 70])
            found.append(section)
        return found


def _literal_block(text: str) -> nodes.literal_block:
    return nodes.literal_block(text, text.rstrip(), language="text")


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line wrapped at 88 columns, whatever terminal the build runs in."""
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=88)
    return parser.format_usage()


def _help_of(root: argparse.ArgumentParser, command: str) -> str:
    """The one-line help its parent's ``--help`` gives a subcommand."""
    parser, words = root, command.split()[1:]
    helped = ""
    for word in words:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if choice.dest == word:
                        helped = choice.help or ""
                parser = action.choices[word]
                break
    return helped


# ---- the file formats ------------------------------------------------------------------------------


def schema_files() -> list[Path]:
    """Every schema the grader ships: a new file in ``grader/schemas/`` joins the reference by itself."""
    return sorted(SCHEMAS.glob("*.json"))


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema and schema["$ref"].startswith("#/"):
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        schema = {**target, **{key: value for key, value in schema.items() if key != "$ref"}}
    return schema


def _type_of(schema: dict[str, Any], root: dict[str, Any]) -> str:
    schema = _resolve(schema, root)
    if "const" in schema:
        return f"const {json.dumps(schema['const'])}"
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(value) for value in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type_of(option, root) for option in schema[key])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_type_of(schema['items'], root)}"
    limits = [
        f"{key} {schema[key]}"
        for key in ("minimum", "exclusiveMinimum", "maximum", "minLength", "pattern")
        if key in schema
    ]
    return f"{kind} ({', '.join(limits)})" if limits else str(kind)


def schema_fields(
    schema: dict[str, Any], root: dict[str, Any], path: str = "", seen: frozenset[str] = frozenset()
) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """``(path, schema, required)`` for every named field, nested ones by dotted path (``[]`` for an array's
    items, ``{name}`` for a mapping's values); a ``$ref`` already on the way down is not entered again."""
    ref = schema.get("$ref")
    if ref in seen:
        return
    seen = seen | {ref} if ref else seen
    schema = _resolve(schema, root)
    required = set(schema.get("required", ()))
    for name, child in schema.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        yield child_path, child, name in required
        yield from schema_fields(child, root, child_path, seen)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_fields(schema["additionalProperties"], root, f"{path}.{{name}}" if path else "{name}", seen)
    if isinstance(schema.get("items"), dict):
        yield from schema_fields(schema["items"], root, f"{path}[]", seen)
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, ()):
            yield from schema_fields(option, root, path, seen)
    for key in ("then", "else"):
        if isinstance(schema.get(key), dict):
            yield from schema_fields(schema[key], root, path, seen)


class FormatReference(SphinxDirective):
    """``{format-reference}``: every field of every schema in ``grader/schemas/``."""

    def run(self) -> list[nodes.Node]:
        found: list[nodes.Node] = []
        for file in schema_files():
            self.env.note_dependency(str(file))
            root = json.loads(file.read_text())
            section = _section(self, f"{root.get('title', file.stem)} ({file.name})", f"format-{file.stem}")
            section += _literal(f"grader/schemas/{file.name}")
            if root.get("description"):
                section += _paragraph(root["description"])
            rows: list[list[nodes.Node | str]] = []
            listed: set[str] = set()
            for path, child, required in schema_fields(root, root):
                if path in listed:  # one row per path, where alternatives (anyOf) repeat a field
                    continue
                listed.add(path)
                description = _resolve(child, root).get("description", "")
                kind = f"{_type_of(child, root)}, required" if required else _type_of(child, root)
                rows.append([_literal(path), kind, description])
            section += _table(["field", "type", "what it is"], rows, [30, 25, 45])
            found.append(section)
        return found


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cli-reference", CliReference)
    app.add_directive("format-reference", FormatReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
