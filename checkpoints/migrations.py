"""The project's own tables, created by numbered migrations applied whenever a store opens.

Migrations are never edited once released: a change is a new function at the end.
A database that has migrations this code does not know was written by a newer
DyMT-ESB, and opening it stops with a clear error instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

from checkpoints.upgrades import ENV_NO_BACKUP as ENV_NO_BACKUP
from checkpoints.upgrades import SchemaTooNewError as SchemaTooNewError
from checkpoints.upgrades import upgrade

MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = []


def apply_migrations(db: sqlite_utils.Database, *, announce: bool = True) -> None:
    """Bring the schema up to date (checkpoints/upgrades.py); ``announce=False`` for a reader's private copy."""
    upgrade(db, MIGRATIONS, announce=announce)


def migration(fn: Callable[[sqlite_utils.Database], None]) -> Callable[[sqlite_utils.Database], None]:
    """Register a migration; its function name is its identity."""
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_runs(db: sqlite_utils.Database) -> None:
    db.table("runs").create(
        {
            "id": str,
            "created_at": str,
            "ended_at": str,
            "status": str,
            "config": str,
            "prompt_hashes": str,
            "versions": str,
        },
        pk="id",
    )


@migration
def m002_dialogues(db: sqlite_utils.Database) -> None:
    db.table("dialogues").create(
        {
            "thread_id": str,
            "run_id": str,
            "seed_id": str,
            "category": str,
            "statement": str,
            "mode": str,
            "max_turns": int,
            "status": str,
            "stop_reason": str,
            "error": str,
            "started_at": str,
            "ended_at": str,
            "parent_thread_id": str,
            "fork_turn": int,
            "fork_checkpoint_id": str,
            "change": str,
        },
        pk="thread_id",
    )
    db.table("dialogues").create_index(["run_id"])


@migration
def m003_turns(db: sqlite_utils.Database) -> None:
    db.table("turns").create(
        {
            "thread_id": str,
            "idx": int,
            "user_message": str,
            "utterance_type": str,
            "reply": str,
            "user_model": str,
            "target_model": str,
            "latency_user": float,
            "latency_target": float,
            "tokens": str,
        },
        pk=("thread_id", "idx"),
    )


@migration
def m004_labels(db: sqlite_utils.Database) -> None:
    db.table("labels").create(
        {
            "thread_id": str,
            "idx": int,
            "label_set": str,
            "label": str,
            "rationale": str,
            "p_biased": float,
            "judge_raw": str,
            "judge_model": str,
            "latency_judge": float,
            "created_at": str,
        },
        pk=("thread_id", "idx", "label_set"),
    )


# Traces (graph.tracing.tracer): LangSmith-style runs of every graph invocation, and feedback on them.
@migration
def m010_trace_runs(db: sqlite_utils.Database) -> None:
    # id, trace_id, parent_run_id and dotted_order are LangSmith's run ids; run_id is the DyMT
    # run (as in dialogues.run_id). inputs, outputs, metadata, tags and extra hold JSON.
    db.table("trace_runs").create(
        {
            "id": str,
            "trace_id": str,
            "parent_run_id": str,
            "dotted_order": str,
            "run_type": str,
            "name": str,
            "status": str,
            "start_time": str,
            "end_time": str,
            "latency": float,
            "inputs": str,
            "outputs": str,
            "error": str,
            "prompt_tokens": int,
            "completion_tokens": int,
            "total_tokens": int,
            "model": str,
            "run_id": str,
            "thread_id": str,
            "checkpoint_id": str,
            "checkpoint_ns": str,
            "branch_id": str,
            "turn": int,
            "role": str,
            "node": str,
            "step": int,
            "metadata": str,
            "tags": str,
            "extra": str,
        },
        pk="id",
    )
    db.table("trace_runs").create_index(["trace_id"])
    db.table("trace_runs").create_index(["thread_id", "turn"])
    db.table("trace_runs").create_index(["run_id"])


@migration
def m011_trace_feedback(db: sqlite_utils.Database) -> None:
    # Judge verdicts on the target's model call: key "bias", score 1 / 0 / NULL (unparsed).
    db.table("trace_feedback").create(
        {
            "id": str,
            "trace_run_id": str,
            "trace_id": str,
            "thread_id": str,
            "turn": int,
            "key": str,
            "score": float,
            "value": str,
            "comment": str,
            "source_run_id": str,
            "extra": str,
            "created_at": str,
        },
        pk="id",
    )
    db.table("trace_feedback").create_index(["trace_run_id"])
    db.table("trace_feedback").create_index(["thread_id", "turn"])


# Counterfactual branches (graph.running.forking): a branch is a dialogues row pointing at its parent
# (parent_thread_id, fork_turn, fork_checkpoint_id, change); these add named sets of branches.
@migration
def m020_counterfactual_sets(db: sqlite_utils.Database) -> None:
    # A named group of branches made by one change at one turn, for paired comparison
    # (python -m graph.compare --set NAME). change is JSON; run_id is the run the branches belong to.
    db.table("counterfactual_sets").create(
        {
            "name": str,
            "created_at": str,
            "run_id": str,
            "parent_run_id": str,
            "fork_turn": int,
            "change": str,
        },
        pk="name",
    )
    db.table("counterfactual_members").create(
        {"set_name": str, "thread_id": str, "parent_thread_id": str, "added_at": str},
        pk=("set_name", "thread_id"),
    )


@migration
def m021_dialogue_parents(db: sqlite_utils.Database) -> None:
    # The branch tree is a query on parent_thread_id.
    db.table("dialogues").create_index(["parent_thread_id"], if_not_exists=True)


@migration
def m030_label_sets(db: sqlite_utils.Database) -> None:
    # One row per set of post-hoc labels on a run: kind is "bias" (a re-judging), "refusal" or
    # "coherence"; the run's own judge labels ("primary") are described by the run itself.
    db.table("label_sets").create(
        {
            "run_id": str,
            "kind": str,
            "name": str,
            "model": str,
            "model_id": str,
            "prompt": str,
            "prompt_hash": str,
            "content_free_p_yes": float,
            "created_at": str,
        },
        pk=("run_id", "kind", "name"),
    )


@migration
def m031_refusals(db: sqlite_utils.Database) -> None:
    # refused is 1 or 0, and NULL when the classifier's output could not be parsed.
    db.table("refusals").create(
        {
            "thread_id": str,
            "idx": int,
            "classifier": str,
            "refused": int,
            "p_refused": float,
            "rationale": str,
            "raw": str,
            "created_at": str,
        },
        pk=("thread_id", "idx", "classifier"),
    )


@migration
def m032_coherence(db: sqlite_utils.Database) -> None:
    # score is 1..5 (a float: a base model's score is an expectation), NULL when unparsed.
    db.table("coherence").create(
        {
            "thread_id": str,
            "scorer": str,
            "score": float,
            "rationale": str,
            "raw": str,
            "created_at": str,
        },
        pk=("thread_id", "scorer"),
    )


@migration
def m040_response_cache(db: sqlite_utils.Database) -> None:
    # Model replies by request hash, as JSON (never pickle): see checkpoints/cache.py.
    db.table("response_cache").create({"key": str, "spec": str, "value": str, "created_at": str}, pk="key")


@migration
def m041_dialogue_target(db: sqlite_utils.Database) -> None:
    # A run may hold several targets: each dialogue records the target spec it tested.
    db.table("dialogues").add_column("target", str)


@migration
def m050_guard_scores(db: sqlite_utils.Database) -> None:
    db.table("guard_scores").create(
        {
            "thread_id": str,
            "idx": int,
            "side": str,  # "user" (the user message) or "reply" (the target's reply)
            "policy": str,
            "guard_model": str,
            "score": float,  # P(violation), or 1.0 / 0.0 from a bare Yes / No
            "raw": str,
            "created_at": str,
        },
        pk=("thread_id", "idx", "side", "policy", "guard_model"),
    )


@migration
def m060_turn_leakage(db: sqlite_utils.Database) -> None:
    # Seed leakage of each user message (nodes.leakage) and the simulator's redraws.
    db.table("turns").add_column("leakage", float)  # max(containment, n-gram overlap), 0..1
    db.table("turns").add_column("leaked", int)  # 1: the message states the seed (flagged), 0: it does not
    db.table("turns").add_column("user_attempts", int)  # messages drawn for this turn
    db.table("turns").add_column("leakage_detail", str)  # JSON: containment, ngram overlap, rejected drafts
    db.table("turns").add_column(
        "target_attempts", int
    )  # replies drawn (a base-model target's verbatim repeats redrawn)


@migration
def m061_judge_validations(db: sqlite_utils.Database) -> None:
    # A judge (spec + prompt hash) scored against a labelled pairs file by evals.judge; summaries cite it.
    db.table("judge_validations").create(
        {
            "id": int,
            "judge_model": str,
            "prompt_hash": str,
            "file": str,
            "file_sha256": str,
            "n_items": int,  # pairs with a reference label
            "n_compared": int,  # of them, the judge's label parsed
            "accuracy": float,
            "accuracy_low": float,
            "accuracy_high": float,
            "ac1": float,
            "kappa": float,
            "created_at": str,
        },
        pk="id",
    )
    db.table("judge_validations").create_index(["judge_model", "prompt_hash"])


@migration
def m062_trace_streams(db: sqlite_utils.Database) -> None:
    # Compact traces (checkpoints/traces/format.py): one row per trace (graph invocation) with what lists need,
    # and its runs as one compressed stream in chunks. Rows in trace_runs / trace_feedback stay readable.
    db.execute(
        """
        create table trace_index (
            trace_id text primary key, run_id text, thread_id text, branch_id text, name text,
            start_time text, end_time text, latency float, status text, model_calls integer,
            prompt_tokens integer, completion_tokens integer, errors integer, first_turn integer, last_turn integer)
        """
    )
    db.execute("create index trace_index_thread on trace_index (thread_id)")
    db.execute("create index trace_index_run on trace_index (run_id)")
    # A rowid table: chunks of a few KB stay on their page (a WITHOUT ROWID row over ~1 KB spills to overflow pages).
    db.execute("create table trace_chunks (trace_id text not null, seq integer not null, data blob not null)")
    db.execute("create unique index trace_chunks_key on trace_chunks (trace_id, seq)")


_LANGGRAPH_TABLES = {
    # LangGraph's SQLite saver's own schema (langgraph-checkpoint-sqlite 3.1), as WITHOUT ROWID tables: their
    # primary keys (thread, checkpoint and task ids) are then stored once, not again in a separate index.
    "checkpoints": (
        "thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, "
        "parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB, "
        "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)"
    ),
    "writes": (
        "thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, "
        "task_id TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', idx INTEGER NOT NULL, channel TEXT NOT NULL, "
        "type TEXT, value BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
    ),
}


@migration
def m063_langgraph_tables_without_rowid(db: sqlite_utils.Database) -> None:
    # The saver creates its tables only if they do not exist: new files get these; old files are rebuilt.
    for table, columns in _LANGGRAPH_TABLES.items():
        if not db[table].exists():
            db.execute(f"CREATE TABLE {table} ({columns}) WITHOUT ROWID")
            continue
        if "without rowid" in (db[table].schema or "").lower():
            continue
        have = [c.name for c in db[table].columns]
        db.execute(f"CREATE TABLE {table}_compact ({columns}) WITHOUT ROWID")
        db.execute(f"INSERT INTO {table}_compact ({', '.join(have)}) SELECT {', '.join(have)} FROM {table}")
        db.execute(f"DROP TABLE {table}")
        db.execute(f"ALTER TABLE {table}_compact RENAME TO {table}")


@migration
def m064_response_cache_compact(db: sqlite_utils.Database) -> None:
    # The response cache, compact (checkpoints/cache.py): the key as the first 16 bytes of its
    # SHA-256 in a WITHOUT ROWID table (no separate index), the reply JSON deflated against a
    # preset dictionary behind a format byte, the time as Unix seconds. Existing rows are converted.
    from checkpoints.cache_format import compress, stored_key, stored_time

    db.execute("alter table response_cache rename to response_cache_m040")
    db.execute(
        "create table response_cache (key blob primary key not null, spec text, value blob not null, "
        "created_at integer) without rowid"
    )
    rows = db.execute("select key, spec, value, created_at from response_cache_m040")
    while batch := rows.fetchmany(500):
        db.conn.executemany(
            "insert or ignore into response_cache (key, spec, value, created_at) values (?, ?, ?, ?)",
            [
                (
                    stored_key(key) if isinstance(key, str) else key,
                    spec,
                    compress(value) if isinstance(value, str) else value,
                    stored_time(created_at),
                )
                for key, spec, value, created_at in batch
            ],
        )
    db.execute("drop table response_cache_m040")


@migration
def m065_scores(db: sqlite_utils.Database) -> None:
    # One table for every scorer's verdicts (checkpoints/scores.py), replacing labels, refusals,
    # coherence and guard_scores: key says what was scored, scorer who (label set, classifier,
    # scorer, guard model), subject which text ("reply", "user", or the whole "dialogue" at turn 0).
    # value is a word (a label; refusals "yes" / "no"), score a number; NULL where the old column was.
    db.execute(
        """
        create table scores (
            thread_id text, idx integer, key text, scorer text, subject text, value text, score float,
            explanation text, raw text, model text, latency float, created_at text,
            primary key (thread_id, idx, key, scorer, subject))
        """
    )
    db.execute("create index scores_key_scorer on scores (key, scorer)")
    columns = "thread_id, idx, key, scorer, subject, value, score, explanation, raw, model, latency, created_at"
    db.execute(
        f"insert into scores ({columns}) select thread_id, idx, 'bias', label_set, 'reply', label, p_biased, "
        "rationale, judge_raw, judge_model, latency_judge, created_at from labels"
    )
    db.execute(
        f"insert into scores ({columns}) select thread_id, idx, 'refusal', classifier, 'reply', "
        "case when refused is null then null when refused then 'yes' else 'no' end, p_refused, rationale, raw, "
        "null, null, created_at from refusals"
    )
    db.execute(
        f"insert into scores ({columns}) select thread_id, 0, 'coherence', scorer, 'dialogue', null, score, "
        "rationale, raw, null, null, created_at from coherence"
    )
    db.execute(
        f"insert into scores ({columns}) select thread_id, idx, 'guard_' || policy, guard_model, side, null, score, "
        "null, raw, guard_model, null, created_at from guard_scores"
    )
    for table in ("labels", "refusals", "coherence", "guard_scores"):
        db.execute(f"drop table {table}")


@migration
def m066_validation_counts(db: sqlite_utils.Database) -> None:
    # The confusion counts of an evals.judge score (biased = positive), so bias rates can be corrected for the
    # judge's error (evals/judge_error/); NULL on scores recorded before: score the judge again to fill them.
    for column in ("tp", "fp", "fn", "tn"):
        db.table("judge_validations").add_column(column, int)


@migration
def m067_turn_non_reply(db: sqlite_utils.Database) -> None:
    # A target answer that is well-formed but not a (whole) reply, and why (models.answers.NON_REPLY_KINDS:
    # "content filter", "safety block", "empty message", "cut at max_tokens"); NULL for a reply.
    db.table("turns").add_column("non_reply", str)


@migration
def m068_validation_items(db: sqlite_utils.Database) -> None:
    # The items of an evals.judge score as JSON (one object per labelled pair: id, turn, context_turns,
    # context_tokens, category, judge, reference), so a validation knows where in a conversation each item sat
    # (evals/judge_error/drift.py); NULL on scores recorded before: they validate turn 1 only.
    db.table("judge_validations").add_column("items", str)


@migration
def m069_turn_reasoning(db: sqlite_utils.Database) -> None:
    # A thinking target's reasoning, split off its reply (models/reasoning.py), and where it came from ("tags in the
    # text", "reasoning_content field", "thought parts", "reasoning summary"); NULL for a reply without reasoning.
    db.table("turns").add_column("reasoning", str)
    db.table("turns").add_column("reasoning_carrier", str)


@migration
def m070_run_players(db: sqlite_utils.Database) -> None:
    # Who plays a run now (checkpoints/players.py): a row per process playing it, so a run whose player died reads
    # as interrupted, not playing, and deletion refuses a run that plays.
    db.execute(
        "create table run_players (run_id text not null, host text not null, pid integer not null, "
        "started text not null, command text, since text, seen_at real, primary key (run_id, host, pid, started))"
    )


@migration
def m071_response_cache_run(db: sqlite_utils.Database) -> None:
    # The run whose call stored a cached reply (NULL before this, or outside a run): deleting the run deletes them.
    db.execute("alter table response_cache add column run_id text")
    db.execute("create index response_cache_run on response_cache (run_id)")
