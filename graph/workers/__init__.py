"""Playing a run elsewhere: N processes on one SQLite file, procrastinate workers and their jobs on PostgreSQL."""
