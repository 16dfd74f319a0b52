"""Error types. Every message names the file, column, row or argument at fault."""

from __future__ import annotations


class DamchaError(Exception):
    """Base class of the errors damcha_ts raises for bad input or missing resources.

    ``cli``: the message as the command line says it (its flags where the message names Python
    keywords or calls), shown by ``damcha-ts``; None when the message is the same for both.
    """

    def __init__(self, *args, cli: str | None = None):
        super().__init__(*args)
        self.cli = cli

    def cli_message(self) -> str:
        """What ``damcha-ts`` prints: the command-line wording when there is one."""
        return self.cli or str(self)


class DataError(DamchaError, ValueError):
    """Bad data: unparsable timestamps, NaN values, non-numeric columns, too few rows..."""


class DatasetNotFoundError(DamchaError, FileNotFoundError):
    """A dataset file could not be found anywhere we looked (the message lists every place)."""


class ChecksumError(DamchaError, ValueError):
    """A file's sha256 differs from the registry's (the message gives both digests).

    ``rejected``: when a search found several such files, one error for each (each with its digests).
    """

    def __init__(self, message: str, rejected: tuple[ChecksumError, ...] = (), *, cli: str | None = None):
        super().__init__(message, cli=cli)
        self.rejected = tuple(rejected)


class ConfigError(DamchaError, ValueError):
    """A bad argument or configuration value (the message names it)."""


class ConvergenceWarning(UserWarning):
    """Training ended while the validation loss was still falling: its best validation was the last
    one, so a larger budget (``max_steps`` or ``max_epochs``) would likely give a better model."""


class BaselineWarning(UserWarning):
    """A trained model forecasts its validation windows worse (by MASE) than a naive rule: repeating
    the last value or the last season. Its forecasts are then not worth more than the rule's."""


class BudgetWarning(UserWarning):
    """``Forecaster("auto")``'s time budget ran out before any trained candidate was scored: the
    forecast is the best baseline's, and a larger ``time_budget`` would let trained models compete."""


class Stopped(BaseException):
    """A command ended by a signal: SIGTERM (kill, timeout, a batch scheduler) or SIGINT (Ctrl+C).

    A BaseException, as KeyboardInterrupt is, so that no ``except Exception`` on the way takes it for
    an error of the run. ``damcha-ts`` prints the message and exits with ``exit_code``: 128 + the
    signal number, what a shell reports for a process the signal ended (143, 130).
    """

    def __init__(self, signum: int, message: str | None = None):
        import signal

        super().__init__(message or f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` on every Python this package supports (3.10 has no add_note):
    tracebacks show the note, and ``damcha-ts`` prints it after the error's message."""
    exc.__notes__ = [*getattr(exc, "__notes__", ()), note]


def plain_repr(value) -> str:
    """``repr(value)`` for a message, with NumPy scalars (also in a list or tuple) as the Python
    values they hold: NumPy 2 writes ``np.float64(nan)``, ``np.int64(3)`` and ``np.str_('a')`` where
    a user reads ``nan``, ``3`` and ``'a'``."""
    return repr(_python_value(value))


def _python_value(value):
    if type(value) in (list, tuple):
        return type(value)(_python_value(item) for item in value)
    # Numbers, booleans and text; a datetime64 reads better as NumPy writes it than as a datetime.
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and kind in tuple("biufcSU"):
        return value.item()
    return value
