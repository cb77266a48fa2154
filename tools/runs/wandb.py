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

import os
import re
import struct
import zlib
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Run, make_curve, median_interval, read_file_bytes

HEADER = b":W&B"
HEADER_LEN = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7  # crc32 (4) + length (2) + type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-\w+$")
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


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (RUN_DIR.match(path.name) is not None or any(path.glob("run-*.wandb")))


def is_wandb_root(path: Path) -> bool:
    """A ``wandb/`` folder: it holds run folders."""
    try:
        return path.is_dir() and any(RUN_DIR.match(p.name) and p.is_dir() for p in path.iterdir())
    except OSError:
        return False


def runs_in(root: Path) -> list[Path]:
    """The run folders of a ``wandb/`` folder, oldest first (their names carry the start time)."""
    return sorted((p for p in root.iterdir() if RUN_DIR.match(p.name) and p.is_dir()),
                  key=lambda p: p.name.split("run-", 1)[1])


def records(data: bytes) -> Any:
    """The record payloads of a transaction log (a torn last chunk is dropped: the run may still be writing)."""
    if not data.startswith(HEADER):
        raise UserError("not a W&B transaction log (no :W&B header)")
    pos, size = HEADER_LEN, len(data)
    pending: list[bytes] = []
    unpack = struct.Struct("<IHB").unpack_from
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
        if zlib.crc32(chunk, zlib.crc32(bytes((kind,)))) & 0xFFFFFFFF != crc:
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


def _number(raw: str) -> float | None:
    try:
        return float(raw)  # JSON numbers, and wandb's NaN / Infinity / -Infinity spellings
    except ValueError:
        return None


def read_transaction_log(data: bytes, run: Run, *, keep_output: bool = True) -> list[str]:
    """Fill ``run`` from a transaction log's bytes; the console lines it carried (bounded)."""
    pb = _pb()
    record = pb.Record()
    series: dict[str, tuple[list[int], list[float]]] = {}
    walls: list[float] = []
    output: list[str] = []
    number = _number
    for payload in records(data):
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            h = record.history
            step = h.step.num
            for item in h.item:
                key = "/".join(item.nested_key) if item.nested_key else item.key
                if key.startswith("_"):
                    if key == "_timestamp":
                        v = number(item.value_json)
                        if v is not None:
                            walls.append(v)
                    elif key == "_step" and not step:
                        step = int(number(item.value_json) or 0)
                    continue
                v = number(item.value_json)
                if v is None:
                    continue
                entry = series.get(key)
                if entry is None:
                    entry = series[key] = ([], [])
                entry[0].append(step)
                entry[1].append(v)
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
    run.curves.update({k: make_curve(k, s, v) for k, (s, v) in series.items() if s})
    if walls:
        run.last_wall = max(walls)
        run.step_interval = median_interval(walls)
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


def read_run(path: Path, confinement: Any = None) -> Run:
    """One W&B run folder (or its ``.wandb`` file) as a :class:`Run`."""
    folder = path.parent if path.is_file() else path
    logs = [path] if path.is_file() else sorted(folder.glob("run-*.wandb"))
    run = Run(path=str(folder), source="wandb", name=folder.name)
    mtimes = []
    output: list[str] = []
    for log in logs:
        data = read_file_bytes(log, confinement)
        mtimes.append(os.stat(log).st_mtime)
        output = read_transaction_log(data, run) or output
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
