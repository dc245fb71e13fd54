"""Evaluation layer for DyMT-ESB: pure statistics and bias metrics over label matrices."""
