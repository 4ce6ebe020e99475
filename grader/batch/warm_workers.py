"""Warm servers on every Dask worker of ``grader batch --cluster`` (issue 41): each grade the worker
runs is forked by the worker's grade server (``grade_server``) and forks its session hosts from the
worker's host server (``grader.matrix.warm``), as a local batch's grades do from the batch's own
(``workers.warm``), instead of a new interpreter per student that imports torch in a cold host.

A ``WorkerPlugin``'s ``setup`` runs once per worker, workers that join later (an adaptive Slurm
cluster) included; ``teardown`` (the plugin unregistered at the batch's end, or the worker closing)
ends the servers, and a worker that dies takes its servers with it.  A server that died meanwhile is
replaced for the worker's next grade (``warm.KeptServer``); the grade it broke is graded again by its
own process (``runner.HostLost``).

Imported only where Dask is (``cluster.connect``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

if TYPE_CHECKING:
    from grader.batch.grade_server import GradeServer
    from grader.matrix.warm import HostServer, KeptServer

NAME = "grader-warm-hosts"


class WarmHosts(WorkerPlugin):
    """The worker's host server and grade server while the plugin is registered (Linux only, as the
    servers)."""

    idempotent = True  # registered again by a later batch on the same cluster: the running servers stay
    name = NAME

    def __init__(self) -> None:
        self.hosts: KeptServer[HostServer] | None = None
        self.grades: KeptServer[GradeServer] | None = None

    def setup(self, worker: Any) -> None:
        from grader.batch.grade_server import GradeServer
        from grader.matrix.warm import HostServer, KeptServer

        self.hosts = KeptServer(HostServer.start_here)
        self.grades = KeptServer(GradeServer.start_here)

    def teardown(self, worker: Any) -> None:
        for kept in (self.grades, self.hosts):
            if kept is not None:
                kept.close()
        self.hosts = self.grades = None


def worker_servers(worker: Any = None) -> tuple[HostServer | None, GradeServer | None]:
    """``worker``'s (by default this task's worker's) live host server and grade server, where the batch
    registered :class:`WarmHosts`; else None."""
    try:
        plugin = (worker or get_worker()).plugins.get(NAME)
    except ValueError:  # not on a worker (called directly)
        return None, None
    hosts, grades = getattr(plugin, "hosts", None), getattr(plugin, "grades", None)
    return (hosts.live() if hosts is not None else None), (grades.live() if grades is not None else None)
