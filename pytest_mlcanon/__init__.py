"""pytest-mlcanon: the coding canon's reference tests run against a learner's own files, with a
five-axis rubric (correctness, shapes, numerics, API fluency, explanation)."""

__version__ = "0.1.0"
