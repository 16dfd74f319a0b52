"""Encoder layers and the encoder stack, for either attention kind.

- :class:`EncoderLayer`: iTransformer's post-norm EncoderLayer (protocol.md §2.1 step 3), or with
  ``norm_first=True`` PyTorch's ``TransformerEncoderLayer(norm_first=True)`` as Gateformer's two
  encoders use it (protocol.md §3.1), rebuilt so that its attention can be DAMCHA.
- :class:`Encoder`: a stack of layers. With a shared DAMCHA generator it computes the head metrics once,
  from the stack input, and hands them to every layer (damcha.md §3.1, §9).

Every layer's call: ``layer(x [B, T, D], key_padding_mask, is_causal, head_metrics, need_weights)
-> (x [B, T, D], AttentionRecord | None)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from damcha_ts.errors import ConfigError
from damcha_ts.models.attention import build_attention, build_metric_generator
from damcha_ts.models.attention_config import AttentionConfig, AttentionRecord

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}


def _activation(name: str):
    if name not in ACTIVATIONS:
        raise ConfigError(f"activation={name!r}; expected one of {tuple(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class EncoderLayer(nn.Module):
    """One encoder layer: attention and a feed-forward block, each in a residual branch.

    Post-norm (``norm_first=False``), iTransformer's EncoderLayer (protocol.md §2.1 step 3):
        x <- norm1(x + dropout(attention(x)));  out = norm2(x + FF(x)).
    Pre-norm (``norm_first=True``), ``nn.TransformerEncoderLayer(norm_first=True)`` as Gateformer's two
    encoders use it (protocol.md §3.1), rebuilt so that its attention can be DAMCHA:
        x <- x + dropout(attention(norm1(x)));  out = x + FF(norm2(x)).
    There the attention input -- and so DAMCHA's X_i and its own-generator context -- is norm1(x).
    FF(x) = dropout(W2 dropout(act(W1 x))). iTransformer writes W1, W2 as Conv1d with kernel size 1 over
    the token axis: a Linear on each token, with the same parameters (d_ff*D + d_ff, D*d_ff + D).
    Dropout has no state, so one module serves the three places torch's layer gives a module each.
    """

    # Parameter names of nn.TransformerEncoderLayer, which earlier pre-norm checkpoints used.
    TORCH_NAMES = {"linear1.": "feed_forward_in.", "linear2.": "feed_forward_out."}

    def __init__(
        self, attention: nn.Module, d_model: int, d_ff: int, dropout: float, activation: str,
        norm_first: bool = False,
    ):
        super().__init__()
        self.attention = attention
        self.feed_forward_in = nn.Linear(d_model, d_ff)
        self.feed_forward_out = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.norm_first = norm_first

    def feed_forward(self, x: Tensor) -> Tensor:
        """[B, T, D] -> [B, T, D], token-wise."""
        return self.dropout(self.feed_forward_out(self.dropout(self.activation(self.feed_forward_in(x)))))

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False,
                head_metrics: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, AttentionRecord | None]:
        """x [B, T, D] -> (x [B, T, D], the attention's record, or None unless ``need_weights``)."""
        if self.norm_first:
            attended, record = self.attention(self.norm1(x), key_padding_mask, is_causal, head_metrics, need_weights)
            x = x + self.dropout(attended)
            return x + self.feed_forward(self.norm2(x)), record
        attended, record = self.attention(x, key_padding_mask, is_causal, head_metrics, need_weights)
        x = self.norm1(x + self.dropout(attended))
        return self.norm2(x + self.feed_forward(x)), record

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for key in [k for k in state_dict if k.startswith(prefix)]:
            for old, new in self.TORCH_NAMES.items():
                if key.startswith(prefix + old):
                    state_dict[prefix + new + key[len(prefix + old):]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class Encoder(nn.Module):
    """A stack of encoder layers with an optional final norm.

    ``shared_metric_generator`` (DAMCHA with share_generator=True) runs once per forward, on the stack
    input, and its head metrics are reused by every layer; each layer still applies them to its own
    attention input and has its own W_v and W_o (damcha.md §3.1).
    """

    def __init__(
        self,
        layers: list[nn.Module],
        final_norm: nn.Module | None = None,
        shared_metric_generator: nn.Module | None = None,
    ):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.shared_metric_generator = shared_metric_generator

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False,
                need_weights: bool = False) -> tuple[Tensor, list[AttentionRecord]]:
        """x [B, T, D] -> (x [B, T, D], one AttentionRecord per layer if ``need_weights`` else [])."""
        head_metrics = None
        generator = self.shared_metric_generator
        if generator is not None:
            full_metric = None
            if need_weights:  # M from the same generator pass as the metrics used (one dropout draw)
                head_metrics, full_metric = generator.with_full_metric(x, key_padding_mask, is_causal)
                full_metric = full_metric.detach() if full_metric is not None else None
            else:
                head_metrics = generator(x, key_padding_mask, is_causal)
        records = []
        for layer in self.layers:
            x, record = layer(x, key_padding_mask, is_causal, head_metrics, need_weights)
            if record is not None:
                if generator is not None:
                    record.full_metric = full_metric
                records.append(record)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, records


def build_encoder(
    make_layer: Callable[[nn.Module], nn.Module],
    n_layers: int,
    d_model: int,
    attention: AttentionConfig,
    final_norm: nn.Module | None = None,
) -> Encoder:
    """``n_layers`` layers ``make_layer(attention_module)``, sharing one metric generator if asked."""
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ConfigError(f"e_layers={n_layers!r}; expected a positive integer")
    shared = attention.kind == "damcha" and attention.share_generator
    # The shared generator is created first, so construction order (and the RNG stream) is fixed.
    generator = build_metric_generator(d_model, attention) if shared else None
    layers = [
        make_layer(build_attention(d_model, attention, own_generator=not shared)) for _ in range(n_layers)
    ]
    return Encoder(layers, final_norm, generator)
