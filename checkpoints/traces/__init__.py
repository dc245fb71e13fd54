"""Stored traces: the trace tables, their compact compressed encoding, and a trace read back as a tree."""
