"""Find, read and validate known-issue records: the shipped pack plus team folders.

Folders, in order: the shipped pack beside this module (off with
``RLMEDIC_KNOWN_ISSUES_BUILTIN=0``), then every folder in ``RLMEDIC_KNOWN_ISSUES``
(``:``-separated; the ``--known-issues DIR`` option adds to it). Each ``*.yaml`` directly in
a folder or one level down is a record. A bad record costs one line in
:attr:`Pack.problems` and nothing else: the rest still load.

Loading is cheap on purpose (it runs on every answer): the parsed YAML of each file is
kept in a cache file under the data dir, keyed by path, size and mtime, and the validated
pack is kept in-process until a file changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.knowledge.known.schema import INTERNAL_FIELDS, Record

BUILTIN_DIR = Path(__file__).parent
ENV_DIRS = "RLMEDIC_KNOWN_ISSUES"
ENV_BUILTIN = "RLMEDIC_KNOWN_ISSUES_BUILTIN"
#: A record file larger than this is refused (a record is a page of text, not a log).
MAX_RECORD_BYTES = 256 * 1024
CACHE_VERSION = 1
#: Brackets a record file may hold before its nesting is checked (regexes bring a few dozen).
MAX_BRACKETS_UNCHECKED = 500


@dataclass
class Pack:
    """The records that validated, and one line per problem (file name first)."""

    records: tuple[Record, ...] = ()
    problems: list[str] = field(default_factory=list)
    folders: tuple[str, ...] = ()
    #: content digest, filled by :func:`pack_hash`
    digest: str = ""

    def by_id(self) -> dict[str, Record]:
        return {r.id: r for r in self.records}

    def counts(self, attribute: str) -> Counter:
        """Records per framework (``frameworks``) or per ``category``."""
        out: Counter = Counter()
        for record in self.records:
            value = getattr(record, attribute)
            out.update(value if isinstance(value, tuple) else (value,))
        return out


def folders() -> list[tuple[Path, str]]:
    """(folder, origin) pairs to load, from the environment (see the module docstring)."""
    out: list[tuple[Path, str]] = []
    if os.environ.get(ENV_BUILTIN, "1").strip().lower() not in ("0", "false", "no", "off"):
        out.append((BUILTIN_DIR, "builtin"))
    for part in os.environ.get(ENV_DIRS, "").split(os.pathsep):
        if part.strip():
            out.append((Path(part.strip()).expanduser(), "team"))
    return out


def add_folders(paths: list[Any]) -> None:
    """Add team folders for this process and its children (what ``--known-issues DIR`` does)."""
    current = [p for p in os.environ.get(ENV_DIRS, "").split(os.pathsep) if p]
    for path in paths:
        text = str(path)
        if text not in current:
            current.append(text)
    os.environ[ENV_DIRS] = os.pathsep.join(current)


def record_files(folder: Path) -> list[Path]:
    """``*.yaml`` directly in ``folder`` and one level down, sorted."""
    return sorted([*folder.glob("*.yaml"), *folder.glob("*/*.yaml")])


_MEMO: dict[tuple, Pack] = {}


def load(dirs: list[tuple[Path, str]] | None = None, *, strict: bool = False) -> Pack:
    """Every record of ``dirs`` (default: :func:`folders`), validated; cached while no file changes.

    The shipped pack's regexes are compiled only when ``strict`` (``--check`` and the tests validate
    every shipped record; a cold ``ask`` would spend a third of its CPU compiling ~700 patterns it
    mostly never runs); a team's records are always checked in full.
    """
    dirs = folders() if dirs is None else dirs
    listing: list[tuple[Path, str, int, int]] = []
    problems: list[str] = []
    for folder, origin in dirs:
        if not folder.is_dir():
            problems.append(f"{folder}: known-issues folder not found (from {ENV_DIRS} or --known-issues)")
            continue
        for path in record_files(folder):
            try:
                st = path.stat()
            except OSError as exc:
                problems.append(f"{path}: cannot read ({exc.strerror or exc})")
                continue
            listing.append((path, origin, st.st_mtime_ns, st.st_size))
    memo_key = tuple((str(p), o, m, s) for p, o, m, s in listing) + tuple(problems) + (strict,)
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    raw = _parsed(listing, problems)
    records: list[Record] = []
    seen: dict[str, str] = {}
    for path, origin, _m, _s in listing:
        data = raw.get(str(path))
        if data is None:
            continue
        record = validate(data, path, origin, problems, strict=strict)
        if record is None:
            continue
        if record.id in seen:
            problems.append(f"{path}: duplicate id {record.id!r} (already in {seen[record.id]})")
            continue
        seen[record.id] = str(path)
        records.append(record)
    pack = Pack(tuple(records), problems, tuple(str(f) for f, _ in dirs))
    if len(_MEMO) > 8:
        _MEMO.clear()
    _MEMO[memo_key] = pack
    return pack


def validate(data: Any, path: Path, origin: str, problems: list[str], *, strict: bool = True) -> Record | None:
    """One record from parsed YAML, or None with one line added to ``problems``."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        problems.append(f"{path}: not a mapping of record fields (see knowledge/known/README.md)")
        return None
    internal = [f for f in INTERNAL_FIELDS if f in data]
    if internal:
        problems.append(f"{path}: {', '.join(internal)}: unknown field (set by the loader, not in a record file)")
        return None
    try:
        record = Record.model_validate({**data, "path": str(path), "origin": origin},
                                       context={"compile_regexes": strict or origin != "builtin"})
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"]) or "record"
            msg = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{where}: {msg}" if err["type"] != "extra_forbidden" else f"{where}: unknown field")
        problems.append(f"{path}: " + "; ".join(parts))
        return None
    if record.id != path.stem:
        problems.append(f"{path}: id {record.id!r} differs from the file name (expected {path.stem!r})")
        return None
    return record


def _parsed(listing: list[tuple[Path, str, int, int]], problems: list[str]) -> dict[str, Any]:
    """path -> parsed YAML; files unchanged since the cache file was written are not re-parsed."""
    cache_path = _cache_path()
    cache: dict[str, Any] = {}
    if cache_path is not None:
        try:
            loaded = json.loads(cache_path.read_text(encoding="utf-8"))
            if loaded.get("version") == CACHE_VERSION:
                cache = loaded.get("files", {})
        except (OSError, ValueError, AttributeError):
            cache = {}
    out: dict[str, Any] = {}
    fresh: dict[str, Any] = {}
    changed = False
    for path, _origin, mtime, size in listing:
        key = str(path)
        hit = cache.get(key)
        if isinstance(hit, list) and len(hit) == 3 and hit[0] == mtime and hit[1] == size:
            out[key] = hit[2]
            fresh[key] = hit
            continue
        data = _read_yaml(path, size, problems)
        changed = True
        if data is not _BAD:
            out[key] = data
            fresh[key] = [mtime, size, data]
    if cache_path is not None and (changed or len(fresh) != len(cache)):
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "files": fresh}, default=str), encoding="utf-8")
            os.replace(tmp, cache_path)
        except OSError:
            pass  # a read-only data dir only costs speed
    return out


_BAD = object()


def _read_yaml(path: Path, size: int, problems: list[str]) -> Any:
    import yaml

    if size > MAX_RECORD_BYTES:
        problems.append(f"{path}: {size} bytes, larger than a record may be ({MAX_RECORD_BYTES})")
        return _BAD
    from rlmedic.bounded import check_yaml
    from rlmedic.confine import Confinement
    from rlmedic.errors import UserError

    try:
        # a regular file only, read to a cap on a non-blocking descriptor: a FIFO named x.yaml hung the
        # load, an x.yaml -> /dev/zero symlink (size 0 to stat) was read without bound
        data = Confinement.exactly([path], max_bytes=MAX_RECORD_BYTES).read_bytes(path, whole=True)
        text = data.decode("utf-8")
    except UserError as exc:
        problems.append(str(exc).replace(f"larger than {MAX_RECORD_BYTES} bytes, the most rlmedic reads from a file of "
                                         "this kind", f"larger than a record may be ({MAX_RECORD_BYTES} bytes)"))
        return _BAD
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})")
        return _BAD

    try:
        # alias bombs and deep nesting are refused before anything is built; without an anchor (&) there is
        # no alias to expand, and a record's few brackets cannot nest deep: the costly check is skipped
        if "&" in text or text.count("[") + text.count("{") > MAX_BRACKETS_UNCHECKED:
            check_yaml(text, str(path))
    except UserError as exc:
        problems.append(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}")
        return _BAD
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problems.append(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}")
        return _BAD


def _cache_path() -> Path | None:
    from rlmedic.settings import data_dir

    try:
        return data_dir() / "cache" / "known-records.json"
    except Exception:  # noqa: BLE001 - no data dir: no disk cache
        return None


def pack_hash(pack: Pack) -> str:
    """A digest of the records' content (the index re-embeds them when it changes); computed once a pack."""
    if not pack.digest:
        h = hashlib.sha256()
        for record in pack.records:
            h.update(record.model_dump_json(exclude={"path"}).encode())
        pack.digest = h.hexdigest()
    return pack.digest
