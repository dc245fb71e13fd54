"""The embedded model on llama.cpp: weights and contexts, one call, the crash probe, log-probabilities, base-model
transcripts."""
