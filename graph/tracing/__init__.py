"""Tracing: every run of a dialogue invocation into the store, and its upload to LangSmith."""
