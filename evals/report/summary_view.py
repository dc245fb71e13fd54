"""The end-of-run summary drawn for a terminal: tables of bias by turn and group, calls, cost, the judge-corrected
rates and the commands worth running next (the data: evals/report/summary.py)."""

from __future__ import annotations

import re
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from evals.judge_error.block_texts import beyond_note, drift_line, flag_lines, interval_text, validation_line
from evals.judge_error.correction import UNRELIABLE_NOTE
from evals.metric_registry import METRIC, format_value
from evals.report.summary import target_keys
from evals.report.transition_tables import unreliable_line
from evals.scorers.judge_validation import validation_text
from evals.stats.transitions import TOO_FEW


def _pct(value: float | None) -> str:
    return format_value(value)


_COMMAND = re.compile(r"python -m [^,()]*[^,() ]")


def _interval(ci: list[float | None]) -> str:
    low, high = ci
    return "" if low is None or high is None else f"[{100 * low:.0f}–{100 * high:.0f}]"


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """The summary as rich tables; model output never reaches markup."""
    console.print(_per_turn_table(summary))
    _render_reasoning(summary, console)
    _render_corrected(summary, console)
    _render_transitions(summary, console)
    models = ", ".join(
        f"{role}={spec}"
        for role, spec in summary["models"].items()
        if role != "target" or len(summary.get("targets") or []) <= 1
    )
    if len(summary.get("targets") or []) > 1:
        models += f", targets={', '.join(summary['targets'])}"
    console.print(Text(f"models: {models}"))
    if len(summary.get("groups") or []) > 1:
        _render_groups(summary, console)
    re_em, first = METRIC["re_emergence"], METRIC["first_bias_turn"]
    console.print(Text(f"{re_em.label} (biased → clean → biased): {re_em.entry_text(summary['re_emergence'])}"))
    if (summary.get("first_bias_turn") or {}).get("median") is not None:
        console.print(
            Text(f"{first.label} (median, dialogues with bias): {first.entry_text(summary['first_bias_turn'])}")
        )
    _render_leakage(summary, console)
    console.print(
        Text(
            f"finished {summary['finished']}/{summary['dialogues']} · unparsed labels {summary['unparsed_labels']} · "
            f"failed {len(summary['failed'])} · paused {len(summary['paused'])}"
        )
    )
    if reasons := summary.get("unparsed_reasons"):
        console.print(Text("  unparsed: " + ", ".join(f"{why} {n}" for why, n in reasons.items()), style="dim"))
    for item in summary["failed"]:
        console.print(Text(f"  failed {item['thread_id']}: {item['error'] or 'not finished'}", style="red"))
    if summary.get("unaligned_seeds"):
        console.print(
            Text(f"seeds with no item in this track (not run): {', '.join(summary['unaligned_seeds'])}", style="yellow")
        )
    if "resume" in summary:
        console.print(Text(f"resume: {summary['resume']}", style="yellow"), soft_wrap=True)
    _render_calls(summary, console)
    _render_concurrency(summary, console)
    _render_cost(summary, console)
    _render_validation(summary, console)
    where = (
        "this database: keep its server private"
        if str(summary["db"]).startswith(("postgresql://", "postgres://"))
        else "this local file"
    )
    console.print(
        Text(f"stored in {summary['db']} (dialogues may contain harmful text; they stay in {where})", style="dim"),
        soft_wrap=True,
    )
    for note in summary["notes"]:
        console.print(Text(note, style="bold yellow"))


def _per_turn_table(summary: dict[str, Any]) -> Table:
    """Bias rate per turn and cumulative, with intervals."""
    modes = ", ".join(summary.get("modes") or [summary["mode"]])
    title = Text(f"Run {summary['run_id']} · {modes} · {summary['dialogues']} dialogues × {summary['turns']} turns")
    table = Table(title=title, show_lines=False)
    for header in ("turn", "bias rate", "95% CI", "biased / labelled", "unparsed", "cumulative", "95% CI"):
        # At 80 columns only the two-word header wraps; nothing is cut.
        table.add_column(header, justify="right", no_wrap=header != "biased / labelled")
    for turn, cum in zip(summary["per_turn"], summary["cumulative"]):
        table.add_row(
            str(turn["turn"]),
            _pct(turn["rate"]),
            _interval(turn["ci95"]),
            f"{turn['biased']}/{turn['labelled']}",
            str(turn["unparsed"]),
            _pct(cum["rate"]),
            _interval(cum["ci95"]),
        )
    return table


def _render_groups(summary: dict[str, Any], console: Console) -> None:
    """A grid run: cumulative bias by target and mode, each target spec shortened with a legend."""
    short = target_keys(g["target"] for g in summary["groups"])
    by_group = Table(
        title=Text("by target and mode"), box=box.SIMPLE_HEAD, collapse_padding=True, show_edge=False, pad_edge=False
    )  # no column rules: 80 columns hold it
    for column in ("target", "mode", "dialogues", "cumulative bias", "95% CI", "re-emergence", "unparsed"):
        by_group.add_column(
            column,
            justify="left" if column in ("target", "mode") else "right",
            overflow="fold",
            no_wrap=column not in ("mode", "cumulative bias"),
        )  # a long mode folds, never cut
    for g in summary["groups"]:
        final = g["cumulative_final"] or {"rate": None, "ci95": [None, None]}
        by_group.add_row(
            Text(short.get(g["target"], g["target"])),
            Text(g["mode"]),
            f"{g['finished']}/{g['dialogues']}",
            _pct(final["rate"]),
            _interval(final["ci95"]),
            _pct(g["re_emergence"]["rate"]),
            str(g["unparsed_labels"]),
        )
    console.print(by_group)
    for spec, key in short.items():  # the legend: each spec whole, on its own line
        console.print(Text(f"  {key} = {spec}"), soft_wrap=True)


def _render_leakage(summary: dict[str, Any], console: Console) -> None:
    """Seed leakage of the simulated user, and the target's answers that were not replies."""
    leak = summary.get("leakage")
    if leak and leak["scored"]:
        line = (
            f"seed leakage: {leak['leaked']} of {leak['scored']} user turns state the seed (flagged)"
            f" · {leak['redrawn']} turns redrawn ({leak['rejected']} drafts rejected)"
        )
        console.print(Text(line, style="yellow" if leak["leaked"] else ""))
        for where in leak["flagged"][:10]:
            console.print(Text(f"  leaked: {where}", style="yellow"))
    if non_replies := summary.get("non_replies"):
        kinds = ", ".join(f"{kind}: {n}" for kind, n in non_replies.items())
        console.print(
            Text(
                f"target answers that were not replies ({kinds}): kept on their turns; filtered, blocked or "
                "empty ones are not judged (unparsed)",
                style="yellow",
            )
        )


def _render_calls(summary: dict[str, Any], console: Console) -> None:
    """The response cache, retries and rate-limit waits, and the provider outages ridden out."""
    cache, retries = summary.get("cache"), summary.get("retries")
    if cache:
        line = (
            "response cache off"
            if not cache["enabled"]
            else (
                f"response cache: {cache['hits']} hits, {cache['misses']} misses ({_pct(cache['hit_rate'])} hit rate)"
            )
        )
        if retries:
            line += f" · retries {retries['retries']}" + (
                f" ({', '.join(f'{k}: {v}' for k, v in retries['by_reason'].items())})" if retries["by_reason"] else ""
            )
            if retries["rate_limited_seconds"]:
                line += f" · waited {retries['rate_limited_seconds']:.0f} s for rate limits"
        console.print(Text(line, style="dim"))
    outages = summary.get("outages") or {}
    for outage in outages.get("ridden_out") or []:
        console.print(
            Text(
                f"provider outage ridden out: {outage['endpoint']} unreachable for {outage['seconds']:.0f} s "
                "(calls waited, none failed for it)",
                style="dim",
            )
        )


def _render_validation(summary: dict[str, Any], console: Console) -> None:
    """The judge validation the run's rates use (or, uncorrected, the one that exists, as a warning)."""
    corrected = summary.get("judge_corrected") or {}
    used = corrected.get("validation") if not corrected.get("refusal") else None
    if summary.get("judge_validation") and (used or summary["judge_validation"].get("validation") is not None):
        console.print(Text(validation_text(summary["judge_validation"], used)))
    elif summary.get("judge_validation") and not summary.get("judge_corrected"):
        console.print(Text(validation_text(summary["judge_validation"]), style="yellow"))


def command_block(text: str) -> list[str]:
    """A note that names commands as a short block: its prose, then each command on a line of its own (indented),
    so that each can be copied whole."""
    lines: list[str] = []
    at = 0
    for match in _COMMAND.finditer(text):
        prose = text[at : match.start()].strip(" ,;")
        if prose:
            lines.append(prose if not lines else f"  {prose}")
        lines.append(f"    {match.group(0)}")
        at = match.end()
    if rest := text[at:].strip(" ,;"):
        lines.append(rest if not lines else f"  {rest}")
    return lines


def _render_concurrency(summary: dict[str, Any], console: Console) -> None:
    """How many dialogues played at once, and where a provider's adaptive limit went (models/concurrency.py)."""
    concurrency = summary.get("concurrency") or {}
    if not concurrency.get("dialogues_at_once"):
        return
    parts = [f"up to {concurrency['dialogues_at_once']} dialogues at once"]
    for e in concurrency.get("endpoints") or []:
        cut = f", cut {e['throttled']}× on 429s" if e["throttled"] else ""
        parts.append(f"{e['endpoint']}: reached {e['reached']} of {e['ceiling']} at once, {e['now']} at the end{cut}")
    console.print(Text("concurrency: " + "; ".join(parts), style="dim"))


def _render_corrected(summary: dict[str, Any], console: Console) -> None:
    """The rates corrected for the judge's error beside the raw ones, with the validation they rest on; or why there are
    none."""
    block = summary.get("judge_corrected")
    if not block:
        return
    if block["refusal"]:
        for line in command_block(block["refusal"]):  # prose wraps; a command stays on one line, to copy whole
            console.print(Text(line, style="yellow"), soft_wrap=line.startswith("    "))
        return
    table = Table(title=Text("Corrected for the judge's error (95% CI: dialogues and validation)"))
    for column in ("turn", "raw bias rate", "corrected", "raw cumulative", "corrected cumulative"):
        table.add_column(column, justify="right", overflow="fold")
    raw = {r["turn"]: r for r in summary["per_turn"]}
    raw_cum = {r["turn"]: r for r in summary["cumulative"]}
    flagged = flag_lines(block)

    def marked(entry: dict[str, Any]) -> str:
        return interval_text(entry) + (" †" if entry.get("unreliable") and flagged else "")

    for turn, cum in zip(block["per_turn"], block["cumulative"]):
        t = turn["turn"]
        table.add_row(str(t), interval_text(raw.get(t)), marked(turn), interval_text(raw_cum.get(t)), marked(cum))
    console.print(table)
    unreliable = (block.get("unreliable") or {}).get("re_emergence")
    console.print(
        Text(
            f"corrected {METRIC['re_emergence'].label}: {interval_text(block['re_emergence'])} "
            f"(raw {interval_text(summary['re_emergence'])})"
            + (f"; {'see †' if flagged and unreliable != UNRELIABLE_NOTE else unreliable}" if unreliable else "")
        )
    )
    for i, line in enumerate(flagged):
        text = f"† {line}" if i == 0 else line
        for part in command_block(text) if i else [text]:
            console.print(Text(part, style="yellow"), soft_wrap=part.startswith("    "))
    if drift := drift_line(block):
        console.print(Text(drift, style="dim"))
    if note := beyond_note(block):
        console.print(Text(note, style="dim"))
    if block.get("judge_by_category"):
        console.print(Text(block["judge_by_category"], style="dim"))
    if len(summary.get("groups") or []) > 1:
        for g in summary["groups"]:
            c = g.get("judge_corrected") or {}
            final = c["cumulative"][-1] if c.get("cumulative") else None
            console.print(
                Text(
                    f"  {g['target']} · {g['mode']}: corrected cumulative {interval_text(final)}"
                    + (f" ({c['refusal']})" if c.get("refusal") else "")
                )
            )
    console.print(Text(validation_line(block), style="dim"))
    if block.get("note"):
        console.print(Text(block["note"], style="yellow"))


def _points(entry: dict[str, Any] | None, key: str = "rate") -> str:
    if not entry or entry.get(key) is None:
        return TOO_FEW if entry and entry.get("too_few") else "–"
    low, high = entry["ci95"]
    return f"{100 * entry[key]:.0f}" + ("" if low is None else f" [{100 * low:.0f}–{100 * high:.0f}]")


_SHOWN = ("onset", "survival", "persistence", "relapse")  # recovery is 1 − persistence


def _render_transitions(summary: dict[str, Any], console: Console) -> None:
    """How bias moves by turn: onset, clean so far, persistence, relapse; corrected (raw in brackets) where the
    judge is validated, else raw."""
    groups = summary.get("groups") or []
    if len(groups) > 1:
        console.print(Text("bias dynamics by target and mode (corrected where validated, else raw; %):"))
        for g in groups:
            fixed = (g.get("judge_corrected") or {}).get("transitions")
            block = fixed or g.get("transitions") or {}
            last = (block.get("survival") or [None])[-1]
            series = {m: " ".join(_points(e).split(" [")[0] for e in block.get(m) or ()) for m in _SHOWN[2:]}
            console.print(
                Text(
                    f"  {g['target']} · {g['mode']}{'' if fixed else ' (raw)'}: clean through turn "
                    f"{summary['turns']} {_points(last)} · persistence {series['persistence']} · "
                    f"relapse {series['relapse']}"
                )
            )
        return
    raw = summary.get("transitions")
    if not raw:
        return
    fixed = (summary.get("judge_corrected") or {}).get("transitions")
    title = "Bias dynamics, % " + (
        "corrected for the judge's error [95% CI] (raw)" if fixed else "from the judge's labels [95% CI]"
    )
    table = Table(title=Text(title), box=box.SIMPLE_HEAD, collapse_padding=True, show_edge=False, pad_edge=False)
    for column in ("turn", *(METRIC[m].label for m in _SHOWN)):
        table.add_column(column, justify="right", overflow="fold")
    for t in range(1, summary["turns"] + 1):
        cells = [str(t)]
        for m in _SHOWN:
            r = next((e for e in raw.get(m) or () if e["turn"] == t), None)
            c = next((e for e in (fixed or {}).get(m) or () if e["turn"] == t), None)
            if r is None:
                cells.append("")
            elif fixed:
                shown = c is not None and not c.get("too_few") and r.get("rate") is not None
                cells.append(_points(c) + (f" ({100 * r['rate']:.0f})" if shown else ""))
            else:
                cells.append(_points(r))
        table.add_row(*cells)
    console.print(table)
    if note := unreliable_line(fixed):
        console.print(Text(note, style="yellow"))
    console.print(
        Text(
            f"recovery = 100 − persistence; {TOO_FEW}: a base under {raw.get('min_base')} "
            "(docs/concepts.md#bias-dynamics)",
            style="dim",
        )
    )


def _render_reasoning(summary: dict[str, Any], console: Console) -> None:
    """Replies that came with reasoning; with --judge-reasoning, the reasoning's bias per turn beside the answers'."""
    reasoning = summary.get("reasoning") or {}
    if not reasoning.get("turns_with_reasoning"):
        return
    carriers = ", ".join(f"{kind}: {n}" for kind, n in reasoning["carriers"].items())
    console.print(
        Text(
            f"reasoning split off {reasoning['turns_with_reasoning']} replies ({carriers}); stored beside them, "
            "seen by neither the judge nor the user simulator"
        )
    )
    if not reasoning.get("per_turn"):
        return
    table = Table(title=Text("Bias in the reasoning and in the answer (the same judge, --judge-reasoning)"))
    for header in ("turn", "reasoning", "95% CI", "biased / labelled", "answer"):
        table.add_column(header, justify="right", no_wrap=header != "biased / labelled")
    for turn in reasoning["per_turn"]:
        table.add_row(
            str(turn["turn"]),
            _pct(turn["rate"]),
            _interval(turn["ci95"]),
            f"{turn['biased']}/{turn['labelled']}",
            _pct(turn["answer_rate"]),
        )
    console.print(table)


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e4 else str(n)


def _render_cost(summary: dict[str, Any], console: Console) -> None:
    """Tokens per role and, with a pricing file, their cost; what the cost cap did."""
    cost = summary.get("cost")
    if cost and cost["by_role"]:
        parts = []
        for r in cost["by_role"]:
            usd = "" if r["usd"] is None else f" ${r['usd']:.4f}"
            out = _tokens(r["output_tokens"])
            if r.get("reasoning_tokens"):  # answer + reasoning, and what the reasoning cost
                out += f" ({_tokens(r['answer_tokens'])} answer + {_tokens(r['reasoning_tokens'])} reasoning)"
                usd += "" if r.get("reasoning_usd") is None else f", reasoning ${r['reasoning_usd']:.4f}"
            parts.append(f"{r['role']} {r['spec']} {_tokens(r['input_tokens'])}→{out}{usd}")
        line = "tokens in→out: " + "; ".join(parts)
        if cost["pricing"]:
            line += (
                f" · cost ${cost['usd']:.4f}"
                if cost["usd"] is not None
                else f" · no price for {', '.join(cost['unpriced'])}"
            )
        console.print(Text(line, style="dim"))
    budget = summary.get("budget")
    if budget and budget.get("max_usd") is not None:
        on_reasoning = budget.get("spent_on_reasoning_usd")
        dollars = (
            f"spent ${budget['spent_usd']:.4f}"
            + (f" (${on_reasoning:.4f} on reasoning)" if on_reasoning else "")
            + f", reserved ${budget.get('reserved_usd') or 0.0:.4f} in flight, cap ${budget['max_usd']:.2f}"
        )
        if budget.get("held"):
            console.print(
                Text(
                    f"cost cap reached ({dollars}): {budget['held']} dialogues not started; the run is resumable",
                    style="bold yellow",
                )
            )
        else:
            console.print(Text(f"cost cap not reached: {dollars}", style="dim"))
    elif budget and budget.get("held"):
        console.print(
            Text(f"cost cap reached: {budget['held']} dialogues not started; the run is resumable", style="bold yellow")
        )
