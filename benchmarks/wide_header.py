"""How long ``damcha-ts data info FILE --json`` takes on a wide CSV, against its number of columns.

    python benchmarks/wide_header.py                         # 1k, 10k, 100k columns x 50 rows
    python benchmarks/wide_header.py --columns 1000 10000    # a quicker run
    PYTHONPATH=/path/to/other/checkout python benchmarks/wide_header.py --no-save   # another version

Reading a CSV must stay linear in its columns (a 100,000-column header once took 142 s, from a
per-column ``list.count``). The files (a ``date`` column and N float columns, 50 hourly rows) are
written to a temporary folder; the command runs in-process after one untimed warm-up run, so
interpreter start-up and imports are not counted, and each size is timed ``--repeats`` times (the best is kept). Prints one line per size and the
ratio of each time to the previous size's: about 10 for a tenfold step when the cost is linear.

Writes benchmarks/results/wide_header.json: {"rows", "records": [{"columns", "seconds"}, ...],
"ratios": [{"columns", "ratio"}, ...], "python", "pandas", "damcha_ts", "load_average"}.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results" / "wide_header.json"


def write_wide_csv(path: Path, columns: int, rows: int) -> Path:
    """A wide hourly CSV: ``date`` and ``columns`` float columns named c0, c1, ..."""
    rng = np.random.default_rng(0)
    stamps = pd.date_range("2024-01-01", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    values = rng.standard_normal((rows, columns))
    with open(path, "w") as handle:
        handle.write("date," + ",".join(f"c{j}" for j in range(columns)) + "\n")
        for stamp, row in zip(stamps, values):
            handle.write(stamp + "," + ",".join(f"{v:.4f}" for v in row) + "\n")
    return path


def time_data_info(path: Path) -> float:
    from damcha_ts.cli.main import main

    argv = ["data", "info", str(path), "--json", "--lookback", "8", "--horizon", "4"]
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"damcha-ts {' '.join(argv)} exited {code}")
    assert json.loads(out.getvalue())["variates"] == int(path.stem.split("_")[1])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-save", action="store_true", help=f"print only; do not write {RESULTS.name}")
    args = parser.parse_args()

    import damcha_ts

    records = []
    with tempfile.TemporaryDirectory(prefix="wide_header_") as folder:
        time_data_info(write_wide_csv(Path(folder) / "wide_10.csv", 10, args.rows))  # imports, untimed
        for columns in args.columns:
            path = write_wide_csv(Path(folder) / f"wide_{columns}.csv", columns, args.rows)
            seconds = min(time_data_info(path) for _ in range(args.repeats))
            records.append({"columns": columns, "seconds": round(seconds, 3)})
            print(f"{columns:>8} columns x {args.rows} rows: {seconds:8.2f} s", flush=True)
    ratios = [
        {"columns": after["columns"], "ratio": round(after["seconds"] / before["seconds"], 2)}
        for before, after in zip(records, records[1:])
    ]
    for before, ratio in zip(records, ratios):
        print(f"{before['columns']} -> {ratio['columns']} columns: x{ratio['ratio']}")
    result = {
        "rows": args.rows,
        "records": records,
        "ratios": ratios,
        "python": platform.python_version(),
        "pandas": pd.__version__,
        "damcha_ts": damcha_ts.__version__,
        "load_average": os.getloadavg()[0],
    }
    if not args.no_save:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
