"""The Session: attachments with their confinement, evidence and history, saved per thread and pruned."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import time
from pathlib import Path

from conftest import FIXTURES
from rlmedic.agent.events import Final
from rlmedic.agent.session import Session, SessionStore, folder_name

OOM_LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"


def answer(session: Session, question: str):
    return [e for e in session.ask(question) if isinstance(e, Final)][-1].answer


def test_a_named_thread_comes_back_with_its_files_evidence_and_history(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    shutil.copy(OOM_LOG, log)
    first = Session("team:1", offline=True, store=store)
    first.attach(log)
    assert answer(first, "why did it die?").category == "oom_training"
    saved = json.loads((store.folder("team:1") / "session.json").read_text())
    assert saved["attachments"] == [str(log.resolve())] and saved["turns"][0]["category"] == "oom_training"
    assert saved["evidence"][0]["subject"] == "logs" and saved["evidence"][0]["findings"][0]["category"] == "oom_training"
    assert (store.folder("team:1").stat().st_mode & 0o777) == 0o700
    assert (store.folder("team:1") / "session.json").stat().st_mode & 0o777 == 0o600

    again = Session("team:1", offline=True, store=store)  # another process, the same thread
    assert again.attachments == [log.resolve()] and len(again.turns) == 1 and again.evidence
    ctx = again.context()
    assert ctx.confinement.allows(log) and not ctx.confinement.allows(tmp_path / "elsewhere.log")
    follow = [e for e in again.ask("and how do I fix it?")]
    assert not [e for e in follow if getattr(e, "kind", "") == "tool_started"]  # the evidence is reused
    assert follow[-1].answer.category == "oom_training"
    # a file that disappeared is no root any more
    log.unlink()
    assert Session("team:1", offline=True, store=store).attachments == []


def test_an_unnamed_session_writes_nothing_and_detach_drops_its_evidence(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    session = Session(offline=True, store=store)
    session.attach(OOM_LOG)
    answer(session, "why?")
    assert not store.root.exists() or not any(store.root.iterdir())
    assert session.evidence
    session.detach(OOM_LOG)
    assert session.evidence == [] and session.attachments == []


def test_old_threads_are_pruned_with_the_models_memory(tmp_path: Path, monkeypatch) -> None:
    home = Path(os.environ["RLMEDIC_HOME"])
    store = SessionStore(tmp_path / "sessions")
    for n in range(5):
        store.save(f"t{n}", {"thread_id": f"t{n}", "turns": []})
    for n in range(5):
        old = time.time() - (40 * 24 * 3600 if n == 0 else 100 - n)
        os.utime(store.folder(f"t{n}"), (old, old))
    from rlmedic.settings import data_dir

    db = data_dir() / "conversations.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE checkpoints (thread_id TEXT)")
        con.execute("CREATE TABLE writes (thread_id TEXT)")
        con.executemany("INSERT INTO checkpoints VALUES (?)", [("t0",), ("t1",), ("t4",)])
    dropped = store.prune(max_threads=3)
    assert sorted(dropped) == ["t0", "t1"]  # older than 30 days, then the oldest beyond 3
    assert sorted(p.name for p in store.root.iterdir()) == sorted(folder_name(f"t{n}") for n in (2, 3, 4))
    with sqlite3.connect(db) as con:
        assert [r[0] for r in con.execute("SELECT thread_id FROM checkpoints")] == ["t4"]
    assert str(home) in str(db)


def test_a_log_that_changed_since_is_read_again(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    log = tmp_path / "train.log"
    log.write_text("[AReaL] 20251122-10:00:00.000 INFO: step 1 done\n")
    session = Session("grow", offline=True, store=store)
    session.attach(log)
    answer(session, "did this run finish ok?")
    reused = [e for e in session.ask("and now?") if getattr(e, "kind", "") == "tool_started"]
    assert reused == []  # nothing changed: the evidence stands
    with log.open("a") as handle:
        handle.write(OOM_LOG.read_text())
    later = time.time() + 5
    os.utime(log, (later, later))
    events = list(session.ask("and now?"))
    assert [e.name for e in events if getattr(e, "kind", "") == "tool_started"] == ["diagnose"]
    assert events[-1].answer.category == "oom_training"


COLLIDING = ["team/a", "team_a", "team a", "team:a", ".", "..", "", "é", "ü", "日本", "É", "e\u0301",
             "x" * 120 + "1", "x" * 120 + "2", "a" * 500, "thread", "-", "._", "a\udcff"]


def test_distinct_thread_ids_never_share_a_folder() -> None:
    names = [folder_name(t) for t in COLLIDING]
    assert len(set(names)) == len(COLLIDING)
    rng = random.Random(31)
    alphabet = "aA0_-./: \\é日\x00\n" + "".join(chr(rng.randrange(0x80, 0x3000)) for _ in range(20))
    seen: dict[str, str] = {}
    for _ in range(3000):
        tid = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 160)))
        name = folder_name(tid)
        assert seen.setdefault(name, tid) == tid, (tid, seen[name])
        assert name not in (".", "..", "") and len(name) <= 73 and "/" not in name and "\x00" not in name
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    assert folder_name("team:1").startswith("team_1-")  # a readable prefix stays


def test_a_colliding_thread_starts_fresh_instead_of_inheriting_another_ones_files(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    log = tmp_path / "train.log"
    shutil.copy(OOM_LOG, log)
    first = Session("team/a", offline=True, store=store)
    first.attach(log)
    answer(first, "why did it die?")
    for other in ("team_a", "team a", "team:a"):
        second = Session(other, offline=True, store=store)
        assert second.attachments == [] and second.evidence == [] and second.turns == []
    assert Session("team/a", offline=True, store=store).attachments == [log.resolve()]
    for tid in COLLIDING:
        store.save(tid, {"thread_id": tid})
    for tid in COLLIDING:
        assert store.load(tid)["thread_id"] == tid
    assert len(list(store.root.iterdir())) == len(COLLIDING)  # "team/a" among them


def test_a_folder_saved_under_the_old_name_is_taken_over_only_by_its_exact_id(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    old = root / "team_a"
    (old / "files").mkdir(parents=True)
    (old / "files" / "stdin.txt").write_text(OOM_LOG.read_text())
    (old / "session.json").write_text(json.dumps({
        "thread_id": "team:a", "roots": [str(old / "files")], "attachments": [str(old / "files" / "stdin.txt")],
        "turns": [{"question": "why?", "category": "oom_training"}]}))
    store = SessionStore(root)
    # a colliding id does not read it (nor move it)
    assert Session("team/a", offline=True, store=store).turns == [] and old.is_dir()
    back = Session("team:a", offline=True, store=store)
    assert [t.category for t in back.turns] == ["oom_training"]
    new = store.folder("team:a", create=False)
    assert not old.exists() and back.attachments == [new / "files" / "stdin.txt"]
    assert back.context().confinement.allows(new / "files" / "stdin.txt")
