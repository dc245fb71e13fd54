"""Evaluation layer for DyMT-ESB: statistics and bias metrics over label matrices, post-hoc labellers
(re-judging, refusal, coherence), human-annotation agreement, and reports with plots and data files."""
