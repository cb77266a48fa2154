"""The shipped data files (signatures, cards, rules, vocabularies): read, validated, cached.

Every table rlmedic ships is YAML that a newcomer edits without reading the engine, and each
module that owns one parses and validates it. Parsing on every command cost a cold ``diagnose``
the YAML import (~25 ms: PyYAML compiles its resolver's regexes) plus the parse and the checks
of each file. :func:`builtin` keeps the validated result in the disk cache
(:mod:`rlmedic.diskcache`) under the hash of the files and of the code that reads them, so the
work is done once per edit, and a command that finds every table cached never imports YAML.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from rlmedic.errors import UserError

T = TypeVar("T")


def read_yaml(path: Path) -> Any:
    """The YAML document in ``path``, read safely (libyaml's loader where installed: ~5x faster);
    one :class:`UserError` naming the file when it is not valid YAML."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: invalid YAML ({exc})") from exc


def builtin(kind: str, files: Iterable[Path], code: Iterable[str], build: Callable[[], T]) -> T:
    """``build()`` (which reads ``files``), cached on disk as a pickle.

    ``code`` names the source files of the modules that read and validate them (``__file__``s):
    an edited table or a new rlmedic rebuilds the entry, never reads a stale one. Values must
    pickle cheaply (:class:`rlmedic.lazyregex.LazyPattern` pickles as its source, so a cached
    table's regexes still compile only when used).
    """
    from rlmedic import diskcache, lazyregex

    parts: list[bytes | str] = []
    for source in (__file__, lazyregex.__file__, *code):
        parts += [Path(source).read_bytes()]
    for path in files:
        parts += [path.name, path.read_bytes()]
    return diskcache.cached(kind, diskcache.digest(parts), build, pickle.dumps, pickle.loads)
