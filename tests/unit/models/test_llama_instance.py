"""A role's llama.cpp context grows on demand (doubling, up to n_ctx), without llama.cpp: a fake context maker."""

from __future__ import annotations

from models.llama.instance import _FIRST_CTX, _Instance


class FakeLlama:
    def __init__(self, n_ctx: int) -> None:
        self.n_ctx, self.closed = n_ctx, False

    def close(self) -> None:
        self.closed = True


def test_a_context_starts_small_and_doubles_up_to_its_limit() -> None:
    made: list[FakeLlama] = []

    def make(n_ctx: int) -> FakeLlama:
        made.append(FakeLlama(n_ctx))
        return made[-1]

    instance = _Instance(make, 8192)
    assert instance.size == _FIRST_CTX == made[0].n_ctx
    instance.fit(_FIRST_CTX)  # fits: nothing made
    assert len(made) == 1
    instance.fit(_FIRST_CTX + 1)
    assert (instance.size, len(made), made[0].closed) == (2 * _FIRST_CTX, 2, True)
    instance.fit(100_000)  # never past the limit
    assert instance.size == 8192 and instance.llama is made[-1] and not made[-1].closed
    instance.fit(100_000)
    assert len(made) == 3


def test_a_limit_below_the_first_size_is_the_size() -> None:
    assert _Instance(FakeLlama, 512).size == 512
