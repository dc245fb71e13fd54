"""Bias rates corrected for the judge's own error: the latent model, which validation a run uses, double sampling.

Read bottom to top, each module importing only those before it: ``codes`` (labels as codes), ``intervals`` (the
95% rule), ``drift`` (the judge's error by turn), ``validation`` (the judge's counts by turn and category,
refusals), ``cells`` (a cell as codes), ``chain`` (the latent chain, forward-backward, metrics), ``fit`` (EM),
``draws`` (validation draws × bootstrap), ``boundaries`` (the boundary tests), ``categories`` (the judge's error by
category), ``judges`` (each validation over a run's turns), ``beyond`` (numbers past the validated turns),
``correction`` (``correct_run``, ``corrected_difference``),
``planning`` (``plan_labels``); then ``double_sampling`` and
``active`` (the draws people label), ``corrected`` (which validation a run uses, the summary's blocks), ``texts``
(their one-line texts), and ``choice`` (whether a run's next batch is drawn by the active design or at random).
The simulation suite that measures all this lives outside the product, in ``benchmarks/simulation/``.
"""
