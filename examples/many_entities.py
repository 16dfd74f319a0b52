"""Many entities, one global model: ETTh1 and ETTh2, two transformer stations with the same
variates, trained together.

    python examples/many_entities.py            # a few minutes on a laptop CPU
    python examples/many_entities.py --quick    # seconds (what the tests run)

The two stations are stacked in one table with a ``station`` column (as a store or sensor table
would be). ``fit(table, entity_col="station")`` splits each station by time on its own, scales
each with its own train rows, and trains one model on the windows of both; ``evaluate`` reports
each station and both pooled, ``predict`` forecasts each station after its own last row. The
stations' lengths differ on purpose (ETTh2 is cut shorter and starts later).

The full run (10 epochs, one CPU thread, about 3 minutes): test MSE 0.275 on ETTh1 (2,857 windows),
0.127 on ETTh2 (2,137), 0.211 pooled (z-scale, each station's own scaler).
"""

from __future__ import annotations

import argparse

import pandas as pd

from damcha_ts import Forecaster
from damcha_ts.data import load_frame


def stations(quick: bool) -> pd.DataFrame:
    rows = 2000 if quick else 14400
    first = load_frame("ETTh1").iloc[:rows]
    second = load_frame("ETTh2").iloc[500 : 500 + rows * 3 // 4]  # ragged: shorter, later start
    return pd.concat([part.rename_axis("date").reset_index().assign(station=name)
                      for name, part in (("ETTh1", first), ("ETTh2", second))], ignore_index=True)


def main(quick: bool = False) -> dict:
    table = stations(quick)
    model = Forecaster("itransformer_damcha_static", horizon=24, lookback=96, max_epochs=1 if quick else 10,
                       learning_rate=1e-3, lr_schedule="type1", batch_size=32, patience=3, random_state=0,  # as documented
                       trainer_kwargs={"enable_progress_bar": False, **({"limit_train_batches": 10} if quick else {})})
    model.fit(table, entity_col="station")
    scores = model.evaluate()
    for station, own in scores["entities"].items():
        print(f"{station}: test MSE {own['mse']:.3f} over {own['windows']} windows")
    print(f"both stations pooled: test MSE {scores['mse']:.3f} over {scores['windows']} windows")
    forecast = model.predict()
    print(forecast.groupby("station")["date"].agg(["min", "max"]).to_string())
    return {"scores": scores, "forecast": forecast, "table": table}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny budget: seconds instead of minutes")
    main(parser.parse_args().quick)
