"""The store on PostgreSQL: LangGraph's Postgres checkpointer, the shared SQL run there, today's tables created once,
and who plays a dialogue."""
