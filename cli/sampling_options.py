"""The flags of how a run's models answer: the visible reply's cap, thinking per role, judging the reasoning too, and
refusing a model whose requests do not send what was asked (``python -m graph.run``'s model flags)."""

from __future__ import annotations

from cli.common import ArgumentParser


def add_sampling_options(p: ArgumentParser) -> None:
    """--max-tokens, --thinking, --judge-reasoning and --strict-sampling (graph/config/flags.py maps them)."""
    p.add_argument(
        "--max-tokens",
        nargs="+",
        default=None,
        metavar="[ROLE=]N",
        help="cap of the visible reply in tokens, the target's or ROLE=N for user, target, judge (default 250); a "
        "thinking model's reasoning has its own budget beside it (see --thinking)",
    )
    p.add_argument(
        "--thinking",
        nargs="+",
        default=None,
        metavar="[ROLE=]off|on|BUDGET",
        help="thinking of the target's model, or ROLE=... per role: off, on, or a reasoning budget in tokens "
        "(default: the model's own); sent as the provider's own switch and recorded with the run; reasoning is "
        "always split off the reply and stored beside it",
    )
    p.add_argument(
        "--judge-reasoning",
        action="store_true",
        help="the judge labels the target's reasoning too: a second label set (reasoning), its bias rates beside "
        "the reply's, per turn",
    )
    p.add_argument(
        "--strict-sampling",
        action="store_true",
        help="refuse a model whose requests drop or change a setting asked for (temperature, seed, max tokens), "
        "as its LangChain integration builds them",
    )
