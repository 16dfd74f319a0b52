"""Which DAMCHA attention backend ``attn_backend="auto"`` runs on a GPU: the one measured faster.

``backend_speeds.json`` (package data) holds timings from ``benchmarks/gpu/check_triton.py``: the Triton
kernel's forward + backward time over the SDPA path's, per GPU model, dtype and attention shape. A
call runs Triton only when the rows for its GPU, dtype and token class all say Triton is faster
there; a GPU, dtype or class that nobody has measured runs SDPA, which is never the slow surprise.
Token classes: ``small`` up to 32 tokens (ETT, Weather), ``medium`` up to 256, ``large`` beyond (Traffic).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from damcha_ts.errors import ConfigError

SPEEDS_FILE = Path(__file__).with_name("backend_speeds.json")
_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32"}


@dataclass(frozen=True)
class Measurement:
    device: str
    dtype: str
    tokens: int
    triton_over_sdpa: float


@dataclass(frozen=True)
class SpeedTable:
    small: int  # the largest token count of the "small" class
    medium: int
    measured: tuple[Measurement, ...]

    def token_class(self, tokens: int) -> str:
        return "small" if tokens <= self.small else "medium" if tokens <= self.medium else "large"

    def triton_is_faster(self, device: str, dtype: str, tokens: int) -> bool:
        """True only when every measurement of this GPU, dtype and token class found Triton faster."""
        wanted = self.token_class(tokens)
        ratios = [m.triton_over_sdpa for m in self.measured
                  if m.device == device and m.dtype == dtype and self.token_class(m.tokens) == wanted]
        return bool(ratios) and max(ratios) < 1.0


def parse_speeds(data: dict, source: str) -> SpeedTable:
    """The table from its JSON data, checked (a bad file names itself and the row)."""
    try:
        classes = data["token_classes"]
        rows = [Measurement(str(r["device"]), str(r["dtype"]), int(r["tokens"]), float(r["triton_over_sdpa"]))
                for r in data["measured"]]
        table = SpeedTable(int(classes["small"]), int(classes["medium"]), tuple(rows))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: not a backend speed table ({type(exc).__name__}: {exc}); expected "
                          "token_classes {small, medium} and measured [{device, dtype, tokens, triton_over_sdpa}]") from exc
    if not 0 < table.small < table.medium or any(not r.triton_over_sdpa > 0 for r in rows):
        raise ConfigError(f"{source}: token classes must grow (0 < small < medium) and every ratio be > 0")
    return table


@functools.cache
def speed_table() -> SpeedTable:
    return parse_speeds(json.loads(SPEEDS_FILE.read_text(encoding="utf-8")), str(SPEEDS_FILE))


def dtype_name(dtype) -> str:
    return _DTYPES.get(str(dtype), str(dtype).removeprefix("torch."))


@functools.cache  # one lookup per (GPU, dtype, token count) and process, not one per forward
def auto_runs_triton(device_name: str, dtype: str, tokens: int) -> bool:
    return speed_table().triton_is_faster(device_name, dtype, tokens)
