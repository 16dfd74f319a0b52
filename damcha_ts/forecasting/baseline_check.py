"""Does a fitted model beat the naive rules? Its validation MASE beside theirs, and a warning when not.

A model trained on data nobody tuned for can forecast worse than repeating the last value or the
last season, and looks fine until compared. Every fit of user data (``Estimator.fit``: ``Forecaster.fit``,
``damcha-ts fit --data FILE``) scores its trained model and the ``naive`` and ``seasonal_naive``
rules on the same validation windows, through the same path (:meth:`Predictor.evaluate`): the
three MASEs go to ``fit_result_["validation_mase"]`` and ``["baselines_validation_mase"]``, and a
:class:`~damcha_ts.errors.BaselineWarning` says when a rule wins.
"""

from __future__ import annotations

import warnings

from damcha_ts.data.time_index import season_length_of
from damcha_ts.errors import BaselineWarning

RULES = ("naive", "seasonal_naive")


def compare_with_baselines(predictor, panel, batch_size: int) -> dict:
    """``{"validation_mase": the model's, "baselines_validation_mase": {rule: MASE}}`` on the validation
    windows of ``panel`` (the model trained on its train split); a BaselineWarning when a rule is lower.
    {} without validation windows. The seasonal rule needs a lookback of one season (else it is left out)."""
    from damcha_ts.forecasting.predictor import Predictor
    from damcha_ts.models.registry import build_model
    from damcha_ts.training.runner import with_covariate_counts

    if panel.window_count("val") < 1:
        return {}
    season = season_length_of(panel.freq)
    lengths = {"seq_len": panel.seq_len, "pred_len": panel.pred_len}
    rules = {"naive": {}, "seasonal_naive": {"season_length": season}} if season <= panel.seq_len else {"naive": {}}
    ours = validation_mase(predictor, panel, batch_size)
    # A rule reads no covariate, but takes the panel's (as any model of it): its batches carry them.
    theirs = {name: validation_mase(Predictor(build_model(with_covariate_counts({"name": name, **lengths, **keys}, panel))
                                              .eval(), predictor.meta), panel, batch_size) for name, keys in rules.items()}
    best = min(theirs, key=theirs.get)
    if theirs[best] < ours:
        warnings.warn(f"on the validation windows this model's MASE ({ours:.3f}) is above {best}'s ({theirs[best]:.3f}"
                      + (f", season {season}" if best == "seasonal_naive" else "") + "): it forecasts worse than "
                      f"{'repeating the last value' if best == 'naive' else 'repeating the last season'}. Try "
                      "Forecaster('auto') (a search that includes the rules), more max_steps, or the rule itself",
                      BaselineWarning, stacklevel=6)
    return {"validation_mase": ours, "baselines_validation_mase": theirs}


def validation_mase(predictor, panel, batch_size: int) -> float:
    """MASE over every validation window, pooled over entities as ``Predictor.evaluate`` pools it, from
    one forecast pass (evaluate's MSE/MAE pass is not needed here)."""
    from damcha_ts.forecasting.window_scores import pooled_split_scores, split_scores

    return pooled_split_scores(panel, lambda entity, one: split_scores(predictor.for_entity(entity), one, "val",
                                                                        batch_size=batch_size), "val")["mase"]
