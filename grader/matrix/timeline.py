"""Where a matrix session's time goes, so that a speed claim can be re-measured (issue 23).

The session stamps its phases on the monotonic clock the runner shares (``CLOCK_MONOTONIC`` is one
clock for every process of a machine), and writes them beside its isolation report; the runner adds
them to ``results.json``'s ``timings`` as ``matrix.*`` stages, which ``scripts/bench-grade.py``
prints.  Only the session writes the file: no rank can move a figure (and none is a verdict).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Timeline:
    """Seconds per phase of one session, summed over its cases.

    ``startup``: from the runner's launch to the first case (Python and pytest, the pack, torch,
    collection); ``groups``: starting and calibrating rank groups; ``cases``: the cases themselves,
    start-ups excluded; ``between``: pytest's own work between two cases (fixtures, reports);
    ``teardown``: from the last case to every group, zygote and pool closed.
    """

    launched: float  # the runner's monotonic clock when it started this session
    startup: float = 0.0
    groups: float = 0.0
    cases: float = 0.0
    between: float = 0.0
    teardown: float = 0.0
    _last: float = 0.0  # the end of the last case, where teardown starts

    def case_started(self, now: float) -> None:
        if self._last:
            self.between += now - self._last
        else:
            self.startup = now - self.launched

    def case_ended(self, now: float, started: float, groups_before: float) -> None:
        """A case that began at ``started``, when ``groups`` was ``groups_before``, ended."""
        self.cases += now - started - (self.groups - groups_before)
        self._last = now

    def closed(self, now: float) -> None:
        self.teardown = now - (self._last or self.launched)

    def write(self, path: Path) -> None:
        fields = {k: round(v, 4) for k, v in asdict(self).items() if not k.startswith("_") and k != "launched"}
        path.write_text(json.dumps(fields))


def read(path: Path, ended: float, launched: float) -> dict[str, float]:
    """The session's phases as ``matrix.*`` timings, plus ``matrix.exit``: from the session's close to
    its process's end (pytest's reports and the process's exit), as the runner saw it end.  Nothing
    when the session wrote no timeline (it was killed): the stages it did not reach were not measured."""
    try:
        phases = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    timings = {f"matrix.{k}": float(v) for k, v in phases.items() if isinstance(v, int | float) and v >= 0}
    accounted = sum(timings.values())
    timings["matrix.exit"] = max(0.0, ended - launched - accounted)
    return timings
