"""Entry points: every command's ``main()`` (``python -m graph.run`` and the rest forward here), the ``dymt`` command
and the notebook API."""
