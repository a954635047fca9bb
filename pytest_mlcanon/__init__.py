"""pytest-mlcanon: the coding canon's reference tests run against a learner's own files, with a
five-axis rubric (correctness, shapes, numerics, API fluency, explanation).

PYTEST_DONT_REWRITE: pytest marks every top-level package of a plugin's distribution for assertion
rewriting, and warns (an error under ``filterwarnings = error``) when one was imported first, as
``mlcanon check`` imports this one before it calls ``pytest.main``. The plugin has no assertions
for pytest to explain, so this package opts out, as pytest documents for plugins.
"""

__version__ = "0.1.0"


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext pytest_mlcanon``: the ``%%canon ITEM`` cell magic (see :mod:`pytest_mlcanon.notebook`)."""
    from pytest_mlcanon.notebook import load

    load(ipython)
