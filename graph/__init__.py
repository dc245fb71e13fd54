"""Running dialogues: the run configuration, playing resumably, pausing, branching, workers, tracing, and the graph
LangGraph Studio loads.

The ``python -m graph.<command>`` files here are two-line forwards to ``cli/``, kept so the documented commands work."""
