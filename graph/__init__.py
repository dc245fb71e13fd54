"""The dialogue graph (state schema, runtime context, the compiled StateGraph) and, above it, running, pausing and branching dialogues.

The ``python -m graph.<command>`` files here are two-line forwards to ``cli/``, kept so the documented commands work.
"""
