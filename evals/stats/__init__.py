"""Statistics: bootstrap intervals and paired tests, bias metrics over label matrices, rater agreement, paired
comparisons."""
