"""Ingestion: chunks keep source/heading/lines; re-index is incremental; bad input is refused clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlmedic.errors import UserError
from rlmedic.knowledge.chunking import chunk_document, faq_items_to_headings, rst_to_markdown_headings
from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.ui.cli import app

DOC_A = """# Rollout guide

Intro line.

## Memory

Lower `mem_fraction_static` when the rollout server runs out of memory.

## Networking

Set NCCL_SOCKET_IFNAME for multi-node jobs.
"""

DOC_RST = """Checkpoints
===========

Saving
------

Use the saver frequency to control how often checkpoints are written.
"""


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text(DOC_A)
    (root / "b.rst").write_text(DOC_RST)
    (root / "c.txt").write_text("# Plain\n\nGradient clipping keeps the grad norm bounded when loss spikes.\n")
    return root


def test_chunks_keep_heading_path_and_line_range() -> None:
    chunks = chunk_document(DOC_A, "docs/a.md", "/x/a.md")
    by_section = {c.section: c for c in chunks}
    memory = by_section["Rollout guide > Memory"]
    lines = DOC_A.split("\n")
    # the one-line intro under the title is too small to stand alone: it joins "Memory"
    assert "Rollout guide" not in by_section
    assert lines[memory.line_start - 1] == "# Rollout guide"
    assert "## Memory" in lines[memory.line_start - 1 : memory.line_end]
    assert "mem_fraction_static" in lines[memory.line_end - 1]
    networking = by_section["Rollout guide > Networking"]
    assert lines[networking.line_start - 1] == "## Networking"
    assert memory.source == "docs/a.md" and memory.path == "/x/a.md"
    assert "Rollout guide > Networking" in by_section


def test_rst_and_faq_become_sections_without_moving_lines() -> None:
    converted = rst_to_markdown_headings(DOC_RST)
    assert converted.count("\n") == DOC_RST.count("\n")
    assert converted.splitlines()[0] == "# Checkpoints" and "## Saving" in converted
    faq = "# FAQ\n\n1.  **Why is my job stuck?**\n\n    Check the GPUs.\n"
    assert faq_items_to_headings(faq).splitlines()[2] == "## Why is my job stuck?"


def test_long_sections_are_split_and_keep_their_heading() -> None:
    body = "\n\n".join(f"Paragraph {i} about weight sync timeouts and NCCL buffers." * 3 for i in range(80))
    chunks = chunk_document(f"# Big\n\n## Sync\n\n{body}\n", "big.md")
    assert len(chunks) > 3
    assert all(c.section == "Big > Sync" for c in chunks)
    assert all(c.text.startswith("Big > Sync") or c.text.startswith("## Sync") for c in chunks)
    assert chunks[-1].line_end >= chunks[0].line_end


def test_index_then_search_and_incremental_reindex(docs: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    first = kb.index([docs])
    assert len(first.added) == 3 and first.chunks_embedded >= 4
    top = kb.search("rollout server out of memory", k=1)[0]
    assert top.source == "docs/a.md" and top.section == "Rollout guide > Memory"
    assert "lines" in str(top.citation)

    again = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert again.chunks_embedded == 0 and len(again.unchanged) == 3 and not again.added

    (docs / "a.md").write_text(DOC_A.replace("NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE"))
    (docs / "c.txt").unlink()
    kb2 = KnowledgeBase(tmp_path / "idx", with_cards=False)
    changed = kb2.index([docs])
    assert [Path(p).name for p in changed.updated] == ["a.md"]
    assert [Path(p).name for p in changed.removed] == ["c.txt"]
    sources = {r.source for r in kb2.search("gradient clipping grad norm", k=10)}
    assert "docs/c.txt" not in sources
    assert any("NCCL_IB_DISABLE" in r.text for r in kb2.search("NCCL_IB_DISABLE", k=3))
    # only the edited section was embedded again; the unchanged one kept its vector
    assert changed.chunks_embedded == 1


def test_an_edited_document_keeps_the_vectors_of_its_unchanged_chunks(docs: Path, tmp_path: Path) -> None:
    """Re-indexing embeds only chunks whose text changed, and the result equals a fresh index of the new text."""
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    kb.index([docs])
    (docs / "a.md").write_text(DOC_A.replace("multi-node jobs", "multi-node jobs on InfiniBand"))
    changed = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert changed.chunks_embedded == 1 and [Path(p).name for p in changed.updated] == ["a.md"]
    fresh = KnowledgeBase(tmp_path / "fresh", with_cards=False)
    fresh.index([docs])
    ids = fresh.store.manifest.files[str(docs / "a.md")].chunks
    reused = KnowledgeBase(tmp_path / "idx", with_cards=False).store.texts_and_vectors(ids)
    direct = fresh.store.texts_and_vectors(ids)
    assert set(reused) == set(direct) == set(ids)
    for cid in ids:
        assert reused[cid][0] == direct[cid][0]
        assert sum(x * y for x, y in zip(reused[cid][1], direct[cid][1])) > 1 - 1e-5


def _age(folder: Path, seconds: int = 3600, only: str = "") -> None:
    """Give the files (or ``only`` that one) a modification time well in the past, as files have between two runs."""
    import time

    when = time.time() - seconds
    for f in folder.iterdir():
        if not only or f.name == only:
            os.utime(f, (when, when))


def _reads(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[str]:
    """Names of the files of ``folder`` read through the confinement from now on."""
    from rlmedic.confine import Confinement

    seen: list[str] = []
    real = Confinement.read_bytes

    def spy(self, path, *args, **kwargs):
        if Path(path).parent == folder:
            seen.append(Path(path).name)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(Confinement, "read_bytes", spy)
    return seen


def test_a_reindex_trusts_size_and_time_recorded_when_a_file_was_hashed(docs: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Unchanged files are not read again; a change of content with the same size is still seen (its time
    moved); a touched file is read once, found unchanged, and trusted after that."""
    _age(docs)
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    reads = _reads(monkeypatch, docs)
    again = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert reads == [] and len(again.unchanged) == 3 and again.chunks_embedded == 0

    text = (docs / "c.txt").read_text()
    (docs / "c.txt").write_text(text.replace("bounded", "BOUNDED"))  # same size, new content
    _age(docs, 60, only="c.txt")
    changed = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert reads == ["c.txt"] and [Path(p).name for p in changed.updated] == ["c.txt"]

    reads.clear()
    _age(docs, 30)  # touched: new times, same content
    touched = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert sorted(reads) == ["a.md", "b.rst", "c.txt"] and len(touched.unchanged) == 3 and touched.chunks_embedded == 0
    reads.clear()
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert reads == []


def test_a_file_written_just_before_it_was_hashed_is_read_again(docs: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A write in the same clock tick as the hash would keep size and time: such a file is never trusted by them."""
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])  # the files were written a moment ago
    reads = _reads(monkeypatch, docs)
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert sorted(reads) == ["a.md", "b.rst", "c.txt"]


def test_a_hand_edited_stat_record_only_makes_the_file_read(docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _age(docs)
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    manifest = tmp_path / "idx" / "manifest.json"
    data = json.loads(manifest.read_text())
    for entry in data["files"].values():
        entry["stat"] = "not a list"
    manifest.write_text(json.dumps(data))
    reads = _reads(monkeypatch, docs)
    again = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert sorted(reads) == ["a.md", "b.rst", "c.txt"] and again.chunks_embedded == 0


def test_bad_inputs_give_clear_errors(tmp_path: Path) -> None:
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    with pytest.raises(UserError, match="no such file"):
        kb.index([tmp_path / "missing"])
    binary = tmp_path / "model.txt"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(UserError, match="binary"):
        kb.index([binary])
    empty = tmp_path / "empty.md"
    empty.write_text("")
    with pytest.raises(UserError, match="empty"):
        kb.index([empty])
    big = tmp_path / "huge.md"
    with open(big, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    with pytest.raises(UserError, match="over the .* limit"):
        kb.index([big])


def test_bad_files_inside_a_folder_are_skipped_not_fatal(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nReward stays at zero when the reward function never matches.\n")
    (folder / "blob.txt").write_bytes(b"\x00" * 64)
    (folder / "empty.md").write_text("   \n")
    (folder / "latin.txt").write_bytes("# Caf\xe9\n\nThe r\xe9sum\xe9 of a run.\n".encode("latin-1"))
    report = KnowledgeBase(tmp_path / "idx", with_cards=False).index([folder])
    assert sorted(Path(p).name for p in report.added) == ["good.md", "latin.txt"]
    assert any("binary" in s for s in report.skipped) and any("empty" in s for s in report.skipped)
    assert any("not valid UTF-8" in w for w in report.warnings)


def test_search_on_an_empty_index_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="empty"):
        KnowledgeBase(tmp_path / "idx", with_cards=False).search("anything")


def test_cli_user_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["index", str(tmp_path / "nope"), "--index-dir", str(tmp_path / "i")])
    assert result.exit_code == 2
    assert result.output.strip().startswith("rlmedic: error:") and "no such file" in result.output
    assert "Traceback" not in result.output
    blob = tmp_path / "x.md"
    blob.write_bytes(b"\x00abc")
    result = runner.invoke(app, ["index", str(blob), "--index-dir", str(tmp_path / "i")])
    assert result.exit_code == 2 and "binary" in result.output


@pytest.mark.slow
def test_index_persists_across_processes(docs: Path, tmp_path: Path) -> None:
    env = {**os.environ, "RLMEDIC_HOME": str(tmp_path / "home")}
    exe = [sys.executable, "-m", "rlmedic"]
    done = subprocess.run([*exe, "index", str(docs), "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["added"]) == 3
    found = subprocess.run(
        [*exe, "search", "NCCL_SOCKET_IFNAME multi-node", "--kind", "doc", "--json"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert found.returncode == 0, found.stderr
    results = json.loads(found.stdout)["results"]
    assert results[0]["source"] == "docs/a.md"
    assert set(results[0]) >= {"source", "section", "score", "text", "citation"}
    cite = results[0]["citation"]
    assert cite["kind"] == "doc" and cite["ref"] == "docs/a.md" and cite["lines"] == results[0]["lines"]
    assert cite["text"] == f"docs/a.md § {cite['section']} (lines {cite['lines'][0]}-{cite['lines'][1]})"
    assert (tmp_path / "home" / "index" / "manifest.json").exists()


def test_symlinks_out_of_the_folder_are_refused_and_secrets_never_stored(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.md").write_text("# Private\n\nnot for the index: the ops runbook\n")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "escape.md").symlink_to(outside / "private.md")
    (folder / "setup.md").write_text(
        "# Setup\n\nLog in to W&B before launching the GRPO job.\n\n"
        "export WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567\n"
        "export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\n"
    )
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    report = kb.index([folder])
    assert [Path(p).name for p in report.added] == ["setup.md"]
    assert any("escape.md" in s and "outside the allowed roots" in s for s in report.skipped)
    text = kb.search("W&B login before launching", k=1)[0].text
    assert "0123456789abcdef" not in text and "hf_abcdefghij" not in text
    assert "[REDACTED]" in text


def test_bold_list_items_with_inner_bold_are_not_headings() -> None:
    text = "# Breaker\n\n1. **Stops training** if reward is zero for **10 consecutive steps**\n2. **Why is it slow?**\n"
    lines = faq_items_to_headings(text).splitlines()
    assert lines[2].startswith("1. **Stops training**")
    assert lines[3] == "## Why is it slow?"


def test_chained_tiny_intros_join_the_first_real_section() -> None:
    doc = "# Guide\n\n## Recovery\n\nOne line of intro.\n\n### Failure causes\n\n" + "Changed batch size breaks recovery. " * 12 + "\n"
    chunks = chunk_document(doc, "g.md")
    assert [c.section for c in chunks] == ["Guide > Recovery > Failure causes"]
    assert chunks[0].line_start == 3  # "## Recovery": the bare title above it carries no text


def test_an_index_built_with_other_settings_is_rebuilt_not_mixed(docs: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    kb.index([docs])
    kb.store.manifest.embedder = "chunks-v1/some-older-setup"
    kb.store.save_manifest()
    again = KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    assert len(again.updated) == 3 and again.chunks_embedded > 0
    assert any("re-embedding everything" in w for w in again.warnings)
    assert KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs]).chunks_embedded == 0


def test_a_document_with_one_huge_repeating_line_gets_unique_chunk_ids(tmp_path: Path) -> None:
    """One 20,000-character line splits into identical pieces on the same line: their ids still
    differ (Chroma refused the batch with DuplicateIDError), and the folder's other documents
    are indexed with it."""
    line = "word " * 4000
    chunks = chunk_document(f"# Long\n\n{line}\n", "long.md")
    assert len(chunks) > 3 and len({c.text for c in chunks}) < len(chunks)  # the pieces do repeat
    assert len({c.id for c in chunks}) == len(chunks)
    assert [c.id for c in chunk_document(f"# Long\n\n{line}\n", "long.md")] == [c.id for c in chunks]  # stable
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "long.md").write_text(f"# Long\n\n{'x' * 20000}\n")
    (folder / "other.md").write_text("# Other\n\nThe rollout server ran out of memory; lower mem_fraction_static.\n")
    report = KnowledgeBase(tmp_path / "idx", with_cards=False).index([folder])
    assert sorted(Path(p).name for p in report.added) == ["long.md", "other.md"] and not report.skipped
