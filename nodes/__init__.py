"""The dialogue, as LangGraph's templates keep it: its state, runtime context, modes, nodes (one module each) and the
StateGraph builder, side by side."""
