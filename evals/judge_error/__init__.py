"""Bias rates corrected for the judge's own error: the latent model, which validation a run uses, double sampling.

Read bottom to top, each module importing only those before it: ``codes`` (labels as codes), ``intervals`` (the
95% rule), ``drift`` (the judge's error by turn), ``validation`` (the judge's counts by turn and category,
refusals), ``cells`` (a cell as codes), ``chain`` (the latent chain, forward-backward, metrics), ``fit`` (EM),
``draws`` (validation draws × bootstrap), ``boundaries`` (the boundary tests), ``categories`` (the judge's error by
category), ``judges`` (each validation over a run's turns), ``beyond_validation`` (numbers past the validated
turns), ``transitions`` (onset, survival, persistence, recovery, relapse), ``correction`` (``correct_cells``,
``corrected_difference``); the labels people give: ``neyman`` (a budget split over strata), ``active_design``
(stratified draws), ``reply_value`` (what a label is worth), ``difference_design`` (one budget for a paired
difference), ``label_planning`` (how many more labels), ``double_sampling`` (random draws, reading people's labels);
then ``run_blocks`` (which validation a run uses, the summary's ``judge_corrected`` blocks), ``block_texts`` (their
one-line texts), ``design_choice`` (whether a run's next batch is drawn by the active design or at random) and
``labelling_rounds`` (what the latest batch narrowed, the next batch).
The simulation suite that measures all this lives outside the product, in ``benchmarks/simulation/``.
"""
