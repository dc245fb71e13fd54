"""Evaluation: statistics and bias metrics over label matrices, scorers and their loop (re-judging, refusal, coherence,
the guard filter), human-annotation agreement, and reports with tables, plots and data files.

The ``python -m evals.<command>`` files here are two-line forwards to ``cli/``, kept so the documented commands work."""
