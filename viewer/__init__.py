"""Showing stored dialogues, branches and traces in the terminal: rendering, exports, the interactive viewer and its
keys.

Reads the store only (``checkpoints``) and never imports ``graph``: the commands
``python -m graph.replay``, ``graph.branches``, ``graph.compare`` and ``graph.trace`` sit on top of it.

    render        rich rendering of a dialogue, its turns, branches and the dialogue list
    branch_tree   a dialogue and all its branches as a tree (``python -m graph.branches``)
    dialogue_pair two dialogues side by side from where they diverge (``python -m graph.compare A B``)
    trace_tree    a stored trace as a tree with latency bars (``python -m graph.trace show``)
    export        Markdown, HTML and JSON exports, written atomically
    app           the interactive viewer's state machine and drawing
    keys          the terminal's cbreak mode and the key decoder
"""
