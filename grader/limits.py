"""Every limit of one grading, in one place: the rubric's ``limits`` section, with the defaults.

Intake reads the sizes, the runner the total time, the matrix session and its rank groups the rest;
the isolation layers of each rank (rlimits, cgroups) take theirs from here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.text import Clipper


@dataclass(frozen=True)
class Limits:
    """Resource limits of one grading run (``rubric.limits``; ``grader/schemas/rubric.schema.json``)."""

    case_timeout_s: float = 10.0  # the most wall clock any one matrix case gets (see case_timeout_floor_s)
    #: a case's budget: floor + multiple x what the runtime's own allreduce needs for as many bytes at
    #: that world size, measured when the world size's first group starts; never above case_timeout_s
    case_timeout_floor_s: float = 1.0
    case_timeout_multiple: float = 50.0
    deadlock_after_s: float = 1.0  # every rank blocked in communication this long = hang
    memory_mb: int = 2048  # per rank: its memory cgroup (swap included), and RLIMIT_AS
    output_kb: int = 64  # stdout/stderr read per case (the rest is drained and dropped)
    #: what of a case's message and captured output any output quotes (JUnit, results.json, every
    #: report): so many lines of so many characters, so many bytes per case, and per grading in all;
    #: what is cut is said in the text (``grader.text.Clipper``).  JUnit holds a failing case's text
    #: twice (pytest writes it as the failure's message and as its body): junit.xml < 2 x the total
    quoted_lines: int = 40
    quoted_line_chars: int = 1000
    quoted_case_kb: int = 4
    quoted_total_kb: int = 128
    nproc: int = 64  # processes per rank (RLIMIT_NPROC); tasks of a group's pids cgroup: world size x this
    cpu_s: int = 60  # CPU seconds per rank (RLIMIT_CPU takes whole seconds)
    file_size_mb: int = 64  # the largest file a rank may write, and a student file intake takes
    submission_mb: int = 20  # the largest submission intake accepts
    total_timeout_s: float = 600.0  # the whole matrix run
    start_timeout_s: float = 30.0  # a rank group's start (not in rubrics: the grader's own business)
    max_result_mb: int = 256  # one rank's reply (not in rubrics)

    def clipper(self) -> Clipper:
        """A fresh per-grading budget for the text quoted from a submission (see ``quoted_*``)."""
        return Clipper(self.quoted_lines, self.quoted_line_chars, self.quoted_case_kb << 10, self.quoted_total_kb << 10)
