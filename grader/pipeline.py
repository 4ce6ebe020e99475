"""``grader grade``: intake -> static checks -> run the matrix -> score -> render.

This process never imports student code: the matrix runs in a child pytest session whose rank
processes are the only ones that do.  Exit status is 0 whenever a grade was produced, whatever
the score; a broken submission is a low score with reasons, never a grader error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.errors import UserError
from grader.filenames import entries_named
from grader.limits import Limits
from grader.results import GradeResult, TimeSource
from grader.salt import SALT_ENV, input_salt
from grader.submission_time import SubmittedAt, given
from grader.torch_support import check_torch, installed_torch

if TYPE_CHECKING:
    from collections.abc import Iterator

    from grader.matrix.host import Host


def grade(
    source: str | Path,
    rubric_path: Path | None = None,
    out_dir: Path | None = None,
    submitted_at: SubmittedAt | None = None,
    *,
    deadline: str | None = None,
    trust_commit_time: bool = False,
    secret_file: Path | None = None,
    isolation: str = "auto",
    keyword: str | None = None,
) -> GradeResult:
    """Grade one submission locally; write every output format to ``out_dir`` when given.

    ``submitted_at`` and ``trust_commit_time`` decide the submission time (``grader.submission_time``);
    ``deadline`` replaces the rubric's; ``secret_file`` holds the instructor's input salt;
    ``isolation`` is ``--isolation`` (``runtimes.torchdist.mode.decide``); ``keyword`` is ``-k``:
    only the matching visible cases run, and the result says its score is partial.
    """
    with _early_host(isolation) as host:  # first: its torch import overlaps all that comes before the matrix
        from grader import intake, late, runner, scoring, selection, tempdirs
        from grader.render.outputs import write_outputs
        from grader.rubric import load_rubric
        from grader.runtimes.torchdist import static

        timings: dict[str, float] = {}
        t0 = time.monotonic()
        rubric = late.under_deadline_option(load_rubric(rubric_path), deadline)
        limits = rubric.limits
        salt, salt_layer = input_salt(secret_file)
        only = selection.select(rubric, keyword) if keyword is not None else None
        tempdirs.sweep()  # what gradings killed by SIGKILL left (their locks are free): never a live one's
        work, lock = tempdirs.make("grader-work-")
        try:
            os.chmod(work, 0o711)  # the student uid may traverse to its sandbox, but not list or write
            taken = intake.take(source, rubric, work / "sandbox", submitted_at, trust_commit_time)
            timings["intake"] = time.monotonic() - t0
            t = time.monotonic()
            present = list(taken.student_files)
            findings = static.analyze_submission(taken.sandbox, present, rubric.policy)
            timings["static"] = time.monotonic() - t
            t = time.monotonic()
            matrix_dir = work / "matrix"
            matrix_dir.mkdir(mode=0o700)
            try:
                run = runner.run_matrix(
                    sandbox=taken.sandbox,
                    present=present,
                    workdir=matrix_dir,
                    limits=asdict(limits),
                    policy=rubric.policy.to_dict(),
                    pack=rubric.assignment.pack,
                    isolation_config=_isolation_config(taken.sandbox, limits),
                    salt=salt,
                    layers={"salt": salt_layer},
                    total_timeout_s=limits.total_timeout_s,
                    only=only,
                    isolation=isolation,
                    partial=only is not None,
                    host=host,
                )
            except runner.SessionFailed as exc:  # the grader's failure: status "error" (exit 2), no verdict blamed
                sys.stderr.write(f"grader: the matrix session's output ended with:\n{exc.log}\n")
                result = error_result(rubric, str(source), f"the grader could not grade this submission: {exc}")
                if out_dir is not None:
                    write_outputs(result, out_dir, None)
                return result
            timings["matrix"] = time.monotonic() - t
            timings.update(run.phases)
            t = time.monotonic()
            when = datetime.fromisoformat(taken.info.submitted_at) if taken.info.submitted_at else None
            result = scoring.score(
                rubric,
                run.junit,
                taken.info,
                findings,
                taken.sandbox,
                submitted_at=when,
                isolation=run.isolation,
                timings=timings,
            )
            if only is not None:
                result = replace(
                    result, notes=[selection.partial_note(keyword or "", len(only), rubric), *result.notes]
                )
            timings["score"] = time.monotonic() - t
            timings["total"] = time.monotonic() - t0
            result = replace(result, timings=dict(timings))
            if out_dir is not None:
                write_outputs(result, out_dir, run.junit)
                keep_deliverables(taken.sandbox, rubric.deliverable_files, out_dir)
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)
            lock.close()


@contextlib.contextmanager
def _early_host(isolation: str) -> Iterator[Host | None]:
    """The matrix session's host, started before anything else: its torch import (a second) overlaps
    this process's own imports, the rubric, intake and the static checks (issue 23).  It is told
    nothing until the matrix runs (``grader.matrix.host``); none where the isolation asked for cannot
    be had."""
    from grader.matrix.host import Host, after_grading
    from grader.runtimes.torchdist import mode

    try:
        mode.decide(isolation)
    except UserError:
        host = None  # the matrix says why, as it would without an early host
    else:
        host = Host.take()
    try:
        yield host
    finally:
        if host is not None:
            host.close()
        after_grading()  # a spare that waited for this grading's end starts now (grader.matrix.host)


DELIVERABLES = "deliverables"  # beside the outputs: what a rescore reads the diagram and answers from


def keep_deliverables(sandbox: Path, names: tuple[str, ...], out_dir: Path) -> None:
    """Copy the deliverables intake took (regular files it wrote itself) next to the outputs, so the
    grading can be rescored later (``grader.rescore``) without the submission."""
    kept = out_dir / DELIVERABLES
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir(parents=True)
    for name in {Path(name).name for name in names}:  # intake puts each at the sandbox's top
        for path in entries_named(sandbox, name):
            if path.is_file():
                shutil.copyfile(path, kept / path.name)


def _isolation_config(sandbox: Path, limits: Limits) -> dict[str, Any]:
    return {
        "sandbox": str(sandbox),
        "memory_mb": limits.memory_mb,
        "nproc": limits.nproc,
        "cpu_s": limits.cpu_s,
        "file_size_mb": limits.file_size_mb,
    }


def main(args: argparse.Namespace) -> int:
    when = given(args.submitted_at, TimeSource(args.submitted_at_source), args.pushed_at)  # a bad time stops here
    watching = getattr(args, "watch", False)
    if watching:
        _refuse_watch(args)
    if args.backend == "docker":
        result = _grade_in_docker(args)
    else:
        # The ranks run this environment's torch: an untested release stops here, before any work
        warning = check_torch(installed_torch())
        if warning:
            print(f"grader: {warning}", file=sys.stderr)
        if not _exists(args.submission):
            raise UserError(f"{args.submission}: no such file, directory or git URL")
        if watching:
            return _watch(args, when)
        result = _grade_locally(args, when)
    _show(result, args.format)
    return 0 if result.status == "graded" else 2


def _grade_locally(args: argparse.Namespace, when: SubmittedAt | None) -> GradeResult:
    return grade(
        args.submission,
        args.rubric,
        args.out,
        when,
        deadline=args.deadline,
        trust_commit_time=args.trust_commit_time,
        secret_file=args.secret_file,
        isolation=getattr(args, "isolation", "auto"),
        keyword=getattr(args, "keyword", None),
    )


def _show(result: GradeResult, formats: list[str] | None) -> None:
    """Print ``result`` in each format asked for (default: the terminal table) and add it to the step summary."""
    from grader.render.markdown import append_step_summary, render_markdown
    from grader.render.outputs import render
    from grader.render.workflow import workflow_safe

    for fmt in formats or ["terminal"]:
        sys.stdout.write(workflow_safe(render(result, fmt)))  # a CI log: no line of it may be a workflow command
    append_step_summary(render_markdown(result))


def _refuse_watch(args: argparse.Namespace) -> None:
    """``--watch`` grades a working tree on this machine again and again: not in a container, not an
    archive or a repository that only a new push changes."""
    from grader import gitread

    if args.backend == "docker":
        raise UserError("--watch grades on this machine: leave out --backend docker")
    source = Path(args.submission)
    if gitread.is_url(args.submission) or not source.is_dir() or gitread.is_bare_repository(source):
        raise UserError(
            f"{args.submission}: --watch needs the directory you edit (a zip, a git URL or a bare repository "
            "does not change under it); grade it without --watch"
        )


def _watch(args: argparse.Namespace, when: SubmittedAt | None) -> int:
    """``grader grade DIR --watch`` (``grader.watch``): Ctrl-C ends it with status 0."""
    from grader import intake, watch
    from grader.render.changes import render_changes
    from grader.render.terminal import use_color
    from grader.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    directory = Path(args.submission)

    def watched() -> frozenset[Path]:
        return intake.watched(directory, rubric)

    def show(result: GradeResult, before: GradeResult | None) -> None:
        _show(result, args.format)
        if before is not None:
            sys.stdout.write(render_changes(before, result, color=use_color()))
        sys.stdout.flush()
        names = ", ".join(sorted(str(p.relative_to(directory)) for p in watched() if p.exists())) or "for your files"
        print(f"grader: watching {names}: a change grades again (Ctrl-C ends)", file=sys.stderr)

    try:
        watch.watch(lambda: _grade_locally(args, when), watched, show)
    except KeyboardInterrupt:
        print("grader: stopped watching", file=sys.stderr)
    return 0


def _exists(source: str) -> bool:
    return "://" in source or source.startswith("git@") or Path(source).exists()


def _grade_in_docker(args: argparse.Namespace) -> GradeResult:
    """Grade in a fresh container; a container that fails, times out or is OOM-killed is an
    error result that says so (the submission is not blamed with a zero that looks like a grade)."""
    from grader import late
    from grader.backends.docker import grade_in_container
    from grader.rubric import load_rubric

    if not Path(args.submission).exists():
        raise UserError(f"{args.submission}: the docker backend grades a local directory or archive")
    rubric = load_rubric(args.rubric)
    limits = rubric.limits
    late.under_deadline_option(rubric, args.deadline)  # refused here, as the local backend would
    with contextlib.ExitStack() as stack:
        # without --out the container's outputs are read back and nothing is kept, as the local backend keeps none
        out = args.out or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="grader-out-", ignore_cleanup_errors=True))
        )
        outcome = grade_in_container(
            Path(args.submission),
            out,
            args.image,
            args.rubric,
            timeout_s=limits.total_timeout_s + 120,
            memory_mb=max(4096, limits.memory_mb * 3),
            cpus=float(os.cpu_count() or 2),
            pids=1024,
            extra_args=_time_options(args),
            salt=_instructor_salt(args.secret_file),
        )
        results = out / "results.json"
        if outcome.status == "ok" and results.exists():
            return GradeResult.load(results)
    result = error_result(
        rubric, str(args.submission), f"container grading failed ({outcome.status}): {outcome.message}"
    )
    if args.out is not None:
        from grader.render.outputs import write_outputs

        write_outputs(result, out, None)
    return result


def _instructor_salt(secret_file: Path | None) -> str | None:
    """The instructor's secret for the container's grader, or None (it draws a random one)."""
    if secret_file is None and not os.environ.get(SALT_ENV):
        return None
    return input_salt(secret_file)[0]


def _time_options(args: argparse.Namespace) -> list[str]:
    """The options that decide the submission time and lateness, for the grader in the container."""
    options = []
    if args.submitted_at:
        options += ["--submitted-at", args.submitted_at, "--submitted-at-source", args.submitted_at_source]
    if args.pushed_at:
        options += ["--pushed-at", args.pushed_at]
    if args.deadline is not None:  # checked above (under_deadline_option)
        options += ["--deadline", args.deadline]
    return options + ["--trust-commit-time"] * args.trust_commit_time


def error_result(rubric: Any, source: str, message: str) -> GradeResult:
    """The result of a grading the grader could not finish: status ``error``, the reason, no marks."""
    from grader import __version__
    from grader.results import SubmissionInfo

    return GradeResult(
        assignment=rubric.assignment.id,
        score=0.0,
        max_score=rubric.max_score,
        tasks=[],
        submission=SubmissionInfo(source=source, files={}, digest=""),
        grader_version=__version__,
        rubric_digest=rubric.digest,
        status="error",
        error=message,
    )
