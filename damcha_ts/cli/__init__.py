"""The ``damcha-ts`` command line. Each sub-command lives in its own module with a ``register``."""
