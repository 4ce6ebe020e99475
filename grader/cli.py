"""Command-line front end.  Each sub-command hands its parsed arguments to the stage that owns it.

Exit status: 0 whenever the command did its job (a grade was produced, whatever the score);
1 for bad input the user can fix (the message says how); 2 when the grader itself failed; 3 when the
machine failed it (out of space, a read-only file system, permission denied: the message names the
path and what to do).  Never a traceback: whatever else escapes a command is reported on one line as
the grader's own fault.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader import __version__
from grader.errors import ENVIRONMENT_EXIT, GraderError, UserError, environment_fault, explain_environment
from grader.results import TimeSource
from grader.submission_time import TIME_FORMS as TIME_HELP

FORMATS = ("json", "junit", "gradescope", "classroom", "markdown", "terminal")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description=__doc__)
    parser.add_argument("--version", action="version", version=f"grader {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    grade = sub.add_parser("grade", help="grade one submission")
    grade.add_argument("submission", nargs="?", default=".", help="repo, directory, .zip/.tar.gz or git URL")
    add_rubric_options(grade)
    grade.add_argument("--out", type=Path, default=None, help="write results.json, junit.xml, ... here")
    grade.add_argument(
        "--format",
        action="append",
        choices=FORMATS,
        default=None,
        help="what to print on stdout (repeatable; default: terminal)",
    )
    grade.add_argument("--backend", choices=("local", "docker"), default="local")
    grade.add_argument("--image", default="grader:local", help="image for --backend docker")
    grade.add_argument(
        "--secret-file",
        type=Path,
        default=None,
        help="the instructor's secret input salt (default: GRADER_INPUT_SALT, else random per grading)",
    )
    grade.add_argument("--submitted-at", default=None, help=f"when it was handed in ({TIME_HELP}); wins over all")
    grade.add_argument(
        "--pushed-at",
        default=None,
        help=f"when the platform's server recorded the push ({TIME_HELP}), e.g. github.event.repository.pushed_at",
    )
    grade.add_argument("--deadline", default=None, help=f"overrides the rubric's deadline ({TIME_HELP})")
    add_trust_commit_time(grade)
    # `grader batch` passes a roster's submitted_at column as --submitted-at with source "roster".
    grade.add_argument(
        "--submitted-at-source",
        choices=(TimeSource.FLAG.value, TimeSource.ROSTER.value),
        default=TimeSource.FLAG.value,
        help=argparse.SUPPRESS,
    )
    grade.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)
    add_student_loop_options(grade)

    check = sub.add_parser("check", help="static policy check only (no code is run)")
    check.add_argument("submission", nargs="?", default=".")
    add_rubric_options(check)
    check.add_argument("--json", action="store_true", help="print findings as JSON")

    rubric = sub.add_parser("rubric", help="rubric tools")
    rubric_sub = rubric.add_subparsers(dest="rubric_command", required=True)
    validate = rubric_sub.add_parser("validate", help="validate a rubric YAML file")
    validate.add_argument("file", type=Path)

    bench = sub.add_parser("bench", help="time our launcher and a whole grading against spawn-per-case")
    bench.add_argument("submission", help="a student repo, as grader grade takes it")
    add_rubric_options(bench)
    bench.add_argument("--cases", type=int, default=12, help="cases per launcher")

    batch = sub.add_parser("batch", help="grade a whole class")
    batch.add_argument("roster", type=Path, help="directory of submissions, or CSV student,path_or_url")
    batch.add_argument("--out", type=Path, required=True)
    batch.add_argument("--jobs", type=int, default=2)
    batch.add_argument(
        "--cold-hosts",
        action="store_true",
        help="start every grade cold, a new `python -m grader grade` whose session host imports Python and "
        "torch itself, rather than forking both from warm servers (the batch's, or each Dask worker's): to "
        "measure the difference, or to rule the servers out",
    )
    batch.add_argument("--backend", choices=("local", "docker"), default="local")
    batch.add_argument("--image", default="grader:local")
    add_rubric_options(batch)
    batch.add_argument("--manual", type=Path, default=None, help="CSV or YAML of manual item scores")
    batch.add_argument("--deadline", default=None, help=f"overrides the rubric's deadline ({TIME_HELP})")
    add_trust_commit_time(batch)
    batch.add_argument("--force", action="store_true", help="regrade even when a cached result exists")
    batch.add_argument("--timeout", type=float, default=900.0, help="seconds per submission")
    batch.add_argument("--secret-file", type=Path, default=None, help="the instructor's secret input salt")
    add_seal_key(batch)
    batch.add_argument(
        "--cluster",
        default=None,
        help="grade on Dask: local[:N], tcp://HOST:PORT or slurm (docs/instructors/cluster.md)",
    )
    batch.add_argument("--cluster-config", type=Path, default=None, help="YAML of SLURMCluster options")
    batch.add_argument(
        "--send-submissions",
        action="store_true",
        help="send each submission to its worker through Dask (workers without the roster's filesystem)",
    )

    batch.add_argument(
        "--similarity",
        action="store_true",
        help="after the grading, the copy check over the roster (grader similarity)",
    )
    batch.add_argument(
        "--boilerplate", type=Path, nargs="+", default=[], help="with --similarity: see grader similarity"
    )
    add_similarity_command(sub)

    add_repro_command(sub)
    annotate = sub.add_parser("annotate", help="GitHub workflow annotations (::error file=...) from a results.json")
    annotate.add_argument("results", type=Path, help="the results.json of a grading")

    rescore = sub.add_parser("rescore", help="score finished gradings again under a changed rubric (no code runs)")
    rescore.add_argument("dirs", type=Path, nargs="+", help="`grader grade --out` directories, rewritten in place")
    add_rubric_options(rescore)
    rescore.add_argument("--manual", type=Path, default=None, help="CSV or YAML of manual item scores, by dir name")
    rescore.add_argument("--deadline", default=None, help=f"overrides the rubric's deadline ({TIME_HELP})")
    add_seal_key(rescore)
    add_submit_command(sub)
    add_service_commands(sub)
    return parser


def add_service_commands(sub: Any) -> None:
    """``grader serve`` (the grading service, ``grader.service``) and ``grader service tokens``."""
    serve = sub.add_parser("serve", help="run the grading service: every push graded by the grade of record")
    serve.add_argument("--config", type=Path, default=Path("service.yaml"), help="the service's YAML configuration")
    service = sub.add_parser("service", help="grading service tools")
    service_sub = service.add_subparsers(dest="service_command", required=True)
    tokens = service_sub.add_parser("tokens", help="issue one submission token per student (only hashes are kept)")
    tokens.add_argument("--config", type=Path, default=Path("service.yaml"), help="the service's YAML configuration")
    tokens.add_argument("--assignment", required=True, help="the assignment's id in the configuration")
    tokens.add_argument("--roster", type=Path, required=True, help="a CSV whose first column is each student")


def add_submit_command(sub: Any) -> None:
    """``grader submit [DIR] --server URL --assignment ID``: HEAD to the grading service (``grader.submit``)."""
    from grader.submit import TOKEN_ENV, WAIT_S

    submit = sub.add_parser("submit", help="hand HEAD to the course's grading service and show the grade of record")
    submit.add_argument("dir", nargs="?", default=".", help="a directory of the git repository (default: .)")
    submit.add_argument("--server", required=True, help="the service's URL, e.g. https://grader.example.edu")
    submit.add_argument("--assignment", required=True, help="the assignment's id in the service's config")
    submit.add_argument("--out", type=Path, default=None, help="write results.json, summary.md, ... here")
    submit.add_argument("--no-wait", action="store_true", help="print the submission's page and exit once queued")
    submit.add_argument(
        "--list", action="store_true", help=f"list your submissions of the assignment (needs {TOKEN_ENV}) and exit"
    )
    submit.add_argument(
        "--audience", default=None, help="the OIDC audience asked of GitHub Actions (default: --server as given)"
    )
    submit.add_argument("--timeout", type=float, default=WAIT_S, help=f"seconds to wait for the grade ({WAIT_S:g})")


def add_student_loop_options(grade: argparse.ArgumentParser) -> None:
    """``--isolation``, ``-k`` and ``--watch``: how a student's machine runs the ranks, which cases, and
    grading again on every save."""
    from grader.runtimes import ISOLATION_MODES

    grade.add_argument(
        "--isolation",
        choices=ISOLATION_MODES,
        default="auto",
        help="auto: the Linux sandbox where it can be built (root: full; else rootless), the portable runtime "
        "elsewhere; portable: spawned ranks on any OS (advisory)",
    )
    grade.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        default=None,
        help="only the cases whose id matches EXPR (pytest's -k grammar, e.g. 'allreduce and ws4'); a partial score",
    )
    grade.add_argument(
        "--watch",
        action="store_true",
        help="grade the directory again whenever a graded file changes and say which cases now pass or fail, "
        "until Ctrl-C (exit 0); the session host is kept warm between grades (not on the portable runtime)",
    )


def add_similarity_command(sub: Any) -> None:
    """``grader similarity ROSTER --pack P --out DIR``: the class's copy check (``grader.similarity``)."""
    from grader.similarity import COMMON, FLOOR

    similarity = sub.add_parser(
        "similarity", help="rank pairs of students by the graded code they share, the starter never counted"
    )
    similarity.add_argument("roster", type=Path, help="as grader batch takes it: a directory of submissions or a CSV")
    similarity.add_argument("--out", type=Path, required=True, help="writes similarity.csv and similarity.html here")
    add_rubric_options(similarity)
    similarity.add_argument(
        "--boilerplate",
        type=Path,
        nargs="+",
        default=[],
        help="more code that is never evidence (a file whole; a notebook's cells, a report's snippets)",
    )
    similarity.add_argument(
        "--floor", type=float, default=FLOOR, help=f"list pairs at or above this similarity (default {FLOOR})"
    )
    similarity.add_argument(
        "--common",
        type=int,
        default=COMMON,
        help=f"code held by more than this many students is common code, not evidence (default {COMMON})",
    )


def add_repro_command(sub: Any) -> None:
    """``grader repro CASE_ID``: a visible case as a standalone script (``grader.repro``)."""
    repro = sub.add_parser("repro", help="write a script that reproduces one visible case, to debug in an IDE")
    repro.add_argument("case_id", help="a case id as `grader grade` prints it, e.g. 'test_allreduce[ws3-float64-7]'")
    repro.add_argument("--out", type=Path, default=None, help="the script to write (default: repro_<case>.py)")
    add_rubric_options(repro)


def add_rubric_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rubric", type=Path, default=None, help="rubric YAML (default: the pack's)")
    parser.add_argument(
        "--pack",
        default=None,
        help="assignment pack whose default rubric to use, e.g. a9 (default: the installed default)",
    )


def resolve_rubric(args: argparse.Namespace) -> None:
    """``--pack P`` without ``--rubric``: the pack's own rubric.  With both, the rubric must grade that pack."""
    from grader.pack import load_pack

    pack = getattr(args, "pack", None)
    if pack is None:
        return
    if args.rubric is None:
        args.rubric = load_pack(pack).rubric
        return
    from grader.rubric import load_rubric

    named = load_rubric(args.rubric).assignment.pack
    if load_pack(named) is not load_pack(pack):
        raise UserError(f"{args.rubric} grades the pack {named!r}, not {pack!r}")


def add_seal_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seal-key",
        type=Path,
        default=None,
        help="file of the key a batch's cache is sealed with, made on first use (default: $GRADER_SEAL_KEY_FILE, "
        "else $XDG_STATE_HOME/dist-grader/seal.key); keep it outside --out",
    )


def add_trust_commit_time(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-commit-time",
        action="store_true",
        help="without a submission or push time, take the commit's date (the student sets it: see "
        "docs/instructors/late-policy.md)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that every finally runs: the matrix session is stopped and
    # the temporary sandbox removed (the session would die with us anyway: PDEATHSIG).
    # The caller's handler comes back at the end: a process that runs the CLI in-process (tests, a
    # notebook) keeps its own handling of SIGTERM.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(args: argparse.Namespace) -> int:
    from grader.matrix.host import attach_server
    from grader.sandbox.parent import DIE_WITH_PARENT_ENV, die_with_parent

    parent = os.environ.pop(DIE_WITH_PARENT_ENV, "")  # set by `grader batch` for the grades it starts
    if parent.isdigit():
        die_with_parent(int(parent), signal.SIGTERM)
    attach_server()  # `grader batch` hands its grades a connection to its warm host server
    try:
        resolve_rubric(args)
        return _dispatch(args)
    except UserError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return 1
    except GraderError as exc:
        print(f"grader: internal error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grader: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if not environment_fault(exc):
            _report_bug(exc)
            return 2
        print(f"grader: {explain_environment(exc)}", file=sys.stderr)
        return ENVIRONMENT_EXIT
    except Exception as exc:
        _report_bug(exc)
        return 2


# What ``pip install "dist-grader[service]"`` adds (pyproject.toml), by import name; a missing one is the
# install's, not a bug
SERVICE_EXTRA = frozenset(
    {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "joserfc", "httpx", "jinja2"}
    | {"python_multipart"}
)


def _report_bug(exc: Exception) -> None:
    """A bug in the grader, whatever the input: one line saying where, never a traceback."""
    where = traceback.extract_tb(exc.__traceback__)[-1]
    print(
        f"grader: internal error (a bug in the grader, not your fault): {type(exc).__name__}: {exc} "
        f"at {Path(where.filename).name}:{where.lineno}",
        file=sys.stderr,
    )


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _dispatch(args: argparse.Namespace) -> int:
    # Stage modules are imported lazily: `grader check` must not pay for importing torch.
    if args.command == "grade":
        from grader import pipeline

        return pipeline.main(args)
    if args.command == "check":
        from grader import check

        return check.main(args)
    if args.command == "rubric":
        from grader import rubric

        return rubric.main_validate(args)
    if args.command == "bench":
        from grader.runtimes.torchdist import bench

        return bench.main(args)
    if args.command == "batch":
        from grader import batch

        return batch.main(args)
    if args.command == "annotate":
        from grader.render import workflow

        return workflow.main(args)
    if args.command == "similarity":
        from grader.similarity import check as similarity_check

        return similarity_check.main(args)
    if args.command == "repro":
        from grader import repro

        return repro.main(args)
    if args.command == "rescore":
        from grader import rescore

        return rescore.main(args)
    if args.command == "submit":
        from grader import submit

        return submit.main(args)
    if args.command in ("serve", "service"):
        try:
            from grader.service import app, tokens
        except ModuleNotFoundError as missing:  # the base install, a student's, has no server
            if (missing.name or "").partition(".")[0] not in SERVICE_EXTRA:
                raise
            raise UserError(
                f"grader {args.command} needs the service extra ({missing.name} is missing): "
                'pip install "dist-grader[service]", or EXTRAS=service bash scripts/install.sh from a checkout'
            ) from None
        return app.main(args) if args.command == "serve" else tokens.main(args)
    raise AssertionError(args.command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
