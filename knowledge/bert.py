"""A minimal BERT encoder (inference only) for the shipped sentence-embedding model.

Why not ``transformers``? Importing it (with the torch.distributed/dynamo modules it
pulls in) takes ~6 s on a 2-core machine, and every ``ask`` and ``search`` would pay
that. This module needs only ``torch``, ``safetensors`` and ``tokenizers`` and computes
the same forward pass; ``tests/test_embeddings.py`` checks the resulting sentence
vectors against sentence-transformers' for the same model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch.nn import functional as F


class BertEncoder:
    """Post-LayerNorm BERT: embeddings, N x (self-attention, feed-forward)."""

    def __init__(self, model_dir: str | Path) -> None:
        from safetensors.torch import load_file

        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{model_dir}: not a plain BERT model")
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.w = load_file(str(model_dir / "model.safetensors"))
        self.hidden = self.w["embeddings.word_embeddings.weight"].shape[1]

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last hidden states, shape (batch, tokens, hidden)."""
        w = self.w
        batch, length = input_ids.shape
        positions = torch.arange(length).unsqueeze(0)
        x = (
            w["embeddings.word_embeddings.weight"][input_ids]
            + w["embeddings.position_embeddings.weight"][positions]
            + w["embeddings.token_type_embeddings.weight"][torch.zeros_like(input_ids)]
        )
        x = self._ln(x, "embeddings.LayerNorm")
        # additive float mask (0 keep, -inf-ish pad): CPU SDPA has fused kernels for it
        bias = torch.zeros(attention_mask.shape, dtype=x.dtype)
        bias = bias.masked_fill(attention_mask == 0, torch.finfo(x.dtype).min)[:, None, None, :]
        head_dim = self.hidden // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: torch.Tensor) -> torch.Tensor:
                return t.view(batch, length, self.heads, head_dim).transpose(1, 2)

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0 / math.sqrt(head_dim))
            attn = attn.transpose(1, 2).reshape(batch, length, self.hidden)
            x = self._ln(x + self._linear(attn, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            ff = F.gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._ln(x + self._linear(ff, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        return x
