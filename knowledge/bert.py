"""A minimal BERT encoder (inference only) for the shipped sentence-embedding model.

Why not ``transformers``? Importing it (with the torch.distributed/dynamo modules it
pulls in) takes ~6 s on a 2-core machine, and every ``ask`` and ``search`` would pay
that. Two forwards of the same network live here:

- :class:`NumpyBertEncoder`: numpy only, weights memory-mapped from the safetensors
  file. A single query (``ask``, ``search``) uses it: importing torch alone costs ~2 s
  of CPU, far more than the forward of one sentence.
- :class:`BertEncoder`: torch, for bulk indexing, where its fused kernels win.

``tests/test_embeddings.py`` checks both against sentence-transformers' vectors and
against each other.
"""

from __future__ import annotations

import json
import math
import mmap
from pathlib import Path
from typing import Any


def _read_config(model_dir: Path) -> dict[str, Any]:
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{model_dir}: not a plain BERT model")
    return config


# -- numpy ---------------------------------------------------------------------------------

_NP_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def load_numpy_weights(path: str | Path) -> dict[str, Any]:
    """Tensors of a safetensors file as read-only numpy views of one memory map.

    The format is an 8-byte little-endian header length, a JSON header (name -> dtype,
    shape, byte offsets) and the raw data. Mapping instead of reading means a query
    touches only the embedding rows of its own tokens (the 47 MB word table stays on disk).
    """
    import numpy as np

    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    size = int.from_bytes(mapped[:8], "little")
    header = json.loads(mapped[8 : 8 + size])
    base = 8 + size
    out: dict[str, Any] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _NP_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, not one this reader knows")
        start, end = info["data_offsets"]
        arr = np.frombuffer(mapped, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize, offset=base + start)
        arr = arr.reshape(info["shape"])
        out[name] = arr.astype(np.float32, copy=False) if arr.dtype.kind == "f" else arr
    return out


#: Abramowitz & Stegun 7.1.26: erf(a) = 1 - t*(c1 + t*(c2 + ...)) * exp(-a*a), t = 1 / (1 + p*a),
#: |error| < 1.5e-7. BERT's GELU is the exact (erf) one; numpy has no erf and scipy costs a 0.3 s import.
_ERF_P = 0.3275911
_ERF_C = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


def _gelu_(h):
    """Exact GELU, 0.5*h*(1 + erf(h/sqrt(2))), computed in place on the float32 array ``h`` (returned).

    In place and in float32: the expression form allocated a dozen temporaries the size of
    the feed-forward activations and took a quarter of a bulk forward.
    """
    import numpy as np

    a = np.abs(h)
    a *= np.float32(1.0 / math.sqrt(2.0))
    t = a * np.float32(_ERF_P)
    t += 1
    np.reciprocal(t, out=t)
    y = t * np.float32(_ERF_C[0])
    for c in _ERF_C[1:]:
        y += np.float32(c)
        y *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    y *= a  # y = 1 - erf(|x|)
    np.subtract(1, y, out=y)  # erf(|x|)
    y *= np.sign(h, out=a)  # erf(x) (a masked subtract was 10x slower than these two passes)
    y += 1
    h *= y
    h *= 0.5
    return h


class NumpyBertEncoder:
    """Post-LayerNorm BERT in numpy: embeddings, N x (self-attention, feed-forward)."""

    def __init__(self, model_dir: str | Path) -> None:
        model_dir = Path(model_dir)
        config = _read_config(model_dir)
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.w = load_numpy_weights(model_dir / "model.safetensors")
        self.hidden = self.w["embeddings.word_embeddings.weight"].shape[1]

    def _ln(self, x, name: str):
        import numpy as np

        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=-1, keepdims=True)
        return centered / np.sqrt(var + self.eps) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def _linear(self, x, name: str):
        """``x @ W.T + b`` as one 2-D matrix product (a 3-D operand made numpy run one per sequence: 1.75x slower)."""
        out = x.reshape(-1, x.shape[-1]) @ self.w[f"{name}.weight"].T
        out += self.w[f"{name}.bias"]
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def __call__(self, input_ids, attention_mask):
        """Last hidden states, shape (batch, tokens, hidden), float32."""
        import numpy as np

        w = self.w
        input_ids = np.asarray(input_ids, dtype=np.int64)
        batch, length = input_ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][input_ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._ln(x, "embeddings.LayerNorm")
        mask = np.asarray(attention_mask)
        bias = np.where(mask == 0, np.finfo(np.float32).min, 0.0).astype(np.float32)[:, None, None, :]
        head_dim = self.hidden // self.heads
        scale = np.float32(1.0 / math.sqrt(head_dim))
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t):
                return t.reshape(batch, length, self.heads, head_dim).transpose(0, 2, 1, 3)

            q = split(self._linear(x, f"{p}.attention.self.query"))
            k = split(self._linear(x, f"{p}.attention.self.key"))
            v = split(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            attn = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.hidden)
            x = self._ln(x + self._linear(attn, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            ff = _gelu_(self._linear(x, f"{p}.intermediate.dense"))
            x = self._ln(x + self._linear(ff, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        return x


# -- torch ---------------------------------------------------------------------------------


class BertEncoder:
    """Post-LayerNorm BERT in torch (bulk indexing): embeddings, N x (self-attention, feed-forward)."""

    def __init__(self, model_dir: str | Path, dtype: Any = None) -> None:
        """``dtype``: the weights' and activations' type (default: the file's, float32)."""
        from safetensors.torch import load_file

        model_dir = Path(model_dir)
        config = _read_config(model_dir)
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.w = load_file(str(model_dir / "model.safetensors"))
        if dtype is not None:
            self.w = {name: t.to(dtype) for name, t in self.w.items()}
        self.hidden = self.w["embeddings.word_embeddings.weight"].shape[1]

    def _ln(self, x, name: str):
        from torch.nn import functional as F

        return F.layer_norm(x, (self.hidden,), self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _linear(self, x, name: str):
        from torch.nn import functional as F

        return F.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def __call__(self, input_ids, attention_mask):
        """Last hidden states, shape (batch, tokens, hidden)."""
        import torch
        from torch.nn import functional as F

        with torch.inference_mode():
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

                def split(t):
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
