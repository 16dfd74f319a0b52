"""The benchmark leaderboard: grid runs on many workers, the results CSV, LEADERBOARD.md and its plots.

    damcha-ts leaderboard --config configs/leaderboard/ett.yaml [--storage URL] [--workers K] [--status]

Start with grid.py (what a grid file holds; its values checked by grid_values.py, its ``targets:`` read
by targets.py), then runner.py (one run: import, enqueue, workers, export), queue.py (the grid's cells
as the trials of an Optuna study), worker.py (take a cell, run it, report it), cells.py (one cell),
results.py (the CSV), then the report: dataset_results.py (rows grouped into cells, mean ± std over
seeds), comparison.py (DAMCHA against MHA), tables.py (every table as text, no Markdown), render.py
with templates/ (the prose), figures.py (the figure list) and plots.py (drawing them), put together
by report.py; published.json holds the published numbers of protocol.md §4.
Model names, their families and the dataset order come from the registries (``damcha_ts.models``,
``damcha_ts.data``), so importing this package loads torch.
"""

from __future__ import annotations

from damcha_ts.leaderboard.dataset_results import ExpectedCell
from damcha_ts.leaderboard.grid import Cell, LeaderboardGrid, load_grid
from damcha_ts.leaderboard.published import PublishedResults, load_published
from damcha_ts.leaderboard.report import build_report, write_report
from damcha_ts.leaderboard.results import RESULT_COLUMNS, append_result, read_results
from damcha_ts.leaderboard.runner import LeaderboardRun, expected_cells, run_leaderboard

__all__ = [
    "RESULT_COLUMNS", "Cell", "ExpectedCell", "LeaderboardGrid", "LeaderboardRun", "PublishedResults",
    "append_result", "build_report", "expected_cells", "load_grid", "load_published", "read_results",
    "run_leaderboard", "write_report"
]
