"""Bias rates corrected for the judge's own error: the latent model, which validation a run uses, double sampling."""
