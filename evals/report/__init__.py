"""Reports: the numbers a report shows, its tables, Markdown, plots, HTML page and data files, and the end-of-run
summary.

``python -m evals.report`` (this package's ``__main__``) is a two-line forward to :mod:`cli.report`."""
