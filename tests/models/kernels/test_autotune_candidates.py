"""The autotuner benchmarks at most three tiles per call: the largest no taller than the token
count rounded up to a power of two."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")

from damcha_ts.models.kernels.autotune import tiles_to_benchmark  # noqa: E402

TILES = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w)
         for m, n, w in ((128, 64, 8), (128, 64, 4), (64, 64, 4), (32, 32, 4), (16, 16, 4))]


def _kept(tokens):
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps)
            for c in tiles_to_benchmark(TILES, {"num_tokens": tokens})]


@pytest.mark.parametrize("tokens, expected", [
    (866, [(128, 64, 8), (128, 64, 4), (64, 64, 4)]),  # Traffic: the three largest, in list order
    (100, [(128, 64, 8), (128, 64, 4), (64, 64, 4)]),  # rounded up to the next power of two
    (64, [(64, 64, 4), (32, 32, 4), (16, 16, 4)]),
    (25, [(32, 32, 4), (16, 16, 4)]),                 # Weather
    (11, [(16, 16, 4)]),                              # ETT: only the smallest tile fits
    (1, [(16, 16, 4)]),
])
def test_three_largest_tiles_that_fit_the_tokens(tokens, expected):
    assert _kept(tokens) == expected


def test_the_smallest_tile_runs_when_none_fits():
    wide = [triton.Config({"BLOCK_N": 128}), triton.Config({"BLOCK_N": 64})]
    assert [c.kwargs for c in tiles_to_benchmark(wide, {"num_tokens": 7})] == [{"BLOCK_N": 64}]
