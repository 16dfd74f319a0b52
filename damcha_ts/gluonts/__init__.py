"""GluonTS integration: DAMCHA models as a ``PyTorchLightningEstimator`` (see docs/gluonts.md).

Importing this package imports gluonts; ``import damcha_ts`` never does.

    from damcha_ts.gluonts import DAMCHAEstimator
    predictor = DAMCHAEstimator(prediction_length=24, model="itransformer_damcha",
                                quantiles=[0.1, 0.9]).train(PandasDataset(df, target=list(df.columns)))
"""

from damcha_ts.gluonts.convert import predictor_from_forecaster
from damcha_ts.gluonts.estimator import DAMCHAEstimator, target_statistics
from damcha_ts.gluonts.lightning_module import DAMCHALightningModule
from damcha_ts.gluonts.pruning import train_with_pruning
from damcha_ts.gluonts.transform import AddTimeMarks, RequireMultivariateTarget

__all__ = [
    "AddTimeMarks", "DAMCHAEstimator", "DAMCHALightningModule", "RequireMultivariateTarget",
    "predictor_from_forecaster", "target_statistics", "train_with_pruning"
]
