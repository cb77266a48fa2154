"""W&B run folders: curves, config and exit status from the ``.wandb`` transaction log.

``wandb/run-*`` and ``wandb/offline-run-*`` folders hold ``run-<id>.wandb``: every record the
run sent (history rows, config, console output, the exit record), written before anything is
uploaded, so it is there for offline runs and for runs whose machine died. It is a
LevelDB-style log (a 7-byte ``:W&B`` header, 32 KiB blocks of CRC-checked chunks) of
``wandb.proto`` ``Record`` messages. wandb 0.2x moved its reader into the Go service, so the
framing is read here (a few lines) and every record is parsed with wandb's own protobuf classes
from the optional extra ``rlmedic[wandb]``. The ``files/`` folder adds ``config.yaml`` and
``output.log`` (diagnosed as a log beside the curves).

A run with no exit record did not finish (or is still going): W&B then shows it "running"
forever, the case of a preempted spot instance.
"""

from __future__ import annotations

import math
import os
import re
import struct
import zlib
from pathlib import Path
from typing import Any, Callable

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Run, make_curve, median_interval, read_file_bytes
from rlmedic.tools.runs.locate import RUN_DIR, is_run_dir, is_wandb_root, runs_in  # noqa: F401 - re-exported

HEADER = b":W&B"
HEADER_LEN = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7  # crc32 (4) + length (2) + type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
#: Console lines kept from the transaction log when the folder has no output.log
MAX_OUTPUT_LINES = 4000
_INTERNAL = ("_runtime", "_timestamp", "_step", "_wandb")


_PB: list[Any] = []
_PROTO_FILES = ("wandb_base_pb2", "wandb_telemetry_pb2", "wandb_internal_pb2")


def _pb() -> Any:
    """wandb's ``wandb_internal_pb2`` (the ``Record`` message); one line naming the extra when wandb is absent."""
    if _PB:
        return _PB[0]
    import importlib.util
    import sys

    if "wandb" not in sys.modules and importlib.util.find_spec("wandb") is not None:
        try:
            _PB.append(_load_protos_only())
            return _PB[0]
        except Exception:  # noqa: BLE001 - an unexpected wandb layout: the ordinary import below
            pass
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise UserError("reading W&B runs needs the wandb extra: pip install 'rlmedic[wandb]'") from None
    _PB.append(wandb_internal_pb2)
    return wandb_internal_pb2


def _load_protos_only() -> Any:
    """wandb's generated protobuf modules without ``import wandb`` (1.9 s of SDK start-up, 10x the read).

    They only need google.protobuf and each other; for the time they load, ``wandb`` and
    ``wandb.proto`` are bare namespace modules over the installed package's folders, removed again
    afterwards, so a later ``import wandb`` runs normally (protobuf hands it the same classes)."""
    import importlib.util
    import sys
    import types

    import google.protobuf

    spec = importlib.util.find_spec("wandb")
    base = Path(spec.submodule_search_locations[0])  # type: ignore[union-attr,index]
    folder = base / "proto" / f"v{google.protobuf.__version__.split('.')[0]}"
    pkg = types.ModuleType("wandb")
    pkg.__path__ = [str(base)]
    proto = types.ModuleType("wandb.proto")
    proto.__path__ = [str(base / "proto")]
    added = {"wandb": pkg, "wandb.proto": proto}
    sys.modules.update(added)
    loaded: dict[str, Any] = {}
    try:
        for name in _PROTO_FILES:
            full = f"wandb.proto.{name}"
            mspec = importlib.util.spec_from_file_location(full, folder / f"{name}.py")
            module = importlib.util.module_from_spec(mspec)  # type: ignore[arg-type]
            sys.modules[full] = module
            added[full] = module
            setattr(proto, name, module)
            mspec.loader.exec_module(module)  # type: ignore[union-attr]
            loaded[name] = module
    finally:
        for name, module in added.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return loaded["wandb_internal_pb2"]


#: the CRC of each chunk type byte, which every chunk's CRC starts from
_KIND_CRC = [zlib.crc32(bytes((k,))) for k in range(256)]


def records(data: bytes) -> Any:
    """The record payloads of a transaction log (a torn last chunk is dropped: the run may still be writing)."""
    if not data.startswith(HEADER):
        raise UserError("not a W&B transaction log (no :W&B header)")
    pos, size = HEADER_LEN, len(data)
    pending: list[bytes] = []
    unpack = struct.Struct("<IHB").unpack_from
    crc32 = zlib.crc32
    while pos + CHUNK_HEADER <= size:
        room = BLOCK - (pos % BLOCK)
        if room < CHUNK_HEADER:
            pos += room  # block trailer padding
            continue
        crc, length, kind = unpack(data, pos)
        start = pos + CHUNK_HEADER
        end = start + length
        if end > size or (kind == 0 and length == 0 and crc == 0):
            if kind == 0 and length == 0 and end <= size:
                pos += room  # zero padding up to the block's end
                continue
            break
        chunk = data[start:end]
        if crc32(chunk, _KIND_CRC[kind]) != crc:
            break  # damaged or half-written: stop at the last good record
        pos = end
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = [chunk]
        elif kind == MIDDLE:
            pending.append(chunk)
        elif kind == LAST:
            pending.append(chunk)
            yield b"".join(pending)
            pending = []


def _floats(raw: Any) -> list[float]:
    """JSON numbers (and wandb's NaN / Infinity spellings) as floats; one that is not a number as NaN."""
    try:
        return list(map(float, raw))
    except ValueError:
        pass
    out = []
    for v in raw:
        try:
            out.append(float(v))
        except ValueError:
            out.append(math.nan)
    return out


def _number(raw: str) -> float | None:
    try:
        return float(raw)  # JSON numbers, and wandb's NaN / Infinity / -Infinity spellings
    except ValueError:
        return None


#: One history item with a number in its short form: HistoryItem{nested_key (2): one part, value_json (16)}
#: with one-byte lengths (wandb 0.2x writes every key so); any other form is left to the protobuf parse.
#: Only the key is captured: every item is matched (to list every key, and to be sure the record is all in
#: this form), the values of the keys the checks read come from :func:`_values_pattern`.
_ITEM_KEY = re.compile(rb"\n[\x00-\x7f]\x12[\x00-\x7f]([^\x00-\x1f\x82]+)\x82\x01[\x00-\x7f][-+0-9.eENaInfity]+")
_VALUE_TAG = b"\x82\x01"
_STEP, _WALL = b"_step", b"_timestamp"
#: A record's type is the field after its number: history (2) and summary (3) are most of a log
_HISTORY, _SUMMARY = 0x12, 0x1A


def _values_pattern(keys: set[bytes]) -> re.Pattern[bytes]:
    """The short-form items of ``keys`` only, capturing (key, value): a record's few wanted numbers
    without a Python object for each of its other items."""
    alts = b"|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))
    return re.compile(rb"\n[\x00-\x7f]\x12[\x00-\x7f](" + alts + rb")\x82\x01[\x00-\x7f]([-+0-9.eENaInfity]+)")


def _group(steps: list[int], items: list[list[tuple[bytes, bytes]]], walls: list[Any]) -> dict[str, tuple[Any, Any]]:
    """key -> (steps, values) from the short-form records' items, grouped by numpy (no Python loop over
    the items); ``_timestamp`` values go to ``walls``, ``_step`` is left out (it is each item's step)."""
    import itertools
    from operator import itemgetter

    import numpy as np

    flat = list(itertools.chain.from_iterable(items))
    if not flat:
        return {}
    keys = list(map(itemgetter(0), flat))
    raw = list(map(itemgetter(1), flat))
    ids_of = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    ids = np.fromiter(map(ids_of.__getitem__, keys), dtype=np.int32, count=len(keys))
    item_steps = np.repeat(np.asarray(steps, dtype=np.int64), list(map(len, items)))
    try:
        values = np.array(raw, dtype=np.float64)  # numpy parses the JSON numbers (NaN, Infinity too)
    except ValueError:
        values = np.asarray(_floats(raw), dtype=np.float64)
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(len(ids_of) + 1))
    out: dict[str, tuple[Any, Any]] = {}
    for key, i in ids_of.items():
        sel = order[bounds[i]:bounds[i + 1]]
        if key == _WALL:
            walls += values[sel].tolist()
        elif key != _STEP:
            out[key.decode("utf-8", "replace")] = (item_steps[sel], values[sel])
    return out


def _record_field(payload: bytes) -> int:
    """The tag byte of the field after the record's ``num`` (0 when it does not start that way)."""
    if not payload or payload[0] != 0x08:
        return payload[0] if payload else 0
    i = 1
    while i < len(payload) and payload[i] & 0x80:
        i += 1
    return payload[i + 1] if i + 1 < len(payload) else 0


def _history_fast(payload: bytes, wanted: re.Pattern[bytes] = _values_pattern({_STEP})
                  ) -> tuple[list[bytes], list[tuple[bytes, bytes]]] | None:
    """Every key of a history record and the (key, value) items of the wanted keys, read off its bytes;
    None when a field did not fit the short form (then the protobuf parse reads it): every value_json
    tag must belong to a matched item, and the record must log ``_step``."""
    keys = _ITEM_KEY.findall(payload)
    if len(keys) != payload.count(_VALUE_TAG) or _STEP not in keys:
        return None
    return keys, wanted.findall(payload)


def read_transaction_log(data: bytes, run: Run, *, keep_output: bool = True,
                         keep: Callable[[str], bool] | None = None) -> list[str]:
    """Fill ``run`` from a transaction log's bytes; the console lines it carried (bounded).

    History records (one per logged step, most of the file with summary records) are read off
    their bytes (:func:`_history_fast`): every key is listed, and only the values of the keys
    ``keep`` accepts (those the checks may read; None: all) are parsed. Summary records are skipped
    unparsed; everything else, and any history record the short form does not fit, goes through
    wandb's ``Record``."""
    pb = _pb()
    record = pb.Record()
    slow: dict[str, tuple[list[int], list[float]]] = {}
    walls: list[Any] = []
    output: list[str] = []
    number = _number
    known: set[bytes] = set()
    wanted: set[bytes] = {_STEP, _WALL}
    values_rx = _values_pattern(wanted)
    #: per short-form history record: its step and its wanted (key, value) items, grouped at the end
    steps: list[int] = []
    items: list[list[tuple[bytes, bytes]]] = []
    for payload in records(data):
        field = _record_field(payload)
        if field == _SUMMARY:
            continue
        if field == _HISTORY:
            fast = _history_fast(payload, values_rx)
            if fast is not None:
                keys, vals = fast
                if not known.issuperset(keys):  # new keys: list them, and read the wanted ones from here on
                    new = set(keys) - known
                    known |= new
                    more = {k for k in new if not k.startswith(b"_")
                            and (keep is None or keep(k.decode("utf-8", "replace")))}
                    if more:
                        wanted |= more
                        values_rx = _values_pattern(wanted)
                        vals = values_rx.findall(payload)
                steps.append(int(dict(vals)[_STEP]))
                items.append(vals)
                continue
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            h = record.history
            step = h.step.num
            for item in h.item:
                key = "/".join(item.nested_key) if item.nested_key else item.key
                if key.startswith("_"):
                    if key == "_timestamp":
                        walls.append(item.value_json)
                    elif key == "_step" and not step:
                        step = int(number(item.value_json) or 0)
                    continue
                v = number(item.value_json)
                if v is None:
                    continue
                entry2 = slow.get(key)
                if entry2 is None:
                    entry2 = slow[key] = ([], [])
                entry2[0].append(step)
                entry2[1].append(v)
        elif kind == "run":
            for c in record.run.config.update:
                key = "/".join(c.nested_key) if c.nested_key else c.key
                run.config[key] = c.value_json
            if record.run.display_name:
                run.name = record.run.display_name
        elif kind == "config":
            for c in record.config.update:
                run.config["/".join(c.nested_key) if c.nested_key else c.key] = c.value_json
        elif kind == "exit":
            run.exit_code = int(record.exit.exit_code)
            run.finished = run.exit_code == 0
        elif kind == "preempting":
            run.notes.append("the run reported preemption (wandb.mark_preempting)")
        elif kind in ("output_raw", "output") and keep_output:
            line = getattr(record, kind).line
            output.append(line)
            if len(output) > 2 * MAX_OUTPUT_LINES:
                del output[:MAX_OUTPUT_LINES]
    every = {k.decode("utf-8", "replace") for k in known if not k.startswith(b"_")}
    run.keys = sorted(set(run.keys) | every | set(slow))
    series = _group(steps, items, walls)
    for key in {*series, *slow}:
        k_steps, values = series.get(key, ([], []))
        if key in slow:
            k_steps = list(k_steps) + slow[key][0]
            values = list(values) + slow[key][1]
        if len(k_steps):
            run.curves[key] = make_curve(key, k_steps, values)
    wall_values = [w for w in _floats(walls) if math.isfinite(w)]
    if wall_values:
        run.last_wall = max(wall_values)
        run.step_interval = median_interval(wall_values[-10_000:])
    run.config.update(_flat_config(run.config))
    return output[-MAX_OUTPUT_LINES:]


def _flat_config(config: dict[str, Any]) -> dict[str, Any]:
    """Values the detectors use, parsed from the config's JSON: the response length cap under any of its names."""
    import json

    out: dict[str, Any] = {}
    for key, raw in config.items():
        try:
            value = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if isinstance(value, dict) and "value" in value:  # config.yaml's {desc, value} form
            value = value["value"]
        leaf = key.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
        if leaf in ("max_response_length", "rollout_max_response_len", "max_new_tokens") and isinstance(value, (int, float)):
            out["max_response_length"] = value
        if isinstance(value, dict):
            for k2, v2 in _walk(value, key):
                if k2.rsplit(".", 1)[-1] in ("max_response_length", "rollout_max_response_len", "max_new_tokens") \
                        and isinstance(v2, (int, float)):
                    out["max_response_length"] = v2
    return out


def _walk(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{prefix}.{k}")
    else:
        yield prefix, value


def read_run(path: Path, confinement: Any = None, keep: Callable[[str], bool] | None = None) -> Run:
    """One W&B run folder (or its ``.wandb`` file) as a :class:`Run`."""
    folder = path.parent if path.is_file() else path
    logs = [path] if path.is_file() else sorted(folder.glob("run-*.wandb"))
    run = Run(path=str(folder), source="wandb", name=folder.name)
    if logs:
        _pb()  # the missing extra is named on its own line, not as a damaged file
    mtimes = []
    output: list[str] = []
    for log in logs:
        data = read_file_bytes(log, confinement)
        mtimes.append(os.stat(log).st_mtime)
        try:
            output = read_transaction_log(data, run, keep=keep) or output
        except UserError as exc:
            raise UserError(f"{log}: {exc}") from None
    files = folder / "files"
    out_log = files / "output.log"
    if out_log.is_file():
        run.log_file = str(out_log)
        mtimes.append(os.stat(out_log).st_mtime)
    elif output:
        run.notes.append("console output read from the transaction log")
        run.config["_output_lines"] = output
    cfg = files / "config.yaml"
    if cfg.is_file():
        import yaml

        try:
            text = confinement.read_text(cfg) if confinement is not None else cfg.read_text(encoding="utf-8")
            data = yaml.safe_load(text)
            if isinstance(data, dict):
                run.config.update(_flat_config({k: v for k, v in data.items()}))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            pass
    if not logs and not run.log_file:
        raise UserError(f"{folder}: no run-*.wandb transaction log and no files/output.log in this W&B run folder")
    run.files_mtime = max(mtimes) if mtimes else None
    return run
