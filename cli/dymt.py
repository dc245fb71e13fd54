"""``dymt``: one command whose subcommands are the ``python -m`` entry points (``dymt run`` is ``python -m graph.run``).

Each subcommand hands its arguments, untouched, to the same ``main()`` the
``python -m`` form calls, so options, output and exit status are identical. The
module behind a subcommand is imported only when that subcommand runs, so
``dymt --help`` and ``dymt replay`` never load the model packages.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

from cli.common import fail

# subcommand → (module whose main() it runs, one line for the overview)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("cli.run", "play a set of dialogues and print the bias summary"),
    "resume": ("cli.resume", "continue a paused, failed or interrupted dialogue (or every one of a run)"),
    "branch": ("cli.branch", "fork a stored dialogue before turn K, change one thing, and play it on"),
    "branches": ("cli.branches", "a dialogue and all its branches as a tree, with each turn's label"),
    "compare": ("cli.compare", "two dialogues side by side, or a counterfactual set's paired statistics"),
    "replay": ("cli.replay", "read a stored dialogue turn by turn, with its labels and branches"),
    "trace": ("cli.trace", "browse and export the recorded traces (graph → turn → node → model call)"),
    "runs": ("cli.runs", "list, export or delete runs; clear the response cache"),
    "status": ("cli.status", "a run's progress, ETA, failures, cost and bias rates so far (read-only; --watch)"),
    "worker": ("cli.worker", "play dialogues enqueued with run --enqueue (PostgreSQL), until stopped"),
    "report": ("cli.report", "the bias-dynamics report of one or several runs (Markdown, plots, data, HTML)"),
    "rejudge": ("cli.rejudge", "label every stored turn of a run again with another judge"),
    "judge": ("cli.judge", "validate a judge on standalone (statement, reply) pairs"),
    "refusal": ("cli.refusal", "classify every stored reply of a run as a refusal or not"),
    "coherence": ("cli.coherence", "score how coherent each stored dialogue of a run is, 1 to 5"),
    "annotate": ("cli.annotate", "human annotation batches and agreement with the judge"),
    "filter": ("cli.filter", "simulate a post-hoc safety filter over stored dialogues"),
    "reference": ("cli.reference", "print this command reference as Markdown (docs/commands.md)"),
    "benchmarks": ("benchmarks.__main__", "speed and memory benchmarks (from a source checkout)"),
}


def overview() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: dymt COMMAND [ARGS...]   (dymt COMMAND --help for its options)",
        "",
        "Dynamic multi-turn evaluation of social bias. Every command is also python -m MODULE.",
        "",
        "commands:",
    ]
    lines += [
        f"  {name:<{width}}  {summary}   [python -m {module.removesuffix('.__main__')}]"
        for name, (module, summary) in COMMANDS.items()
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write(overview())
        return 2
    if args[0] in ("-h", "--help", "help"):
        sys.stdout.write(overview())
        return 0
    if args[0] == "--version":
        try:
            sys.stdout.write(f"dymt {version('dymt-esb')}\n")
        except PackageNotFoundError:
            sys.stdout.write("dymt (not installed as a package: running from a source checkout)\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        fail(f"unknown command {name!r}: use one of {', '.join(COMMANDS)} (see dymt --help)")
    module_name = COMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            fail(f"dymt {name} needs the {exc.name!r} folder of a source checkout: run it from the repository")
        raise
    return module.main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
