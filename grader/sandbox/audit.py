"""Rank side: a PEP 578 audit hook that keeps student code out of the interpreter's back doors.

Nothing in a rank's memory decides a grade (the zygote holds no expected values; the facts that
earn points are measured by the session), so this layer is defence in depth: it refuses the
tools a student would use to reach the rank runtime's objects or to leave Python's rules.

Refused when *student code* asks (see :func:`_requester`):

- every ``ctypes`` event (loading libraries, calling foreign functions, reading raw memory);
- ``gc.get_objects`` / ``get_referrers`` / ``get_referents`` (a way to every live object);
- frames of the rank runtime, through ``sys._getframe``, ``sys._current_frames``, a traceback's
  ``tb_frame`` or a generator's or coroutine's frame (the student's own frames stay reachable:
  ``logging`` and ``traceback`` keep working);
- building code objects (``code.__new__``, ``code.replace``), functions from code objects
  (``function.__new__``), replacing a function's ``__code__``, ``marshal.loads``, and ``compile``
  under the file name of library or runtime code (which would pass for it below).

Who asks: the innermost frame on the stack that is neither the standard library nor the hook
itself decides.  A frame whose code object is the runtime's own (collected by :func:`preload` in
the zygote, compared by identity, so no equal-looking code can pass for it) is the grader; a
frame in site-packages or of the import system (which unmarshals every ``.pyc`` it loads) is a
library (torch may use ctypes); anything else is the student's.

The hook cannot be removed (``sys.addaudithook`` has no inverse) and its state lives only in its
closure, which no Python code can reach: the function object is referenced by the interpreter
alone, and the ways to find it (``gc``, frames) are what it refuses.
"""

from __future__ import annotations

import site
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from typing import Any

#: Modules whose code counts as the grader's inside a rank.
RUNTIME_PREFIXES = ("grader.sandbox", "grader.packs", "grader.runtimes", "grader.handin")
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_code"})
REFUSED = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"})
CODE_EVENTS = frozenset({"code.__new__", "function.__new__", "marshal.loads", "marshal.load"})
IMPORT_SYSTEM = "<frozen importlib._bootstrap"  # _bootstrap and _bootstrap_external

_runtime_codes: tuple[frozenset[int], list[types.CodeType]] | None = None
_prefixes: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # _library_prefixes(), from the zygote


class SandboxRefusal(PermissionError):
    """What student code gets instead of a back door."""


def preload(bodies: str = "") -> None:
    """Zygote side: the identities of every code object of the rank runtime and of the pack's
    rank-side module ``bodies`` and its package (kept alive here)."""
    global _runtime_codes, _prefixes
    pack = (bodies.rpartition(".")[0] or bodies,) if bodies else ()
    codes = list(_runtime_code_objects((*RUNTIME_PREFIXES, *pack)))
    _runtime_codes = (frozenset(map(id, codes)), codes)
    _prefixes = _library_prefixes()  # sysconfig's first answer takes 3 ms: here once, not in every rank


def _runtime_code_objects(prefixes: tuple[str, ...]) -> Iterator[types.CodeType]:
    seen: set[int] = set()
    stack: list[Any] = [m for name, m in list(sys.modules.items()) if name.startswith(prefixes)]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, types.CodeType):
            yield item
            stack.extend(c for c in item.co_consts if isinstance(c, types.CodeType))
        elif isinstance(item, types.ModuleType):
            stack.extend(v for k, v in vars(item).items() if _defined_in(v, item.__name__))
        elif isinstance(item, type):
            stack.extend(vars(item).values())
        elif isinstance(item, types.FunctionType):
            stack.append(item.__code__)
        elif isinstance(item, (staticmethod, classmethod, property)):
            stack.extend(x for x in (getattr(item, "__func__", None), getattr(item, "fget", None)) if x)


def _defined_in(value: Any, module: str) -> bool:
    return getattr(value, "__module__", None) == module


def install() -> str:
    """Rank side, the last layer before the first student import."""
    if _runtime_codes is None or _prefixes is None:
        preload()
    assert _runtime_codes is not None and _prefixes is not None
    sys.addaudithook(_make_hook(_runtime_codes[0], _prefixes))
    return "on"


def _library_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(standard library, site-packages) prefixes of ``co_filename``; frozen modules (importlib's
    bootstrap) count as the standard library."""
    paths = sysconfig.get_paths()
    stdlib = tuple(dict.fromkeys([*(p + "/" for p in (paths["stdlib"], paths["platstdlib"])), "<frozen "]))
    libraries = [paths["purelib"], paths["platlib"], *site.getsitepackages(), site.getusersitepackages()]
    return stdlib, tuple(dict.fromkeys(p + "/" for p in libraries if p))


def _make_hook(
    runtime: frozenset[int], prefixes: tuple[tuple[str, ...], tuple[str, ...]]
) -> Callable[[str, tuple[Any, ...]], None]:
    stdlib, libraries = prefixes
    privileged = (*stdlib, *libraries)
    busy = [False]  # re-entry guard: what the hook itself reads raises events too
    getframe = sys._getframe

    def requester() -> str:
        """ "runtime", "library" or "student": the innermost non-stdlib frame's owner."""
        frame: types.FrameType | None = getframe(2)
        while frame is not None:
            code = frame.f_code
            if id(code) in runtime:
                return "runtime"
            name = code.co_filename
            if name.startswith(libraries) or name.startswith(IMPORT_SYSTEM):
                return "library"
            if not name.startswith(stdlib):
                return "student"
            frame = frame.f_back
        return "runtime"  # no Python frame at all: the interpreter itself

    def runtime_frame(obj: Any, attr: str | None) -> bool:
        frame = getattr(obj, attr) if attr else obj
        code = frame if isinstance(frame, types.CodeType) else getattr(frame, "f_code", None)
        return code is not None and id(code) in runtime

    def refuse(what: str) -> None:
        raise SandboxRefusal(f"refused by the grader's sandbox: {what} is not available to student code")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if busy[0]:
            return
        if not (
            event.startswith("ctypes.")
            or event in REFUSED
            or event in CODE_EVENTS
            or event == "sys._getframe"
            or event == "compile"
            or (event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES)
            or (event == "object.__setattr__" and args[1] == "__code__")
        ):
            return
        busy[0] = True
        try:
            who = requester()
            if who == "runtime" or (who == "library" and not event.startswith(("object.", "sys._getframe"))):
                return
            if event == "sys._getframe":
                if runtime_frame(args[0], None):
                    refuse("a frame of the grader's runtime")
            elif event == "object.__getattr__":
                if runtime_frame(args[0], None if args[1] == "f_code" else args[1]):
                    refuse("a frame of the grader's runtime")
            elif event == "compile":
                filename = args[1] if len(args) > 1 else None
                if isinstance(filename, str) and (filename.startswith(privileged) or not filename):
                    refuse(f"compiling code under the name {filename!r}")
            elif who == "student":
                refuse(event)
        finally:
            busy[0] = False

    return hook
