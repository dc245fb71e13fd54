"""Persistence: the LangGraph SQLite checkpointer, the project's own tables, and readers over both."""
