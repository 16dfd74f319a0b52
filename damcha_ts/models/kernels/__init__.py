"""Fused attention kernels. Importing this package never imports triton (kernels load lazily)."""

from damcha_ts.models.kernels.triton_damcha import (
    MAX_HEAD_DIM,
    damcha_attention_triton,
    triton_unsupported_reason,
)

__all__ = ["MAX_HEAD_DIM", "damcha_attention_triton", "triton_unsupported_reason"]
