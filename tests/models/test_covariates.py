"""Covariates as tokens (issue 20, the models' side): read, never forecast, for both families and
both attention kinds; a model told the future of a covariate that drives the target learns it."""

from __future__ import annotations

import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models import MODEL_NAMES, build_model
from damcha_ts.models.base import Covariates

L, H, N, B = 24, 6, 3, 4
TINY = {"seq_len": L, "pred_len": H, "d_model": 16, "n_heads": 2, "e_layers": 1, "d_ff": 32, "dropout": 0.0}
COUNTS = {"past_covariates": 2, "future_covariates": 2, "static_covariates": 3}


def _inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, N, generator=generator)
    marks = torch.randn(B, L, 4, generator=generator)
    covariates = Covariates(past=torch.randn(B, L, 2, generator=generator),
                            future=torch.randn(B, L + H, 2, generator=generator),
                            static=torch.randn(B, 3, generator=generator))
    return x, marks, covariates


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_covariates_are_read_and_never_forecast(name):
    torch.manual_seed(0)
    model = build_model({"name": name, **TINY, **COUNTS}).eval()
    x, marks, covariates = _inputs()
    forecast = model(x, marks, covariates)
    assert forecast.shape == (B, H, N)  # the variates only
    for kind in ("past", "future", "static"):  # each kind changes the forecast
        changed = Covariates(**{**covariates.__dict__, kind: getattr(covariates, kind) + 1.0})
        assert not torch.allclose(model(x, marks, changed), forecast), kind


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_future_covariates_reach_the_forecast_through_their_horizon_values(name):
    torch.manual_seed(0)
    model = build_model({"name": name, **TINY, "future_covariates": 1}).eval()
    x, marks, covariates = _inputs()
    future = covariates.future[..., :1].clone()
    later = future.clone()
    later[:, L:] += 1.0  # only the values after the forecast origin differ
    first = model(x, marks, Covariates(future=future))
    assert not torch.allclose(model(x, marks, Covariates(future=later)), first)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_model_without_covariates_has_the_parameters_it_always_had(name):
    plain = build_model({"name": name, **TINY})
    counted = build_model({"name": name, **TINY, "past_covariates": 2})  # past ones share the embeddings
    assert [k for k in plain.state_dict()] == [k for k in counted.state_dict()]
    assert not any("covariate" in k for k in plain.state_dict())


@pytest.mark.parametrize(
    ("counts", "given", "message"),
    [({}, {"past": torch.zeros(B, L, 1)}, r"past covariates were given, but this model was built without them"),
     ({"future_covariates": 2}, {}, r"reads future covariates of shape \[4, 30, 2\]; got none"),
     ({"future_covariates": 2}, {"future": torch.zeros(B, L, 2)}, r"future covariates of shape \[4, 30, 2\]; got shape \(4, 24, 2\)"),
     ({"static_covariates": 3}, {"static": torch.zeros(B, 2)}, r"static covariates of shape \[4, 3\]")],
)
def test_missing_extra_or_misshapen_covariates_are_refused(counts, given, message):
    model = build_model({"name": "itransformer_damcha", **TINY, **counts})
    with pytest.raises(ConfigError, match=message):
        model(torch.zeros(B, L, N), None, Covariates(**given))


def test_covariate_counts_are_checked():
    with pytest.raises(ConfigError, match=r"future_covariates=-1; expected an integer >= 0"):
        build_model({"name": "gateformer_mha", **TINY, "future_covariates": -1})


@pytest.mark.parametrize("name", ["itransformer_damcha", "gateformer_damcha"])
def test_a_target_driven_by_a_known_future_covariate_is_learned_only_with_it(name):
    """y over the horizon = the covariate's (random, unpredictable) horizon values: without the
    covariate no model can beat predicting its mean (MSE about 1); with it, the error collapses."""

    def train(with_covariate: bool) -> float:
        torch.manual_seed(0)
        config = {"name": name, **TINY, "d_model": 32, "d_ff": 64, "future_covariates": int(with_covariate)}
        model = build_model(config)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        data = torch.Generator().manual_seed(1)

        def batch(size: int):
            driver = torch.randn(size, L + H, 1, generator=data)
            x = torch.cat([driver[:, :L], torch.randn(size, L, 1, generator=data)], dim=2)  # [size, L, 2]
            y = driver[:, L:, :1]  # the target (variate 0) follows the driver
            return x, y, Covariates(future=driver) if with_covariate else None

        for _ in range(150):
            x, y, covariates = batch(64)
            loss = (model(x, None, covariates)[..., :1] - y).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            x, y, covariates = batch(512)
            return float((model(x, None, covariates)[..., :1] - y).square().mean())

    without, with_it = train(False), train(True)
    assert without > 0.8  # nothing to learn from the past of a white-noise driver
    assert with_it < 0.25 * without, (without, with_it)
