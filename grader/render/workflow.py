"""``grader annotate results.json``: GitHub workflow annotations on the student's own files.

Static findings, and the line a hang or a crash was at, become ``::error file=...,line=...,title=...::...``
commands, written from ``results.json`` alone (never echoed from student output).  Every string in
a command may come from student code (a finding's message, an exception's text), so each is escaped
as GitHub's workflow-command format requires (``%``, CR and LF in the message; also ``:`` and ``,``
in a property), and nothing can start a command of its own.  :func:`workflow_safe` does the same for
anything else the grader prints in a workflow's log: a line that starts like a command is defused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: GitHub shows at most 10 error annotations per step: the rest would be dropped silently.
MAX_ANNOTATIONS = 10
_AT_LINE = re.compile(r"\bat (?P<file>[\w.-]+\.py):(?P<line>\d+)")
_COMMAND_START = re.compile(r"^(\s*)(::|##\[)", re.MULTILINE)
FAILED_AT_A_LINE = ("hang", "crash", "memory")


def escape_data(text: str) -> str:
    """A command's message: GitHub unescapes %25, %0D and %0A."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property value: as a message, and ``:`` and ``,`` too (they end a property)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_safe(text: str) -> str:
    """Text for a workflow log in which no line can be read as a workflow command (``::add-mask::``,
    ``::stop-commands::``, the old ``##[set-output ...]``): such a line gets a visible ``| `` first."""
    return _COMMAND_START.sub(r"\1| \2", text)


def commands_for(result: Mapping[str, Any]) -> list[str]:
    """The annotation commands for a ``results.json`` (already parsed), at most ``MAX_ANNOTATIONS``."""
    files = [str(name) for name in _mapping(_mapping(result.get("submission")).get("files"))]
    found: dict[tuple[str, int, str], list[str]] = {}
    for finding in _list(result.get("findings")):
        finding = _mapping(finding)
        file, line = str(finding.get("file", "")), _int(finding.get("line"))
        if file in files and line > 0:
            rule = str(finding.get("rule", "policy"))
            found.setdefault((file, line, f"policy: {rule}"), []).append(str(finding.get("message", "")))
    for case in _list(result.get("cases")):
        case = _mapping(case)
        verdict, message = str(case.get("verdict", "")), str(case.get("message", ""))
        where = _AT_LINE.search(message) if verdict in FAILED_AT_A_LINE else None
        matches = [f for f in files if where and Path(f).name == where["file"]]
        if where and len(matches) == 1:
            key = (matches[0], int(where["line"]), f"{verdict} in {case.get('id', '?')}")
            found.setdefault(key, []).append(message)
    commands = []
    for (file, line, title), messages in list(found.items())[:MAX_ANNOTATIONS]:
        more = f" (and {len(messages) - 1} more here)" if len(messages) > 1 else ""
        props = f"file={escape_property(file)},line={line},title={escape_property(title)}"
        commands.append(f"::error {props}::{escape_data(messages[0] + more)}")
    return commands


def main(args: Any) -> int:
    from grader.errors import UserError

    path = Path(args.results)
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable results.json ({exc})") from None
    for command in commands_for(_mapping(result)):
        print(command)
    return 0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
