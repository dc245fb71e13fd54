"""The store: the LangGraph SQLite checkpointer, the project's own tables and migrations, one reader and one writer over
them."""
