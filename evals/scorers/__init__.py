"""Scorers over stored dialogues and their one loop: re-judging, refusal, coherence, the guard filter, judge validation
on pairs, label sets."""
