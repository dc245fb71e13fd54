"""Showing stored dialogues in the terminal: rendering, exports, the interactive viewer and its keys.

Reads the store only (``checkpoints``) and never imports ``graph``: the command
``python -m graph.replay`` sits on top of it.

    render   rich rendering of a dialogue, its turns, branches and the dialogue list
    export   Markdown, HTML and JSON exports, written atomically
    app      the interactive viewer's state machine and drawing
    keys     the terminal's cbreak mode and the key decoder
"""
