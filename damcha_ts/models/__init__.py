"""Models: DAMCHA / MHA attention and the iTransformer and Gateformer forecasters.

Start with ``build_model`` (registry.py), then attention.py (the two attention kinds and the backend
dispatch), metric_generator.py (where DAMCHA's metrics come from), layers.py (encoder layers and stacks).
"""

from damcha_ts.models.attention import (
    DamchaAttention,
    MultiHeadAttention,
    build_attention,
    damcha_attention,
    select_backend,
)
from damcha_ts.models.attention_config import AttentionConfig, AttentionRecord, DamchaOptions
from damcha_ts.models.base import ForecastModel, count_parameters
from damcha_ts.models.gateformer import Gateformer, GateformerConfig
from damcha_ts.models.itransformer import ITransformer, ITransformerConfig
from damcha_ts.models.metric_generator import MetricGenerator, StaticMetric, mean_context
from damcha_ts.models.registry import MODEL_NAMES, VARIANT_NAMES, build_model, make_config

__all__ = [
    "MODEL_NAMES", "VARIANT_NAMES", "AttentionConfig", "AttentionRecord", "DamchaAttention", "DamchaOptions",
    "ForecastModel", "Gateformer", "GateformerConfig", "ITransformer", "ITransformerConfig", "MetricGenerator",
    "MultiHeadAttention", "StaticMetric", "build_attention", "build_model", "count_parameters",
    "damcha_attention", "make_config", "mean_context", "select_backend"
]
