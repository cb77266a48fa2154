"""A Ray cluster as a source of logs: every node's job logs and Ray's record of deaths, as one folder.

Multi-node runs (AReaL, slime, verl on Ray) keep each node's worker logs on that node, and the root
cause is often on a node other than the one the user is logged in to. This package reads them through
Ray's own state API (the dashboard's ``/api/v0`` HTTP endpoints that ``ray.util.state`` wraps), read-only,
and mirrors them into a local folder, each file named by node, actor and Ray's name, plus ``ray-state.log``: the dead actors,
workers and nodes with the exit causes Ray recorded. The existing log diagnosis then reads that folder
like any folder of per-rank logs (one engine, not two); ``watch`` re-syncs it and follows it.

* :mod:`.address`: ADDR (the dashboard's ``http://`` address or the GCS ``host:port``) to a checked
  dashboard URL, one clear error line when unreachable, without the extra, or on a version mismatch;
* :mod:`.client`: the ``/api/v0`` calls (nodes, actors, workers, jobs, log listings, log tails);
* :mod:`.plan`: which files on which node belong to the job, newest deaths first;
* :mod:`.state`: Ray's death records written as timestamped log lines;
* :mod:`.mirror`: parallel, bounded, tail-first fetching into the folder (append-only on re-sync);
* :mod:`.frontdoor`: the folder for as long as a command or a request runs.


Nothing heavy loads with the package: ``rlmedic --help`` reads the options' help from :mod:`.options`.
"""

from typing import Any

__all__ = ["Limits", "Mirror", "SyncResult", "collect"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlmedic.tools.cluster import mirror

        return getattr(mirror, name)
    raise AttributeError(name)
