"""A warm host server on every Dask worker of ``grader batch --cluster`` (issue 41): each grade the
worker runs forks its session hosts from it, as a local batch's grades do from the batch's own server
(``workers.warm_hosts``), instead of importing torch in a cold host per student.

A ``WorkerPlugin``'s ``setup`` runs once per worker, workers that join later (an adaptive Slurm
cluster) included; ``teardown`` (the plugin unregistered at the batch's end, or the worker closing)
ends the server, and a worker that dies takes its server with it.  A server that died meanwhile is
replaced for the worker's next grade (``warm.KeptServer``); the grade it broke is graded again by its
own process (``runner.HostLost``).

Imported only where Dask is (``cluster.connect``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

if TYPE_CHECKING:
    from grader.matrix.warm import HostServer, KeptServer

NAME = "grader-warm-hosts"


class WarmHosts(WorkerPlugin):
    """The worker's host server while the plugin is registered (Linux only, as the server)."""

    idempotent = True  # registered again by a later batch on the same cluster: the running server stays
    name = NAME

    def __init__(self) -> None:
        self.kept: KeptServer | None = None

    def setup(self, worker: Any) -> None:
        from grader.matrix.warm import KeptServer

        self.kept = KeptServer()

    def teardown(self, worker: Any) -> None:
        if self.kept is not None:
            self.kept.close()
            self.kept = None


def worker_server(worker: Any = None) -> HostServer | None:
    """``worker``'s (by default this task's worker's) live host server, where the batch registered
    :class:`WarmHosts`; else None."""
    try:
        plugin = (worker or get_worker()).plugins.get(NAME)
    except ValueError:  # not on a worker (called directly)
        return None
    kept = getattr(plugin, "kept", None)
    return kept.live() if kept is not None else None
