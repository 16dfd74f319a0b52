"""The autotuner benchmarks at most two tiles per call, the largest that the token count fills."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")

from damcha_ts.models.kernels.triton_damcha import tiles_to_benchmark  # noqa: E402

FORWARD_TILES = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}) for m, n in ((128, 64), (64, 64), (32, 32), (16, 16))]


def _kept(tokens):
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in tiles_to_benchmark(FORWARD_TILES, {"num_tokens": tokens})]


@pytest.mark.parametrize("tokens, expected", [
    (866, [(128, 64), (64, 64)]),   # Traffic: the two largest tiles
    (128, [(128, 64), (64, 64)]),
    (100, [(128, 64), (64, 64)]),   # rounded up to the next power of two
    (64, [(64, 64), (32, 32)]),
    (25, [(32, 32), (16, 16)]),     # Weather
    (11, [(16, 16)]),               # ETT: only the smallest tile fits
    (1, [(16, 16)]),
])
def test_two_largest_tiles_that_fit_the_tokens(tokens, expected):
    assert _kept(tokens) == expected


def test_the_smallest_tile_runs_when_none_fits():
    wide = [triton.Config({"BLOCK_N": 128}), triton.Config({"BLOCK_N": 64})]
    assert [c.kwargs for c in tiles_to_benchmark(wide, {"num_tokens": 7})] == [{"BLOCK_N": 64}]
