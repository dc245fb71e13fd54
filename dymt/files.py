"""Files the library writes beside the store (verdicts, exports): whole or not at all."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: Path, content: str | bytes, *, private: bool = False) -> None:
    """Write a file through a temporary sibling and a rename, so a reader never sees half of it.

    ``private`` makes it owner-only, as the database is: for files holding generated text.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    try:
        if isinstance(content, bytes):
            partial.write_bytes(content)
        else:
            partial.write_text(content, encoding="utf-8")
        if private:
            partial.chmod(0o600)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
