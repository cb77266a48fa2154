"""The help of ``--ray-address``, ``--job`` and ``--since`` and their one check, shared by every command that
takes them (nothing heavy: ``rlmedic --help`` reads these)."""

from rlmedic.errors import UserError

RAY_ADDRESS_HELP = ("A Ray cluster: its dashboard (http://HOST:8265) or GCS address (HOST:6379). The job's driver "
                    "and worker logs on every node, and the deaths Ray recorded, are read through Ray's state API "
                    "(read-only; a GCS address needs the ray extra: pip install 'rlmedic[ray]').")
JOB_HELP = "With --ray-address: the job (job id or submission id; default: the newest)."
SINCE_HELP = "With --ray-address: leave out workers that ended more than this many minutes ago."


def check_options(ray_address: str | None, job: str | None, since: float | None) -> None:
    if ray_address is None and (job is not None or since is not None):
        raise UserError("--job and --since go with --ray-address ADDR")
