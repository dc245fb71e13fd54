"""Graph nodes, one module each (user simulator, scripted user, target, judge, termination), and what they share (scoring, structured output)."""
