"""Which checkpoints really exist, are they intact, and how to resume from them.

Layouts understood:

- AReaL saver (Hugging Face format):
  ``{fileroot}/checkpoints/{user}/{experiment}/{trial}/default/epoch{E}epochstep{S}globalstep{G}/``
- AReaL recovery: ``{trial}/default/recover_checkpoint/`` (DCP shards) with
  ``{trial}/recover_info/step_info.json``; also the older ``{trial}/recover_checkpoint/``
  with its step info inside.
- slime / Megatron: ``{save}/iter_NNNNNNN/`` plus ``latest_checkpointed_iteration.txt``; a tracker
  that reads ``release`` names ``{save}/release/`` instead (converted or released weights, no
  iteration number), which Megatron loads as iteration 0, weights only.
- Plain Hugging Face save directories (``config.json`` + weights, e.g. ``checkpoint-500``).

Everything is read through :class:`~rlmedic.confine.Confinement` (capped walk, no
symlink following) and nothing is ever written.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from rlmedic.bounded import load_json
from rlmedic.confine import Confinement, FileEntry, redact, redact_value
from rlmedic.errors import UserError
from rlmedic.tools.citations import card_citation, doc_citation
from rlmedic.types import Citation, Finding, cite_dicts

AREAL_STEP_DIR = re.compile(r"^epoch(\d+)epochstep(\d+)globalstep(\d+)$")
MEGATRON_ITER_DIR = re.compile(r"^iter_(\d{7})$")
MEGATRON_RELEASE = "release"  # tracker text, and the directory it names
HF_STEP_DIR = re.compile(r"(?:checkpoint|global_step|globalstep|step)[-_]?(\d+)$", re.I)
TRACKER = "latest_checkpointed_iteration.txt"
WEIGHT_FILE = re.compile(r"(\.safetensors|\.bin|\.pt|\.pth|\.distcp)$")
DCP_SHARD = re.compile(r"^__(\d+)_(\d+)\.distcp$")
#: Past this many step folders a tree is "large": only the newest are checked file by file
#: (:func:`_large_tree_walk`); the rest are listed by name. A run that saved 100,000 steps
#: is answered in seconds instead of minutes, and the plan only needs the newest intact one.
LAZY_LIMIT = 2000
#: How many of the newest step folders of a large tree are checked (more if none of them is intact).
DETAIL = 100
#: Checkpoints a report lists in its JSON and text (the newest); the count says how many exist.
LIST_LIMIT = 200
#: Entries the name-only walk of a tree reads at most.
MAX_NAMES = 2_000_000
#: File systems that vanish with the container or the machine.
EPHEMERAL_FS = {"overlay", "overlayfs", "tmpfs", "aufs", "ramfs"}


def checkpoint_issue(id: str, severity: str, message: str, path: str = "", citation: Citation | None = None) -> Finding:
    """Something wrong with the checkpoints or their storage, as a Finding (``file`` is the path concerned)."""
    return Finding(id=id, category="checkpoint_recovery", severity=severity, summary=message,  # type: ignore[arg-type]
                   file=path, citations=[citation] if citation else [],
                   card=citation.ref if citation and citation.kind == "card" else "")


@dataclass(slots=True)  # a large tree makes 100,000 of them
class Checkpoint:
    kind: str  # areal_hf | areal_recover | megatron | hf
    path: str
    step: int | None = None  # global step / iteration
    epoch: int | None = None
    epoch_step: int | None = None
    mtime: float = 0.0
    size_bytes: int = 0
    files: int = 0
    user: str = ""
    experiment: str = ""
    trial: str = ""
    role: str = ""  # AReaL model role dir: default, critic, ...
    ranks: int | None = None  # DCP shards written by this many ranks
    issues: list[str] = field(default_factory=list)
    unreadable: bool = False  # (part of) the directory could not be read: not checked, not known damaged
    checked: bool = True  # False: an older folder of a large tree, listed by name only (files not read)

    @property
    def valid(self) -> bool:
        return not self.issues and self.checked

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "step": self.step,
            "epoch": self.epoch,
            "epoch_step": self.epoch_step,
            "time": datetime.fromtimestamp(self.mtime, UTC).isoformat() if self.mtime else None,
            "size_bytes": self.size_bytes,
            "files": self.files,
            "user": self.user,
            "experiment": self.experiment,
            "trial": self.trial,
            "role": self.role,
            "ranks": self.ranks,
            "valid": self.valid,
            "unreadable": self.unreadable,
            "issues": self.issues,
        } | ({} if self.checked else {"checked": False})


@dataclass
class RecoveryPlan:
    framework: str  # areal | slime | hf
    mode: str  # auto-recover | from-weights | megatron-load | none
    resume_from: Checkpoint | None
    command: str = ""
    config_lines: list[str] = field(default_factory=list)
    keep_unchanged: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "mode": self.mode,
            "resume_from": self.resume_from.to_dict() if self.resume_from else None,
            "command": self.command,
            "config_lines": self.config_lines,
            "keep_unchanged": self.keep_unchanged,
            "differences": self.differences,
            "notes": self.notes,
            "citations": cite_dicts(self.citations),
        }


@dataclass
class CheckpointReport:
    root: str
    layout: str  # areal | slime | hf | unknown | empty
    checkpoints: list[Checkpoint] = field(default_factory=list)
    issues: list[Finding] = field(default_factory=list)
    tracker_iteration: int | None = None
    tracker_release: bool = False  # a tracker reads "release": the checkpoint is {save}/release/
    before_step: int | None = None
    experiments: dict[str, list[str]] = field(default_factory=dict)  # experiment -> trials seen
    truncated: bool = False
    plan: RecoveryPlan | None = None
    #: checkpoints of a large tree left out of ``checkpoints`` (older, listed by name only): counted, not kept
    omitted: int = 0
    #: AReaL step folders with no file inside, (step, path): not checkpoints, one summarised finding
    empty_steps: list[tuple[int, str]] = field(default_factory=list)
    #: how many empty step folders there were (``empty_steps`` keeps only the newest few once summarised:
    #: every result is redacted whole, and 100,000 paths cost seconds to walk for nothing shown)
    empty_count: int = 0

    @property
    def total(self) -> int:
        """How many checkpoints exist, listed or not."""
        return len(self.checkpoints) + self.omitted

    def selected(self) -> list[Checkpoint]:
        """Checkpoints passing ``before_step`` (all when unset), oldest first."""
        if self.before_step is None:
            return self.checkpoints
        return [c for c in self.checkpoints if c.step is not None and c.step < self.before_step]

    def latest(self, *, kinds: tuple[str, ...] = (), valid_only: bool = True) -> Checkpoint | None:
        pool = [c for c in self.selected() if (not kinds or c.kind in kinds) and (c.valid or not valid_only)]
        pool = [c for c in pool if c.step is not None] or pool
        return max(pool, key=lambda c: (c.step if c.step is not None else -1, c.mtime), default=None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract; config values quoted in the plan (fileroot URLs...) are redacted."""
        return redact_value({
            "root": self.root,
            "layout": self.layout,
            "before_step": self.before_step,
            "checkpoints": [c.to_dict() for c in self.selected()[-LIST_LIMIT:]],
            "all_checkpoints": self.total,
            "tracker_iteration": self.tracker_iteration,
            "tracker_release": self.tracker_release,
            "experiments": self.experiments,
            "issues": [i.to_dict() for i in self.issues],
            "truncated": self.truncated,
            "empty_step_folders": self.empty_count or len(self.empty_steps),
            "plan": self.plan.to_dict() if self.plan else None,
        } | ({"listed": min(LIST_LIMIT, len(self.selected()))} if self.omitted or len(self.selected()) > LIST_LIMIT else {}))


# --------------------------------------------------------------------------- storage checks


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str
    device: str = ""


def system_mounts() -> list[Mount]:
    """The machine's mount table (psutil); empty when unavailable."""
    try:
        import psutil

        return [Mount(p.mountpoint, p.fstype, p.device) for p in psutil.disk_partitions(all=True)]
    except Exception:  # pragma: no cover - platform specific
        return []


def mount_for(path: str | os.PathLike[str], mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path``: the longest mount point that prefixes it."""
    target = PurePosixPath(os.path.abspath(path))
    best: Mount | None = None
    for mount in mounts:
        point = PurePosixPath(mount.mountpoint)
        if (target == point or point in target.parents) and (best is None or len(str(point)) > len(best.mountpoint)):
            best = mount
    return best


def storage_issues(root_as_given: str, resolved: Path, mounts: list[Mount] | None) -> list[Finding]:
    """Relative roots and roots on the container disk / tmpfs (lost with the machine)."""
    cite = card_citation("checkpoints-not-on-persistent-volume")
    issues = []
    if not os.path.isabs(os.path.expanduser(root_as_given)):
        issues.append(checkpoint_issue("relative-root", "warning",
                            f"{root_as_given!r} is a relative path (resolves to {resolved}); a relative fileroot or --save "
                            "follows the launch directory, typically the container disk. Use an absolute path on a "
                            "mounted volume.", str(resolved), cite))
    mount = mount_for(resolved, mounts if mounts is not None else system_mounts())
    under_tmp = str(resolved) == "/tmp" or str(resolved).startswith("/tmp/")
    if mount is not None and (
        mount.fstype in EPHEMERAL_FS or (mount.mountpoint == "/" and mount.fstype not in ("ext4", "xfs", "btrfs", "zfs"))
    ):
        issues.append(checkpoint_issue("ephemeral-storage", "warning",
                            f"{resolved} lies on {mount.mountpoint} ({mount.fstype}), the container's own disk, not a "
                            "mounted volume: it is lost when the pod or spot instance goes away.", str(resolved), cite))
    elif under_tmp and (mount is None or not mount.mountpoint.startswith("/tmp")):
        issues.append(checkpoint_issue("ephemeral-storage", "warning", f"{resolved} is under /tmp: cleaned on reboot and lost with "
                            "the machine; keep checkpoints on a mounted volume.", str(resolved), cite))
    return issues


# --------------------------------------------------------------------------- scanning


def _weights_issue(files: list[FileEntry], directory: Path, confinement: Confinement, *, dcp: bool = False) -> list[str]:
    weights = [f for f in files if WEIGHT_FILE.search(f.path.name)]
    issues = []
    if not weights:
        issues.append("no weight files (*.safetensors, *.bin, *.pt, *.distcp)")
        return issues
    empty = [f.path.name for f in weights if f.size == 0]
    if empty:
        issues.append(f"empty weight file(s): {', '.join(sorted(empty)[:5])}")
    index = directory / "model.safetensors.index.json"
    if any(_in_dir(f, directory, index.name) for f in files):
        try:
            shards = set(load_json(confinement.read_text(index, whole=True), index.name).get("weight_map", {}).values())
        except UserError as exc:
            issues.append(f"model.safetensors.index.json does not parse ({str(exc).removeprefix(index.name + ': ')})")
        except (AttributeError, TypeError):  # not a mapping, unhashable shard names
            issues.append("model.safetensors.index.json does not parse (no weight_map of shard names)")
        else:
            present = {f.path.name for f in files if os.path.dirname(str(f.path)) == str(directory)}
            missing = sorted(s for s in shards if s not in present)
            if missing:
                issues.append(f"shard(s) listed in model.safetensors.index.json are missing: {', '.join(missing[:5])}")
    if dcp and not any(f.path.name == ".metadata" for f in files) and any(f.path.name.endswith(".distcp") for f in files):
        issues.append("DCP shards without a .metadata file (the save did not finish)")
    return issues


def _dcp_ranks(files: list[FileEntry]) -> int | None:
    ranks = {int(m.group(1)) for f in files if (m := DCP_SHARD.match(f.path.name))}
    return len(ranks) or None


def _read_step_info(path: Path, confinement: Confinement) -> tuple[dict[str, Any] | None, str]:
    try:
        data = load_json(confinement.read_text(path, max_bytes=1024 * 1024, whole=True), path.name)
    except UserError as exc:
        return None, str(exc)
    if not isinstance(data, dict) or not isinstance(data.get("global_step"), int) or data["global_step"] < 0:
        return None, f"{path.name} has no valid global_step"
    return data, ""


def _group(walk_files: list[FileEntry], dirs: list[Path], match: Any) -> dict[Path, list[FileEntry]]:
    """Checkpoint directory -> its files (each file goes to its nearest matching ancestor).

    Works on path strings with one lookup per directory: ``Path.parents`` and ``Path``
    hashing cost seconds on a tree of 100,000 step folders.
    """
    groups: dict[Path, list[FileEntry]] = {d: [] for d in dirs if match(d)}
    if not groups:
        return groups
    by_text = {str(d): d for d in groups}
    owner: dict[str, Path | None] = {}
    for entry in walk_files:
        parent = os.path.dirname(str(entry.path))
        if parent in owner:
            found = owner[parent]
        else:
            found, here = None, parent
            while True:
                if here in by_text:
                    found = by_text[here]
                    break
                up = os.path.dirname(here)
                if up == here:
                    break
                here = up
            owner[parent] = found
        if found is not None:
            groups[found].append(entry)
    return groups


def _in_dir(entry: FileEntry, directory: Path, name: str) -> bool:
    """``entry`` is ``directory / name`` (compared as text: cheap on big trees)."""
    return entry.path.name == name and os.path.dirname(str(entry.path)) == str(directory)


def _summarise(ckpt: Checkpoint, files: list[FileEntry]) -> Checkpoint:
    ckpt.files = len(files)
    ckpt.size_bytes = sum(f.size for f in files)
    ckpt.mtime = max((f.mtime for f in files), default=0.0)
    return ckpt


def _areal_names(path: Path | str) -> tuple[str, str, str, str]:
    """(user, experiment, trial, role) from ``.../{user}/{exp}/{trial}/{role}/<ckpt>``."""
    parts = str(path).split(os.sep)  # as Path.parts, without parsing (100,000 folders)
    if parts and parts[0] == "":
        parts[0] = os.sep
    role, trial, exp, user = (parts[-2:-1] or [""])[0], (parts[-3:-2] or [""])[0], (parts[-4:-3] or [""])[0], (parts[-5:-4] or [""])[0]
    return user, exp, trial, role


def list_checkpoints(
    root: str | os.PathLike[str],
    *,
    experiment_name: str | None = None,
    trial_name: str | None = None,
    before_step: int | None = None,
    confinement: Confinement,
    mounts: list[Mount] | None = None,
    max_entries: int = 200_000,
) -> CheckpointReport:
    """Find and check every checkpoint under ``root`` (any level of the AReaL tree, a slime --save dir, or HF dirs)."""
    root_text = str(root)
    resolved = confinement.existing(root)
    if not resolved.is_dir():
        raise UserError(f"{root}: not a directory")
    names = _NameWalk(resolved)
    step_dirs = names.step_dirs
    detail = DETAIL
    empty: set[str] = set()  # AReaL step folders found to hold no file (filled by the large-tree walk)
    while True:
        report = CheckpointReport(root=str(resolved), layout="unknown", before_step=before_step)
        if len(step_dirs) > LAZY_LIMIT:
            walk, unchecked, by_name = _large_tree_walk(names, step_dirs, detail, before_step, empty)
            cap = MAX_NAMES
        else:
            walk, unchecked, by_name = confinement.walk_files(resolved, max_entries=max_entries), set(), set()
            cap = max_entries
        areal, slime, hf = _scan_all(walk, resolved, confinement, report, unchecked, empty, by_name, names.steps)
        if not unchecked or any(c.valid for c in areal + slime + hf) or detail >= len(step_dirs):
            break
        detail *= 8  # none of the newest is intact: look further back
    report.truncated = walk.truncated
    head = storage_issues(root_text, resolved, mounts)
    if walk.truncated:
        head.append(checkpoint_issue("truncated", "warning", f"stopped after {cap} entries; point at a deeper directory",
                                     str(resolved)))
    report.issues[:0] = head  # before what the scanners found, as a reader expects
    if report.empty_steps or empty:  # the large-tree walk left its empty AReaL step folders out of the scan
        report.issues.append(_empty_steps_issue(report, empty, names))
    if unchecked:
        report.issues.append(checkpoint_issue(
            "large-tree", "info", f"{len(step_dirs)} step folders: the newest {len(step_dirs) - len(unchecked)} were checked "
            "file by file; older ones are listed by name (their files were not read)", str(resolved)))
    if areal:
        report.layout = "areal"
    elif slime or report.tracker_iteration is not None or report.tracker_release:
        report.layout = "slime"
    elif hf:
        report.layout = "hf"
    ckpts = areal + slime + hf
    _mark_unreadable(ckpts, walk.unreadable, report)
    for c in ckpts:
        if c.experiment:
            trials = report.experiments.setdefault(c.experiment, [])
            if c.trial and c.trial not in trials:
                trials.append(c.trial)
    if experiment_name or trial_name:
        kept = [c for c in ckpts if (not experiment_name or c.experiment == experiment_name) and (not trial_name or c.trial == trial_name)]
        if not kept and ckpts:
            report.issues.append(_name_mismatch(experiment_name, trial_name, report.experiments))
        ckpts = kept
    report.checkpoints = sorted(ckpts, key=lambda c: (c.step if c.step is not None else -1, c.kind, c.path))
    # the newest checkpoint is what a resume loads: damaged, it is an error whatever its kind (an
    # older damaged Hugging Face save is only a warning: the newer one is there)
    newest = max(report.selected(), key=lambda c: (c.step if c.step is not None else -1, c.mtime), default=None)
    for c in report.checkpoints:
        for problem in c.issues:
            severe = c.kind in ("areal_recover", "megatron") or c is newest
            report.issues.append(checkpoint_issue("damaged-checkpoint", "error" if severe else "warning",
                                       f"{c.path}: {problem}", c.path,
                                       card_citation("recover-checkpoint-invalid" if c.kind == "areal_recover" else "recovery-checkpoint-missing")))
    if not report.checkpoints and any(i.id == "name-mismatch" for i in report.issues):
        pass  # the name mismatch already says what exists: one message, not a second "none under ROOT"
    elif not report.checkpoints:
        if report.layout == "unknown":
            report.layout = "empty"
        report.issues.append(checkpoint_issue("no-checkpoints", "error",
                                   f"no checkpoints under {resolved}" + (f" before step {before_step}" if before_step else "")
                                   + ": check fileroot, the user the run ran as (often root), experiment_name/trial_name, "
                                   "and that the volume is mounted", str(resolved), card_citation("no-checkpoints-found")))
    elif before_step is not None and not report.selected():
        earliest = next((c.step for c in report.checkpoints if c.step is not None), report.checkpoints[0].step)
        report.issues.append(checkpoint_issue("none-before-step", "error",
                                   f"{len(report.checkpoints)} checkpoint(s), but none before step {before_step} "
                                   f"(earliest: step {earliest})", str(resolved),
                                   card_citation("no-checkpoints-found")))
    if unchecked:
        _keep_listed(report)
    return report


#: Empty step folders kept in a report once they are summarised in one finding (the newest ones).
EMPTY_KEPT = 20


def _empty_steps_issue(report: CheckpointReport, lazy: set[str], names: _NameWalk) -> Finding:
    """One finding for every AReaL step folder that holds no file (not one each: a run can leave 100,000).

    Those the scanner found are in ``report.empty_steps``; those the large-tree walk found are
    ``lazy`` (paths). The report keeps their count and the newest :data:`EMPTY_KEPT`: every
    result is redacted whole, and 100,000 paths cost seconds for nothing shown.
    """
    found = list(report.empty_steps)
    if lazy:
        kept = []
        for d in reversed(names.by_step()):
            if d in lazy:
                kept.append((names.step_dirs[d], d))
                if len(kept) == EMPTY_KEPT:
                    break
        found += kept
    found.sort()
    count = len(report.empty_steps) + len(lazy)
    report.empty_count, report.empty_steps = count, found[-EMPTY_KEPT:]
    step, path = found[-1]
    newest = max(names.step_dirs.values(), default=None)
    # .../{trial}/{role}/<step folder> -> .../{trial}: a folder of step folders at a time (there can be 100,000)
    trials = {p.rsplit(os.sep, 2)[0] for _s, p in found}
    if lazy:
        paths = list(names.steps)
        trials.update(os.path.dirname(parent) for parent, start, end in names.step_parents
                      if not lazy.isdisjoint(paths[start:end]))
    where = f" across {len(trials)} trials" if len(trials) > 1 else ""
    message = (f"{count:,} step folder{'s' if count != 1 else ''}{where} hold{'' if count != 1 else 's'} "
               f"no checkpoint (no file inside), e.g. {path}")
    if step == newest:
        message += f"; the newest, step {step}, is one of them: a save that stopped before writing anything"
    else:
        message += "; they are not counted as checkpoints (a save that never wrote, or a clean-up that left the folders)"
    return checkpoint_issue("empty-step-folders", "warning", message, path, card_citation("recovery-checkpoint-missing"))


def _keep_listed(report: CheckpointReport) -> None:
    """Keep the checked checkpoints and the newest listed ones; count the others.

    A report of 100,000 checkpoint objects costs more to redact and render than the scan;
    nobody reads past the newest few hundred, and the plan needs only the checked ones.
    """
    listed = {id(c) for c in report.selected()[-LIST_LIMIT:]}
    kept = [c for c in report.checkpoints if c.checked or id(c) in listed]
    report.omitted = len(report.checkpoints) - len(kept)
    report.checkpoints = kept


def _scan_all(walk: Any, resolved: Path, confinement: Confinement, report: CheckpointReport,
              unchecked: set[str], empty: set[str] = frozenset(), by_name: set[str] = frozenset(),
              order: dict[str, int] | None = None) -> tuple[list[Checkpoint], list[Checkpoint], list[Checkpoint]]:
    """Every checkpoint of the walk; ``by_name``: AReaL step folders left out of the walk (no Path each), listed by name."""
    unreadable = [str(u) for u in walk.unreadable]
    areal = _scan_areal(walk.files, walk.dirs, confinement, report, unchecked, empty, unreadable)
    if by_name:
        areal = _with_listed_by_name(areal, by_name, order or {})
    slime = _scan_megatron(walk.files, walk.dirs, resolved, confinement, report, unchecked)
    hf = _scan_hf(walk.files, walk.dirs, confinement, {c.path for c in areal + slime})
    if unchecked:
        for c in (*areal, *slime, *hf):
            if c.path in unchecked:  # its files were not read: neither intact nor damaged
                c.checked, c.issues, c.files, c.size_bytes, c.mtime = False, [], 0, 0, 0.0
    return areal, slime, hf


class _NameWalk:
    """Every directory and file name under a root, without a single ``stat`` (``scandir``'s types).

    Symlinks are skipped, as :meth:`Confinement.walk_files` does. Used to count the step
    folders before deciding how much of the tree to read file by file. A step folder's
    step is read from its name once, here (a tree can hold 100,000 of them).
    """

    def __init__(self, root: Path) -> None:
        #: the folders other than :attr:`steps` (sorted under each parent)
        self.dirs: list[str] = [str(root)]
        self.files: dict[str, list[str]] = {}
        self.unreadable: list[str] = []
        self.truncated = False
        #: AReaL and Megatron step folders, named by their pattern -> their step: entered only when checked (:meth:`expand`)
        self.steps: dict[str, int] = {}
        #: the Megatron ones among them (an empty iter_ folder is a damaged save, not an empty step folder)
        self.megatron: set[str] = set()
        #: (folder, start, end): that folder holds the step folders ``list(steps)[start:end]``
        self.step_parents: list[tuple[str, int, int]] = []
        self._seen = 0
        self._nfiles = 0
        self._walk([str(root)], defer=True)
        #: step folders of :attr:`steps` walked by :meth:`expand` (a bare one is only listed: never walked twice either)
        self.entered: set[str] = set()
        hf = {}
        for d in self.dirs:
            m = HF_STEP_DIR.search(os.path.basename(d))
            if m:
                hf[d] = int(m.group(1))
        #: every step folder -> its step: :attr:`steps` and Hugging Face ``checkpoint-N`` folders (walked already)
        self.step_dirs: dict[str, int] = {**self.steps, **hf} if hf else self.steps
        self._by_step: list[str] | None = None

    def _walk(self, stack: list[str], *, defer: bool = False) -> None:
        """Walk the folders of ``stack``; with ``defer``, step folders are only noted in :attr:`steps`."""
        areal = AREAL_STEP_DIR.match if defer else _no_match
        megatron, steps, dirs = MEGATRON_ITER_DIR.match if defer else _no_match, self.steps, self.dirs
        while stack:
            directory = stack.pop()
            names: list[str] = []
            inner: list[str] = []
            # step folders go straight to their dict (ordered later by step); only the rest is
            # sorted, so that the walk and its lists come out the same on every file system.
            # Entries are not kept: 100,000 DirEntry objects would cost the garbage collector more.
            room = MAX_NAMES - self._seen
            seen, first = 0, len(steps)
            try:
                with os.scandir(directory) as it:
                    for entry in it:
                        seen += 1
                        if seen > room:
                            seen -= 1
                            self.truncated = True
                            break
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                m = areal(entry.name)
                                if m:
                                    steps[entry.path] = int(m.group(3))
                                elif m := megatron(entry.name):
                                    path = entry.path
                                    steps[path] = int(m.group(1))
                                    self.megatron.add(path)
                                else:
                                    inner.append(entry.path)
                            elif not entry.is_symlink():
                                names.append(entry.name)
                        except OSError:
                            self.unreadable.append(entry.path)
            except OSError:
                self.unreadable.append(directory)
            self._seen += seen
            if len(steps) > first:
                self.step_parents.append((directory, first, len(steps)))
            if names:
                names.sort()
                self.files[directory] = names
                self._nfiles += len(names)
            if inner:
                inner.sort()
                dirs += inner
                stack += inner
            if self.truncated:
                return

    def expand(self, directories: list[str]) -> tuple[set[str], list[str]]:
        """Walk into step folders; return the AReaL ones with no file anywhere inside, and the others.

        One ``listdir`` per folder: an empty folder (the common case of a tree of 100,000 of
        them) costs that call and nothing else. A folder that cannot be read is not empty:
        :meth:`_walk` records it as unreadable. Hugging Face step folders (walked already) and
        folders that held something when entered before are not entered again.
        """
        todo, held = directories, []
        if self.entered or self.step_dirs is not self.steps:
            todo = []
            for d in directories:
                (todo if d in self.steps and d not in self.entered else held).append(d)
        listdir = os.listdir
        bare: list[str] = []
        full: list[str] = []
        for directory in todo:
            try:
                (full if listdir(directory) else bare).append(directory)
            except OSError:
                full.append(directory)
        self._seen += len(bare)
        empty = set(bare)
        for directory in full:
            files, unreadable = self._nfiles, len(self.unreadable)
            self._walk([directory])
            if self._nfiles == files and len(self.unreadable) == unreadable and not self.truncated:
                empty.add(directory)  # only folders inside, no file
            else:
                held.append(directory)
        self.entered.update(full)  # walked once: its names are listed (an empty one is not asked for again)
        if self.megatron:  # an empty iter_ folder is a damaged save: checked, not summarised
            held += [d for d in empty if d in self.megatron]
            empty.difference_update(self.megatron)
        return empty, held

    def by_step(self) -> list[str]:
        """Every step folder, oldest first (sorted once: a tree can hold 100,000).

        Sorted on the step alone; folders of one step keep the walk's order (parents sorted by name).
        """
        if self._by_step is None:
            self._by_step = sorted(self.step_dirs, key=self.step_dirs.__getitem__)
        return self._by_step


def _no_match(_name: str) -> None:
    return None


def _large_tree_walk(names: _NameWalk, step_dirs: dict[str, int], detail: int,
                     before_step: int | None, empty: set[str]) -> tuple[Any, set[str], set[str]]:
    """A walk result that stats only the newest ``detail`` step folders (before ``before_step``) and files outside step folders.

    Returns it with the step folders left unchecked, and the AReaL ones among them, which the
    walk leaves out (:func:`_scan_all` lists them by name). Files inside an unchecked folder
    are not listed, so the scanners see such a folder as empty; :func:`_scan_all` then
    marks it unchecked instead of damaged.
    """
    from rlmedic.confine import WalkResult

    ordered = names.by_step()
    wanted = ordered if before_step is None else [d for d in ordered if step_dirs[d] < before_step] or ordered
    # the newest ``detail`` folders that hold something: an empty AReaL step folder (found when
    # entered, and added to ``empty``) is no checkpoint, so the next newest is entered instead, in
    # growing batches (an empty Megatron iter_ folder is a damaged save the tracker may name: checked)
    candidates = [d for d in wanted if d not in empty] if empty else wanted
    newest: set[str] = set()
    end, batch = len(candidates), detail
    while len(newest) < detail and end > 0:
        take = candidates[max(0, end - max(batch, detail - len(newest))):end]
        end -= len(take)
        found, held = names.expand(take)
        empty |= found
        newest.update(held)
        batch *= 2
    all_steps = step_dirs
    unchecked = step_dirs.keys() - newest - empty
    owner: dict[str, str | None] = {}

    def step_dir_of(directory: str) -> str | None:
        if directory not in owner:
            here, found = directory, None
            while True:
                if here in all_steps:
                    found = here
                    break
                up = os.path.dirname(here)
                if up == here:
                    break
                here = up
            owner[directory] = found
        return owner[directory]

    # an AReaL step folder found empty (and what is inside it) is left out: no checkpoint, no Path object
    # (100,000 of them cost seconds); list_checkpoints summarises them in one finding
    gone = empty  # AReaL step folders only
    dirs = [Path(d) for d in names.dirs if not gone or d in all_steps or step_dir_of(d) not in gone]
    # an unchecked AReaL step folder gets no Path either: _scan_all lists it by its name
    by_name = {d for d in unchecked if d in names.steps and d not in names.megatron}
    if len(gone) + len(by_name) < len(names.steps):  # else no step folder is left to scan
        dirs += [Path(d) for d in names.steps if d not in gone and d not in by_name]
    walk = WalkResult(dirs=dirs, truncated=names.truncated, unreadable=[Path(u) for u in names.unreadable])
    for directory, files in names.files.items():
        if step_dir_of(directory) in unchecked:
            base = os.path.basename(directory)
            if directory in unchecked and not (AREAL_STEP_DIR.match(base) or MEGATRON_ITER_DIR.match(base)):
                # a Hugging Face save is recognised by its file names (config.json + weights): names only, no stat
                walk.files += [FileEntry(Path(directory, n), 0, 0.0) for n in files
                               if n == "config.json" or n.endswith(".index.json") or WEIGHT_FILE.search(n)]
            continue
        for name in files:
            full = os.path.join(directory, name)
            try:
                st = os.stat(full, follow_symlinks=False)
            except OSError:
                walk.unreadable.append(Path(full))
                continue
            if stat.S_ISREG(st.st_mode):
                walk.files.append(FileEntry(Path(full), st.st_size, st.st_mtime))
    return walk, unchecked, by_name


def _mark_unreadable(ckpts: list[Checkpoint], unreadable: list[Path], report: CheckpointReport) -> None:
    """A directory the walk could not enter is not an interrupted save: say it could not be read."""
    if not unreadable:
        return
    owned: set[Path] = set()
    for c in ckpts:
        inside = [u for u in unreadable if u == Path(c.path) or Path(c.path) in u.parents]
        if inside:
            owned.update(inside)
            c.unreadable = True
            c.issues = [f"cannot read {inside[0]}" + (f" (+{len(inside) - 1} more)" if len(inside) > 1 else "")
                        + ": its contents were not checked; run as the user that wrote the checkpoints (often root)"]
    rest = [u for u in unreadable if u not in owned]
    if rest:
        report.issues.append(checkpoint_issue(
            "unreadable", "warning",
            f"{len(rest)} path(s) could not be read, so checkpoints under them may be missing from this list: "
            + ", ".join(map(str, rest[:5])) + (" ..." if len(rest) > 5 else "")
            + "; run as the user that wrote them (often root)", str(rest[0]), card_citation("no-checkpoints-found")))


def _name_mismatch(experiment: str | None, trial: str | None, seen: dict[str, list[str]]) -> Finding:
    import difflib

    wanted = f"experiment {experiment!r}" if experiment else ""
    wanted += (" / " if wanted and trial else "") + (f"trial {trial!r}" if trial else "")
    hints = []
    if experiment and experiment not in seen:
        close = difflib.get_close_matches(experiment, list(seen), n=1, cutoff=0.6)
        if close:
            hints.append(f"did you mean experiment {close[0]!r}?")
    trials = sorted({t for ts in seen.values() for t in ts})
    if trial and trial not in trials:
        close = difflib.get_close_matches(trial, trials, n=1, cutoff=0.6)
        if close:
            hints.append(f"did you mean trial {close[0]!r}?")
    listing = "; ".join(f"{e}: {', '.join(ts)}" for e, ts in sorted(seen.items()))
    return checkpoint_issue("name-mismatch", "error",
                 f"no checkpoints for {wanted}. Found: {listing or 'none'}. " + " ".join(hints)
                 + " Recovery needs the exact experiment_name and trial_name of the interrupted run.",
                 citation=card_citation("recovery-config-changed"))


def _scan_areal(files: list[FileEntry], dirs: list[Path], confinement: Confinement, report: CheckpointReport,
                unchecked: frozenset[str] | set[str] = frozenset(), empty: frozenset[str] | set[str] = frozenset(),
                unreadable: list[str] | None = None) -> list[Checkpoint]:
    out: list[Checkpoint] = []
    file_set = {str(f.path) for f in files if f.path.name == "step_info.json"}
    dir_set = {str(d) for d in dirs if d.name == "recover_info"}
    for directory, group in _group(files, dirs, lambda d: AREAL_STEP_DIR.match(d.name)).items():
        m = AREAL_STEP_DIR.match(directory.name)
        text = str(directory)
        if text in empty or (not group and text not in unchecked
                             and not any(u == text or u.startswith(text + os.sep) for u in unreadable or ())):
            report.empty_steps.append((int(m.group(3)), text))  # no file at all: not a checkpoint
            continue
        user, exp, trial, role = _areal_names(directory)
        ckpt = Checkpoint("areal_hf", str(directory), step=int(m.group(3)), epoch=int(m.group(1)),
                          epoch_step=int(m.group(2)), user=user, experiment=exp, trial=trial, role=role)
        if ckpt.path in unchecked:
            out.append(ckpt)  # listed by name: _scan_all marks it
            continue
        _summarise(ckpt, group)
        ckpt.issues += _weights_issue(group, directory, confinement)
        if not any(_in_dir(f, directory, "config.json") for f in group):
            ckpt.issues.append("no config.json (not a complete Hugging Face save)")
        out.append(ckpt)
    for directory, group in _group(files, dirs, lambda d: d.name == "recover_checkpoint").items():
        # docs: {trial}/{role}/recover_checkpoint + {trial}/recover_info; older: {trial}/recover_checkpoint
        parent = directory.parent
        if str(parent.parent / "recover_info") in dir_set or parent.name in ("default", "critic", "ref", "actor"):
            trial_dir, role = parent.parent, parent.name
        else:
            trial_dir, role = parent, ""
        user, exp, trial = trial_dir.parent.parent.name, trial_dir.parent.name, trial_dir.name
        ckpt = Checkpoint("areal_recover", str(directory), user=user, experiment=exp, trial=trial, role=role or "default")
        _summarise(ckpt, group)
        candidates = [trial_dir / "recover_info" / "step_info.json", directory / "step_info.json"]
        info_path = next((p for p in candidates if str(p) in file_set), None)
        if info_path is None:
            ckpt.issues.append("no step_info.json (looked in recover_info/ and inside recover_checkpoint/)")
        else:
            info, error = _read_step_info(info_path, confinement)
            if info is None:
                ckpt.issues.append(error)
            else:
                ckpt.step, ckpt.epoch, ckpt.epoch_step = info["global_step"], info.get("epoch"), info.get("epoch_step")
        weight_files = [f for f in group if f.path.name != "step_info.json"]
        ckpt.issues += _weights_issue(weight_files, directory, confinement, dcp=True)
        ckpt.ranks = _dcp_ranks(group)
        out.append(ckpt)
    return out


def _with_listed_by_name(areal: list[Checkpoint], by_name: set[str], order: dict[str, int]) -> list[Checkpoint]:
    """``areal`` with a name-only checkpoint for each folder of ``by_name``, in the walk's order.

    The walk's order is the one a full scan gives (folders nested in others first, then the
    step folders as the walk found them, then recovery checkpoints), so the report is the same.
    """
    scanned = {c.path: c for c in areal if c.kind == "areal_hf"}
    merged: list[Checkpoint] = []
    for path in order:
        c = scanned.pop(path, None)
        if c is not None:
            merged.append(c)
        elif path in by_name:
            m = AREAL_STEP_DIR.match(os.path.basename(path))
            user, exp, trial, role = _areal_names(path)
            merged.append(Checkpoint("areal_hf", path, step=int(m.group(3)), epoch=int(m.group(1)),
                                     epoch_step=int(m.group(2)), user=user, experiment=exp, trial=trial, role=role))
    nested = [c for c in areal if c.kind == "areal_hf" and c.path in scanned]
    return nested + merged + [c for c in areal if c.kind != "areal_hf"]


def _is_release(ckpt: Checkpoint) -> bool:
    return ckpt.kind == "megatron" and ckpt.step is None and Path(ckpt.path).name == MEGATRON_RELEASE


def _scan_megatron(files: list[FileEntry], dirs: list[Path], root: Path, confinement: Confinement,
                   report: CheckpointReport, unchecked: frozenset[str] | set[str] = frozenset()) -> list[Checkpoint]:
    trackers = [f for f in files if f.path.name == TRACKER]
    texts: dict[Path, str | UserError] = {}
    for tracker in trackers:
        try:
            texts[tracker.path] = confinement.read_text(tracker.path, max_bytes=4096).strip()
        except UserError as exc:
            texts[tracker.path] = exc
    # release/ is a checkpoint only where the tracker beside it names it (a dir called "release" is otherwise anything)
    release_dirs = {path.parent / MEGATRON_RELEASE for path, text in texts.items() if text == MEGATRON_RELEASE}
    groups = _group(files, dirs, lambda d: MEGATRON_ITER_DIR.match(d.name) or d in release_dirs)
    out: list[Checkpoint] = []
    for directory, group in groups.items():
        match = MEGATRON_ITER_DIR.match(directory.name)
        ckpt = Checkpoint("megatron", str(directory), step=int(match.group(1)) if match else None)
        if ckpt.path in unchecked:
            out.append(ckpt)  # listed by name: _scan_all marks it
            continue
        _summarise(ckpt, group)
        shards = [f for f in group if f.path.name.endswith((".distcp", ".pt", ".pth"))]
        if not group:
            ckpt.issues.append("empty iteration directory (the save was interrupted)" if match else
                               "empty release directory (the conversion to a Megatron checkpoint did not finish)")
        elif not shards:
            ckpt.issues.append("no *.distcp or mp_rank_*/model_optim_rng.pt files")
        elif any(f.size == 0 for f in shards):
            ckpt.issues.append("empty shard file(s)")
        if any(f.path.name.endswith(".distcp") for f in group) and not any(f.path.name == ".metadata" for f in group):
            ckpt.issues.append("torch_dist shards without .metadata (the save did not finish)")
        out.append(ckpt)
    for tracker in trackers:
        save_dir = tracker.path.parent
        text = texts[tracker.path]
        if isinstance(text, UserError):
            report.issues.append(checkpoint_issue("tracker-unreadable", "error", str(text), str(tracker.path), card_citation("megatron-tracker-file")))
            continue
        iters = sorted(c.step for c in out if Path(c.path).parent == save_dir and c.step is not None)
        if text == MEGATRON_RELEASE:
            report.tracker_release = True
            release = save_dir / MEGATRON_RELEASE
            if not any(Path(c.path) == release for c in out):
                report.issues.append(checkpoint_issue("tracker-missing-release", "error",
                                           f"{TRACKER} says release but {release}/ does not exist (present: "
                                           f"{', '.join(map(str, iters)) or 'none'}); Megatron loads a release "
                                           "checkpoint from release/", str(tracker.path),
                                           card_citation("megatron-tracker-file")))
            if iters:
                report.issues.append(checkpoint_issue("tracker-behind", "warning",
                                           f"iter_{iters[-1]:07d}/ exists but the tracker says release: --load loads "
                                           f"release/ (weights only, from iteration 0); use --ckpt-step {iters[-1]} "
                                           "only after checking that directory", str(tracker.path),
                                           card_citation("megatron-tracker-file")))
            continue
        if not text.isdigit() or len(text) > 9:  # iteration numbers are written as iter_%07d
            report.issues.append(checkpoint_issue("tracker-invalid", "error", f"{tracker.path}: {redact(text)[:40]!r} is not an iteration number; "
                                       "Megatron cannot resume", str(tracker.path), card_citation("megatron-tracker-file")))
            continue
        iteration = int(text)
        report.tracker_iteration = iteration
        if iteration not in iters:
            report.issues.append(checkpoint_issue("tracker-missing-iter", "error",
                                       f"{TRACKER} says iteration {iteration} but iter_{iteration:07d}/ does not exist "
                                       f"(present: {', '.join(map(str, iters)) or 'none'})", str(tracker.path),
                                       card_citation("megatron-tracker-file")))
        newer = [i for i in iters if i > iteration]
        if newer:
            report.issues.append(checkpoint_issue("tracker-behind", "warning",
                                       f"iter_{newer[-1]:07d}/ is newer than the tracker ({iteration}): its save may not "
                                       f"have finished; --load resumes from {iteration} (use --ckpt-step {newer[-1]} only "
                                       "after checking that directory)", str(tracker.path),
                                       card_citation("megatron-tracker-file")))
    iter_parents = {Path(parent) for parent in {os.path.dirname(c.path) for c in out}}
    for parent in iter_parents:
        if not any(t.path.parent == parent for t in trackers):
            report.issues.append(checkpoint_issue("tracker-absent", "error",
                                       f"{parent} has iter_* directories but no {TRACKER}: --load ignores a directory "
                                       "without it (the actor starts again from --ref-load)", str(parent),
                                       card_citation("megatron-tracker-file")))
    return out


def _under_any(directory: str, roots: set[str]) -> bool:
    """``directory`` is one of ``roots`` or lies under one."""
    here = directory
    while True:
        if here in roots:
            return True
        up = os.path.dirname(here)
        if up == here:
            return False
        here = up


def _scan_hf(files: list[FileEntry], dirs: list[Path], confinement: Confinement, claimed: set[str]) -> list[Checkpoint]:
    """Hugging Face save folders not inside a folder another layout ``claimed`` (paths as text)."""
    claimed_text = claimed
    config_dirs = {os.path.dirname(str(f.path)) for f in files if f.path.name == "config.json"}
    config_dirs = {d for d in config_dirs if not _under_any(d, claimed_text)}
    by_parent: dict[str, list[FileEntry]] = defaultdict(list)
    if config_dirs:
        for f in files:
            parent = os.path.dirname(str(f.path))
            if parent in config_dirs:
                by_parent[parent].append(f)
    out = []
    for directory in sorted(map(Path, config_dirs)):
        group = by_parent[str(directory)]
        if not any(WEIGHT_FILE.search(f.path.name) for f in group) and not any(f.path.name.endswith(".index.json") for f in group):
            continue
        m = HF_STEP_DIR.search(directory.name)
        ckpt = Checkpoint("hf", str(directory), step=int(m.group(1)) if m else None)
        _summarise(ckpt, group)
        ckpt.issues += _weights_issue(group, directory, confinement)
        out.append(ckpt)
    return out


# --------------------------------------------------------------------------- recovery plans


def recovery_plan(report: CheckpointReport, *, config: Any = None) -> RecoveryPlan:
    """How to resume: AReaL recover.mode=auto (or a restart from weights), slime --load/--ckpt-step, or HF weights."""
    if report.layout == "areal":
        plan = _areal_plan(report, config)
    elif report.layout == "slime":
        plan = _slime_plan(report, config)
    elif report.layout == "hf":
        ckpt = report.latest()
        plan = RecoveryPlan("hf", "from-weights" if ckpt else "none", ckpt,
                            notes=["these are weights only: point the policy path (AReaL actor.path, slime --hf-checkpoint) "
                                   "at the directory; optimizer state and data position start fresh"] if ckpt else
                            ["no intact checkpoint to resume from"],
                            config_lines=[f"actor.path={ckpt.path}"] if ckpt else [],
                            citations=[card_citation("no-checkpoints-found")])
    else:
        plan = RecoveryPlan("unknown", "none", None, notes=["no checkpoints found: nothing to resume from"],
                            citations=[card_citation("no-checkpoints-found")])
    report.plan = plan
    return plan


def _areal_plan(report: CheckpointReport, config: Any) -> RecoveryPlan:
    recovers = [c for c in report.checkpoints if c.kind == "areal_recover"]
    recover = max(recovers, key=lambda c: (c.step if c.step is not None else -1, c.mtime), default=None)
    hf = report.latest(kinds=("areal_hf",))
    cites = [card_citation("spot-interruption"), doc_citation("AReaL docs/en/reference/checkpointing.md", "Recovery Process")]
    exp = (recover or hf).experiment if (recover or hf) else ""
    trial = (recover or hf).trial if (recover or hf) else ""
    config_path = getattr(config, "path", "<your config.yaml>") if config is not None else "<your config.yaml>"
    keep = ["experiment_name and trial_name", "train_dataset.batch_size", "gconfig.n_samples (group size)",
            "cluster.n_nodes and cluster.n_gpus_per_node", "actor.backend (DCP recovery checkpoints need the same parallelism)",
            "cluster.fileroot"]
    if config is not None:
        values = {k: config.get(k) for k in ("train_dataset.batch_size", "gconfig.n_samples", "cluster.n_nodes", "actor.backend")}
        keep = [f"{k} = {v}" for k, v in values.items() if v is not None] + ["experiment_name and trial_name", "cluster.fileroot"]
    differences = _areal_differences(report, config, recover or hf)
    before = report.before_step
    usable_recover = recover if (recover and recover.valid and (before is None or (recover.step is not None and recover.step < before))) else None
    if usable_recover:
        lines = [f"experiment_name={exp}", f"trial_name={trial}", "recover.mode=auto"]
        command = ("python -m areal.launcher.local <your_train_script.py> --config " + shlex.quote(str(config_path)) + " "
                   + " ".join(shlex.quote(x) for x in lines))
        notes = [f"resumes at global step {usable_recover.step + 1} from {usable_recover.path}",
                 "model weights, optimizer state, data position and the step counter are restored"]
        if differences:
            notes.append("recovery will fail or silently start over unless the differences below are undone")
        return RecoveryPlan("areal", "auto-recover", usable_recover, command, lines, keep, differences, notes,
                            cites + [card_citation("recovery-config-changed")])
    notes = []
    if recover and not recover.valid:
        notes.append(f"the recovery checkpoint {recover.path} is damaged ({'; '.join(recover.issues)}); auto-recovery cannot use it")
    elif recover and before is not None and recover.step is not None and recover.step >= before:
        notes.append(f"the recovery checkpoint is at step {recover.step}, not before step {before}: recover.mode=auto would "
                     "resume from the state you want to avoid. Move recover_info/ aside or use a new trial_name")
    elif not recover:
        notes.append("no recover_checkpoint: recovery checkpoints are written only when recover.mode is on/auto and a "
                     "recover.freq_* is set")
    if hf is None:
        return RecoveryPlan("areal", "none", None, notes=notes + ["no intact saved model either: nothing to resume from"],
                            differences=differences, citations=cites + [card_citation("recovery-checkpoint-missing")])
    # AReaL trial names may not contain '-' or '/'
    new_trial = f"{trial}_from_step{hf.step}" if trial else f"resume_step{hf.step}"
    # a new trial has no recover_info, so recover.mode=auto starts fresh and protects the new run
    lines = [f"experiment_name={exp}", f"trial_name={new_trial}", f"actor.path={hf.path}", "recover.mode=auto"]
    base = _ref_follows_actor(config)
    if base:
        # ref.path: ${actor.path} would follow the override to the trained weights: the KL reference must stay the base
        lines.insert(3, f"ref.path={base}")
    command = ("python -m areal.launcher.local <your_train_script.py> --config " + shlex.quote(str(config_path)) + " "
               + " ".join(shlex.quote(x) for x in lines))
    notes += [f"restart from the saved weights of global step {hf.step} ({hf.path}) as a new trial; optimizer state, data "
              "position and step counter start fresh (Hugging Face saves hold weights only)",
              f"ref.path is pinned to the base model {base}: the config derives it from actor.path" if base else
              "keep ref.path on the original base model if you use a KL penalty"]
    return RecoveryPlan("areal", "from-weights", hf, command, lines, [], differences, notes,
                        cites + [card_citation("recovery-checkpoint-missing")])


def _ref_follows_actor(config: Any) -> str:
    """The base model's path when the config's ``ref.path`` is derived from ``actor.path`` (``${actor.path}``), else ""."""
    if config is None:
        return ""
    raw = config.get("ref.path", resolve=False)
    base = config.get("actor.path")
    if not isinstance(raw, str) or "${actor.path}" not in raw.replace(" ", "") or not isinstance(base, str) or not base:
        return ""
    return str(config.get("ref.path"))


def _areal_differences(report: CheckpointReport, config: Any, ckpt: Checkpoint | None) -> list[str]:
    if config is None or ckpt is None:
        return []
    out = []
    for key, found in (("experiment_name", ckpt.experiment), ("trial_name", ckpt.trial)):
        value = config.get(key)
        if found and value is not None and str(value) != found:
            out.append(f"{key}: config has {value!r}, the checkpoints belong to {found!r}")
    root = config.get("cluster.fileroot")
    if isinstance(root, str) and root and "${" not in root and not report.root.startswith(os.path.abspath(root)):
        out.append(f"cluster.fileroot: config has {root!r}, the checkpoints are under {report.root}")
    if ckpt.kind == "areal_recover" and ckpt.ranks:
        from rlmedic.tools.config.areal import parse_allocation_mode, parse_backend

        spec = None
        backend = config.get("actor.backend")
        try:
            spec = parse_backend(backend) if isinstance(backend, str) and backend else None
            if spec is None and isinstance(config.get("allocation_mode"), str):
                spec = parse_allocation_mode(config.get("allocation_mode"))[1]
        except ValueError:
            spec = None
        if spec is not None and spec.world != ckpt.ranks:
            out.append(f"actor parallelism: the recovery checkpoint was written by {ckpt.ranks} rank(s), the config "
                       f"trains on {spec.world} ({spec.raw}); DCP recovery needs the same layout")
    return out


def _slime_plan(report: CheckpointReport, config: Any) -> RecoveryPlan:
    cites = [card_citation("resume-slime"), doc_citation("slime docs/en/get_started/qa.md", "How do I resume training?"),
             doc_citation("slime docs/en/get_started/usage.md", "Loading Megatron Checkpoints")]
    pool = [c for c in report.selected() if c.kind == "megatron" and c.valid]
    keep = ["--save (keep it equal to --load)", "--tensor-model-parallel-size / --pipeline-model-parallel-size when the "
            "checkpoint uses the torch format (mp_rank_* directories); torch_dist reshards"]
    release = next((c for c in pool if _is_release(c)), None) if report.tracker_release else None
    if release is not None:
        # the tracker says release: --load reads {save}/release/, weights only, from iteration 0
        save_dir = str(Path(release.path).parent)
        args = ["--load", save_dir]
        notes = [f"{TRACKER} says release: --load {save_dir} loads {release.path} (converted or released weights, "
                 "no iteration number)",
                 "Megatron starts a release checkpoint at iteration 0 and restores the weights only: optimizer "
                 "state and RNG start fresh"]
        newer = sorted(c.step for c in pool if c.step is not None and str(Path(c.path).parent) == save_dir)
        if newer:
            notes.append(f"iter_{newer[-1]:07d}/ also exists: --ckpt-step {newer[-1]} resumes that iteration instead "
                         "(the tracker does not name it; check it first)")
        return RecoveryPlan("slime", "megatron-load", release, command=" ".join(shlex.quote(a) for a in args),
                            config_lines=args, keep_unchanged=keep, differences=_slime_differences(config, save_dir),
                            notes=notes, citations=cites)
    pool = [c for c in pool if c.step is not None]
    tracked = [c for c in pool if c.step == report.tracker_iteration]
    ckpt = tracked[0] if tracked else max(pool, key=lambda c: c.step or 0, default=None)
    if ckpt is None:
        note = "no intact iter_* checkpoint to resume from"
        if report.tracker_release:
            note = f"no intact checkpoint to resume from: release/, named by {TRACKER}, is missing or damaged"
        return RecoveryPlan("slime", "none", None, notes=[note], citations=cites + [card_citation("megatron-tracker-file")])
    save_dir = str(Path(ckpt.path).parent)
    args = ["--load", save_dir]
    notes = [f"resumes from iteration {ckpt.step} in {save_dir}"]
    if report.tracker_iteration is None or ckpt.step != report.tracker_iteration or report.before_step is not None:
        args += ["--ckpt-step", str(ckpt.step)]
        notes.append(f"--ckpt-step {ckpt.step} selects that iteration instead of the one in {TRACKER}")
    return RecoveryPlan("slime", "megatron-load", ckpt, command=" ".join(shlex.quote(a) for a in args), config_lines=args,
                        keep_unchanged=keep, differences=_slime_differences(config, save_dir), notes=notes, citations=cites)


def _slime_differences(config: Any, save_dir: str) -> list[str]:
    differences: list[str] = []
    if config is not None:
        save = config.get("--save")
        load = config.get("--load")
        if save and save.rstrip("/") != save_dir.rstrip("/"):
            differences.append(f"--save is {save}, the checkpoints are in {save_dir}")
        if load and load.rstrip("/") != save_dir.rstrip("/"):
            differences.append(f"--load is {load}: it must point at {save_dir}")
    return differences


def by_experiment(report: CheckpointReport) -> dict[str, dict[str, list[Checkpoint]]]:
    out: dict[str, dict[str, list[Checkpoint]]] = defaultdict(lambda: defaultdict(list))
    for c in report.selected():
        out[c.experiment][c.trial].append(c)
    return out
