"""ADDR to a checked dashboard URL: reachable, speaking the state API, a Ray version we read.

ADDR is what users have at hand: the dashboard's ``http://host:8265`` (what ``ray job submit``
takes) or the GCS ``host:6379`` (what ``ray.init`` and ``ray start --address`` take). A GCS address is
turned into the dashboard's by Ray itself (the dashboard writes its address into the GCS key-value
store), which needs the ``ray`` extra and the same Ray version as the cluster; a dashboard URL needs
neither. Every failure here is one :class:`UserError` line (exit 2 in the CLI): nothing is retried for
minutes, nothing is written to the cluster.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from rlmedic.errors import UserError

#: Oldest Ray whose dashboard serves ``/api/v0/logs`` and ``/api/v0/logs/file`` as read here.
MIN_RAY = (2, 9)
#: First Ray major this reader does not know.
MAX_RAY_MAJOR = 3
CONNECT_TIMEOUT_S = 3.0
EXTRA_HINT = "pip install 'rlmedic[ray]'"


@dataclass(frozen=True)
class Resolved:
    given: str
    dashboard: str  # http(s)://host:port, no trailing slash
    ray_version: str
    via_gcs: bool


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    m = re.fullmatch(r"\[?([^\]\s/]+?)\]?(?::(\d{1,5}))?", text)
    if not m:
        raise UserError(f"--ray-address {text}: not an address (http://HOST:8265 or HOST:6379)")
    return m.group(1), int(m.group(2) or default_port)


def _reachable(host: str, port: int, what: str, given: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"--ray-address {given}: cannot reach the {what} at {host}:{port} ({reason})") from None


def dashboard_from_gcs(host: str, port: int, given: str) -> str:
    """The dashboard URL the cluster's GCS records (Ray's own client; the extra must match the cluster)."""
    try:
        from ray._raylet import GcsClient  # type: ignore[import-not-found]
        import ray
    except ImportError:
        raise UserError(f"--ray-address {given}: a GCS address needs the ray extra ({EXTRA_HINT}); "
                        "or pass the dashboard's http://HOST:8265") from None
    try:
        gcs = GcsClient(address=f"{host}:{port}")
        url = gcs.internal_kv_get(b"dashboard", namespace=b"dashboard", timeout=CONNECT_TIMEOUT_S + 2)
    except Exception as exc:  # noqa: BLE001 - Ray's RPC errors vary by version; all mean "cannot ask it"
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--ray-address {given}: the GCS did not answer Ray {ray.__version__}'s client ({first}); "
                        "the cluster may run another Ray version, or pass the dashboard's http://HOST:8265") from None
    if not url:
        raise UserError(f"--ray-address {given}: the cluster records no dashboard (started with --include-dashboard=false?)")
    return "http://" + url.decode() if isinstance(url, bytes) else "http://" + str(url)


def resolve(address: str) -> Resolved:
    """Check ADDR and return the dashboard to read; one clear line on any failure."""
    from rlmedic.tools.cluster.client import StateAPIError, StateClient

    given = address.strip()
    if not given:
        raise UserError("--ray-address: empty")
    via_gcs = False
    if "://" in given:
        parts = urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"--ray-address {given}: not an http(s) dashboard URL or a HOST:PORT GCS address")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        _reachable(parts.hostname, port, "dashboard", given)
        dashboard = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    else:
        host, port = _host_port(given, 6379)
        _reachable(host, port, "GCS", given)
        dashboard = dashboard_from_gcs(host, port, given)
        via_gcs = True
    with StateClient(dashboard, timeout=10) as client:
        try:
            info = client.version()
        except StateAPIError as exc:
            if "auth token" in str(exc):
                raise UserError(f"--ray-address {given}: {exc}") from None
            raise UserError(f"--ray-address {given}: {dashboard} is not a Ray dashboard ({exc})") from None
    version = str(info.get("ray_version") or "")
    v = _version_tuple(version)
    if not v or v[:2] < MIN_RAY or v[0] >= MAX_RAY_MAJOR:
        raise UserError(f"--ray-address {given}: the cluster runs Ray {version or 'of unknown version'}; "
                        f"reading it needs Ray {MIN_RAY[0]}.{MIN_RAY[1]} to {MAX_RAY_MAJOR - 1}.x")
    if via_gcs:
        import ray

        if _version_tuple(ray.__version__)[:2] != v[:2]:
            raise UserError(f"--ray-address {given}: the cluster runs Ray {version}, this environment Ray "
                            f"{ray.__version__}; install the same version or pass the dashboard's http://HOST:PORT")
    return Resolved(given=given, dashboard=dashboard, ray_version=version, via_gcs=via_gcs)
