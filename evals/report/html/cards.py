"""The summary cards at the top of the page: the figures report.md's sample line and sections give, at a glance."""

from __future__ import annotations

from evals.report.data import ReportData
from evals.report.html.sections import e


def card_values(report: ReportData) -> list[tuple[str, str, str]]:
    """(card id, big figure, small print) for dialogues, replies labelled, unparsed, unfinished, cost, judge
    validation."""
    dialogues = report.dataset.dialogues
    labelled = sum(r.n_labelled for r in report.bias)
    unparsed = sum(r.n_unparsed for r in report.bias)
    replies = sum(len(d.turns) for d in dialogues)
    unfinished = sum(d.status != "finished" for d in dialogues)
    failed = sum(d.status == "failed" for d in dialogues)
    groups = len(report.bias)
    return [
        ("dialogues", str(len(dialogues)), f"in {len(report.dataset.runs)} run(s), {groups} target × mode group(s)"),
        ("labelled", str(labelled), f"of {replies} replies"),
        ("unparsed", str(unparsed), "excluded from every rate, never guessed"),
        ("unfinished", str(unfinished), f"{failed} failed" if unfinished else "every dialogue finished"),
        ("cost", *_cost(report)),
        ("validation", *_validation(report)),
    ]


def _cost(report: ReportData) -> tuple[str, str]:
    usage = [u for _, u in report.usage if u.get("by_role")]
    if not usage:
        return "–", "no token counts stored"
    tokens = sum(u["input_tokens"] + u["output_tokens"] for u in usage)
    prices = [u["usd"] for u in usage]
    if all(p is not None for p in prices):
        return f"${sum(prices):,.4f}", f"{tokens:,} tokens (upper bound: cached replies count)"
    return f"{tokens:,}", "tokens; no price for every model (see Tokens and cost)"


def _validation(report: ReportData) -> tuple[str, str]:
    entries = [entry for _, entry in report.validations]
    if not entries:
        return "–", "not looked up"
    used = [entry["used"] for entry in entries if entry.get("used")]
    done = [entry["validation"] for entry in entries if entry.get("validation")]
    if used and (not done or used[0].get("kind") != "pairs"):  # the validation the corrected rates use
        first = used[0]
        return (
            f"{len(used)} of {len(entries)}",
            f"runs' judges validated; sensitivity {first['sensitivity']['value']:.2f}, "
            f"specificity {first['specificity']['value']:.2f} on {first['n']} items",
        )
    if not done:
        return "unvalidated", f"no run's judge validated ({len(entries)} run(s)); see Judge validation"
    best = done[0]
    acc = "–" if best["accuracy"] is None else f"{100 * best['accuracy']:.0f}%"
    return f"{len(done)} of {len(entries)}", f"runs' judges validated; accuracy {acc} on {best['n_items']} items"


CARD_LABELS = {
    "dialogues": "Dialogues",
    "labelled": "Replies labelled",
    "unparsed": "Unparsed labels",
    "unfinished": "Did not finish",
    "cost": "Cost",
    "validation": "Judge validation",
}


def cards_html(report: ReportData) -> str:
    cards = "".join(
        f'<div class="card" id="card-{e(key)}"><div class="card-label">{e(CARD_LABELS[key])}</div>'
        f'<div class="card-value{"" if any(c.isdigit() for c in value) or value == "–" else " word"}">{e(value)}</div>'
        f'<div class="card-note">{e(note)}</div></div>'
        for key, value, note in card_values(report)
    )
    return f'<section class="cards" aria-label="summary">{cards}</section>'
