"""The help of ``--ray-address``, ``--job`` and ``--since``, shared by every command that takes them (no imports:
``rlmedic --help`` reads these)."""

RAY_ADDRESS_HELP = ("A Ray cluster: its dashboard (http://HOST:8265) or GCS address (HOST:6379). The job's driver "
                    "and worker logs on every node, and the deaths Ray recorded, are read through Ray's state API "
                    "(read-only; a GCS address needs the ray extra: pip install 'rlmedic[ray]').")
JOB_HELP = "With --ray-address: the job (job id or submission id; default: the newest)."
SINCE_HELP = "With --ray-address: leave out workers that ended more than this many minutes ago."
