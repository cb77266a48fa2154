"""The data dir is private: 0700 folders, 0600 files, whatever the umask (issue 31)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlmedic import settings
from rlmedic.agent.session import Session, SessionStore


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def open_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_default_data_dir_is_created_private_and_an_old_0755_one_is_tightened(tmp_path, monkeypatch, open_umask) -> None:
    monkeypatch.delenv("RLMEDIC_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    home = settings.data_dir()
    assert home == tmp_path / "share" / "rlmedic" and mode(home) == 0o700
    assert mode(tmp_path / "share") == 0o755  # above the data dir: not ours to change
    os.chmod(home, 0o755)  # what an older version left
    settings._PRIVATE.clear()
    assert mode(settings.data_dir()) == 0o700


def test_rlmedic_home_is_created_private_but_an_existing_one_keeps_its_mode(tmp_path, monkeypatch, open_umask) -> None:
    monkeypatch.setenv("RLMEDIC_HOME", str(tmp_path / "new" / "home"))
    assert mode(settings.data_dir()) == 0o700
    chosen = tmp_path / "chosen"
    chosen.mkdir(mode=0o755)
    monkeypatch.setenv("RLMEDIC_HOME", str(chosen))
    assert settings.data_dir() == chosen and mode(chosen) == 0o755


def test_sessions_and_their_files_are_private_even_in_an_old_0755_sessions_folder(tmp_path, monkeypatch, open_umask) -> None:
    monkeypatch.setenv("RLMEDIC_HOME", str(tmp_path / "home"))
    old = settings.data_dir() / "sessions"
    old.mkdir(mode=0o755)
    os.chmod(old, 0o755)
    session = Session("team:1", offline=True)
    session.save()
    folder = session.store.folder("team:1")
    assert mode(old) == 0o700 and mode(folder) == 0o700
    assert mode(folder / "session.json") == 0o600
    assert mode(session.files_dir()) == 0o700
    store = SessionStore(tmp_path / "elsewhere" / "deep" / "sessions")
    store.save("x", {"thread_id": "x"})
    assert mode(store.root) == 0o700 and mode(store.folder("x") / "session.json") == 0o600


def test_private_file_is_0600_whatever_the_umask(tmp_path, open_umask) -> None:
    path = tmp_path / "f"
    path.write_text("old")
    os.chmod(path, 0o644)
    with settings.private_file(path, "w") as handle:
        handle.write("new")
    assert path.read_text() == "new" and mode(path) == 0o600
    with settings.private_file(tmp_path / "g", "a") as handle:
        handle.write("x")
    assert mode(tmp_path / "g") == 0o600


def test_the_disk_cache_and_the_sync_cache_are_written_0600(tmp_path, monkeypatch, open_umask) -> None:
    monkeypatch.setenv("RLMEDIC_HOME", str(tmp_path / "home"))
    from rlmedic import diskcache
    from rlmedic.knowledge.github import CachedResponse, EtagCache

    assert diskcache.cached("probe", "k1", lambda: b"v", bytes, bytes) == b"v"
    (entry,) = list(diskcache.cache_dir().glob("probe-*.bin"))
    assert mode(entry) == 0o600
    cache = EtagCache(path=settings.data_dir() / "index" / "github-cache.json")
    cache.entries["u"] = CachedResponse(etag='"e"', next=None, body=[])
    cache.save()
    assert mode(cache.path) == 0o600 and EtagCache.load(cache.path).entries["u"].etag == '"e"'
