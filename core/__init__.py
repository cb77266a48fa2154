from importlib.metadata import version as _v
try:
    __version__ = _v("rlmedic")
except Exception:  # pragma: no cover - running from a tree without install
    __version__ = "0.0.0"
