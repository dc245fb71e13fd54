"""The dialogue graph: state schema, runtime context, the compiled StateGraph and its commands."""
