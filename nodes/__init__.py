"""Graph nodes (user simulator, target, judge, termination) and the model registry they call."""
