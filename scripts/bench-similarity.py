"""How long `grader similarity` takes for a large class (issue 42; README's Measurements, "Issue 42").

Builds a roster of synthetic A9 hand-ins (GitHub Classroom folders: ``src/collectives.py`` and
``src/transformer.py``), then times ``grader.similarity.check.run_similarity`` on it, the path the command
takes: intake of every folder, extraction, fingerprints, the index, the pairs, the CSV and the page.

Each student is made from the two reference solutions (``reference/a9``, ``reference/a9-naive``): per graded
function one of them, with statements of the student's own inserted at random places and every local
renamed, so that no two students' code is the same text, and most of it is shared with hundreds of others
(the common-code path of the index at scale).  ``--copies`` of them are copied by another student and
disguised (locals renamed, definitions reordered, layout rewritten, comments added): the run reports how
many of those rank above every other pair.

    python scripts/bench-similarity.py [--students 2000] [--copies 20] [--seed 1] [--keep DIR]

``--disguises`` measures the ranking instead (issue 57): copies of A5's and HW12's reference hand-ins under
every fence tag and prompt style, and padded with unused library code (``tests/similarity_corpus.py``),
beside honest pairs (A9's two reference trees, A5's reference and a student's report).  It prints every
pair's similarity and who was not compared, and exits 1 unless every copy ranks above every honest pair.

    python scripts/bench-similarity.py --disguises
"""

from __future__ import annotations

import argparse
import ast
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASES = [REPO / "reference" / "a9" / "src", REPO / "reference" / "a9-naive" / "src"]
FILES = ("collectives.py", "transformer.py")


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Every function of a module by name, methods included."""
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _own_lines(function: ast.FunctionDef, rng: random.Random) -> None:
    """Statements of the student's own at random places of the body (after a docstring)."""
    body = function.body
    for _ in range(rng.randint(2, 5)):
        at = rng.randint(1 if ast.get_docstring(function) else 0, len(body))
        line = f"_check_{rng.randint(0, 10**6)} = {rng.randint(0, 10**6)} * {rng.randint(1, 99)}"
        body.insert(at, ast.parse(line).body[0])


def _renamed(tree: ast.Module, rng: random.Random) -> None:
    """Every argument and assigned local renamed (the handout's function names stay)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        bound = [node.arg] if isinstance(node, ast.arg) and node.arg != "self" else []
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound = [node.id]
        for name in bound:
            names.setdefault(name, f"v{rng.randint(0, 10**6)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg in names:
            node.arg = names[node.arg]
        elif isinstance(node, ast.Name) and node.id in names:
            node.id = names[node.id]


def student(rng: random.Random) -> dict[str, str]:
    """One synthetic student's two files: per function one base's version, with lines of their own."""
    chosen = {}
    for name in FILES:
        trees = [ast.parse((base / name).read_text()) for base in BASES]
        mine = trees[0]
        own = _functions(mine)
        for function_name in own:
            donor = _functions(rng.choice(trees)).get(function_name) or own[function_name]
            own[function_name].body = donor.body
            _own_lines(own[function_name], rng)
        _renamed(mine, rng)
        chosen[name] = ast.unparse(mine) + "\n"
    return chosen


def disguised(files: dict[str, str], rng: random.Random) -> dict[str, str]:
    """A copy as a student hides it: locals renamed, top-level definitions reordered, comments added."""
    out = {}
    for name, text in files.items():
        tree = ast.parse(text)
        _renamed(tree, rng)
        head = [n for n in tree.body if not isinstance(n, ast.FunctionDef)]
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        rng.shuffle(functions)
        tree.body = head + functions
        lines = ast.unparse(tree).splitlines()
        out[name] = "\n".join(f"{line}  # ok" if i % 5 == 4 and line.strip() else line for i, line in enumerate(lines))
    return out


def build(roster: Path, students: int, copies: int, seed: int) -> set[frozenset[str]]:
    """The roster on disk; returns the planted copy pairs."""
    rng = random.Random(seed)
    made: dict[str, dict[str, str]] = {}
    planted: set[frozenset[str]] = set()
    for number in range(students):
        name = f"s{number:05d}"
        if number >= students - copies:
            original = f"s{rng.randrange(students - copies):05d}"
            while any(original in pair for pair in planted):
                original = f"s{rng.randrange(students - copies):05d}"
            made[name] = disguised(made[original], rng)
            planted.add(frozenset({original, name}))
        else:
            made[name] = student(rng)
        src = roster / name / "src"
        src.mkdir(parents=True)
        (src / "__init__.py").write_text("")
        for file, text in made[name].items():
            (src / file).write_text(text)
    return planted


def disguises() -> int:
    """Every disguised copy's similarity and every honest pair's, per pack (see the module)."""
    sys.path.insert(0, str(REPO))
    from grader.similarity.check import run_similarity
    from tests import similarity_corpus as corpus

    copies: list[tuple[str, float]] = []
    honest: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as tmp:
        work = Path(tmp)
        rosters = {
            "a9": corpus.a9_roster(work / "a9"),
            "a5": corpus.a5_roster(work / "a5"),
            "hw12": corpus.hw12_roster(work / "hw12"),
        }
        for pack_id, forms in rosters.items():
            # every disguise copies the reference: more than COMMON students hold its code, so raise --common
            report = run_similarity(work / pack_id, work / f"{pack_id}-out", pack_ref=pack_id, floor=0, common=100)
            shared = {frozenset({p.student_a, p.student_b}): p.similarity for p in report.pairs}
            students = sorted(report.compared + list(report.problems))
            for i, a in enumerate(students):
                for b in students[i + 1 :]:
                    copied = {a, b} <= forms | {"ref"}
                    (copies if copied else honest).append((f"{pack_id}: {a} ~ {b}", shared.get(frozenset({a, b}), 0.0)))
            for student, problem in report.problems.items():
                print(f"{pack_id}: not compared: {student}: {problem}")
    for title, pairs in (("disguised copies", copies), ("honest pairs", honest)):
        print(f"{title}:")
        for name, similarity in sorted(pairs, key=lambda pair: pair[1]):
            print(f"  {similarity:.3f}  {name}")
    lowest, highest = min(s for _, s in copies), max(s for _, s in honest)
    print(f"lowest copy {lowest:.3f}, highest honest pair {highest:.3f}: ", end="")
    print("every copy ranks above every honest pair" if lowest > highest else "NOT separated")
    return 0 if lowest > highest else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=2000)
    parser.add_argument("--copies", type=int, default=20, help="students who hand in a disguised copy")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="build the roster and report here and keep them")
    parser.add_argument("--disguises", action="store_true", help="rank disguised copies against honest pairs")
    args = parser.parse_args()
    if args.disguises:
        return disguises()
    from grader.similarity.check import run_similarity

    work = Path(tempfile.mkdtemp(prefix="bench-similarity-")) if args.keep is None else args.keep
    try:
        started = time.perf_counter()
        planted = build(work / "roster", args.students, args.copies, args.seed)
        built = time.perf_counter() - started
        started = time.perf_counter()
        report = run_similarity(work / "roster", work / "out", pack_ref="a9")
        took = time.perf_counter() - started
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    top = {frozenset({p.student_a, p.student_b}) for p in report.pairs[: len(planted)]}
    print(f"roster: {args.students} students, {len(planted)} planted copies (built in {built:.1f} s)")
    print(
        f"grader similarity: {took:.1f} s ({1000 * took / args.students:.1f} ms a student); "
        f"{len(report.pairs)} pairs share a fingerprint, {len(report.listed)} at or above {report.floor:.2f}"
    )
    print(f"planted copies among the top {len(planted)} pairs: {len(top & planted)} of {len(planted)}")
    if report.problems:
        print(f"not compared: {len(report.problems)} ({next(iter(report.problems.values()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
