"""A rubric's YAML with the position of every value, and its shape checked against the schema.

Every error names ``FILE:LINE:COL`` of the YAML node at fault, so whoever edits a rubric is told
where the problem is, not just what it is.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from grader.errors import UserError

#: Values in a rubric document, counted along every path an alias gives them.
MAX_NODES = 100_000

KeyPath = tuple[str | int, ...]
Error = tuple[tuple[int, int], str]  # ((line, col), "FILE:LINE:COL: reason")


class _Loader(yaml.SafeLoader):
    """A safe loader that keeps timestamps as strings: the schema expects ISO strings for deadlines."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class Positions:
    """Where each value (and each mapping key) of the document starts, by its path."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.values: dict[KeyPath, yaml.Mark] = {}
        self.keys: dict[KeyPath, yaml.Mark] = {}
        self.duplicates: list[KeyPath] = []

    def record(self, top: yaml.Node, path: KeyPath) -> None:
        """Walk the document; YAML aliases repeat a node under every path that names it, so the walk
        is bounded (:data:`MAX_NODES`) rather than left to grow with each alias of an alias."""
        pending = [(top, path)]
        while pending:
            node, path = pending.pop()
            self.values[path] = node.start_mark
            if len(self.values) > MAX_NODES:
                raise UserError(f"{self.file}: over {MAX_NODES} values (aliases included): too large to be a rubric")
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    key_path = (*path, str(key_node.value))
                    if key_path in self.keys:
                        self.duplicates.append(key_path)
                    self.keys[key_path] = key_node.start_mark
                    pending.append((value_node, key_path))
            elif isinstance(node, yaml.SequenceNode):
                pending.extend((child, (*path, index)) for index, child in enumerate(node.value))

    def error(self, path: KeyPath, reason: str, *, key: bool = False) -> Error:
        """An error at the key (``key=True``) or value at ``path``, else at its nearest ancestor."""
        mark = self.keys.get(path) if key else None
        prefix = path
        while mark is None:
            mark = self.values.get(prefix)
            prefix = prefix[:-1]
        return (mark.line, mark.column), f"{self.file}:{mark.line + 1}:{mark.column + 1}: {reason}"


def parse(path: Path, text: str) -> tuple[Any, Positions]:
    try:
        loader = _Loader(text)  # its reader refuses characters YAML does not allow, right away
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: invalid YAML: {exc}") from exc
    try:
        node = loader.get_single_node()
        if node is None:
            raise UserError(f"{path}:1:1: the rubric is empty")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserError(f"{where}: invalid YAML: {exc.problem or exc.context}") from exc
    finally:
        loader.dispose()
    positions = Positions(path)
    positions.record(node, ())
    return data, positions


def report(errors: list[Error]) -> str:
    return "\n".join(text for _, text in sorted(errors))


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)  # a key may be null
    return out or "rubric"


@functools.lru_cache(maxsize=4)
def _validator(schema: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((Path(__file__).resolve().parent.parent / "schemas" / schema).read_text()))


def schema_errors(data: Any, positions: Positions, schema: str = "rubric.schema.json") -> list[Error]:
    """Every way ``data`` breaks ``schema`` (a file of ``grader/schemas``), each at its line: the rubric's
    and the service configuration's (``grader.service.config``) alike."""
    errors = [positions.error(p, f"duplicate key {p[-1]!r}", key=True) for p in positions.duplicates]
    for err in _validator(schema).iter_errors(data):
        path: KeyPath = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = err.schema.get("properties", {})
            for key in (k for k in err.instance if k not in known):
                expected = ", ".join(known)
                reason = f"{dotted((*path, key))}: unknown key {key!r} (expected one of: {expected})"
                errors.append(positions.error((*path, str(key)), reason, key=True))
        elif err.validator == "anyOf":  # its own message names no fix: the schema's description does
            expected = err.schema.get("description", "one of the forms the schema describes")
            errors.append(positions.error(path, f"{dotted(path)}: expected {expected}"))
        else:
            errors.append(positions.error(path, f"{dotted(path)}: {err.message}"))
    return errors
