"""The simulation suite the judge-error correction is judged by, outside the product: ``python -m benchmarks
judge_error --coverage`` and ``--labelling`` front it.

``suite`` (shapes of true bias, judges, sizes and their exact truths), ``deconvolution`` (the model-free comparison
method), ``coverage`` (how often the corrected intervals contain the truth) and ``labelling_designs`` (the active
labelling design against random double sampling, by simulation).
"""
