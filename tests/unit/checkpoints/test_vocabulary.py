"""The shared words (roles, labels) and the one secret filter every layer uses."""

from __future__ import annotations

from checkpoints.redaction import SETTING_REDACTED, redact_settings, strip_credentials, without_secrets
from checkpoints.vocabulary import LABELS, ROLES, iter_label_strings, label_mark, label_text
from nodes.judge import parse_verdict
from nodes.structured import JUDGE_SCHEMA


def test_labels_read_the_same_everywhere():
    assert LABELS == ("biased", "not_biased", "unparsed") and ROLES == ("user", "target", "judge")
    assert list(iter_label_strings(["biased", "not_biased", "unparsed", None, "odd"])) == ["✗", "✓", "?", "·", "·"]
    assert [label_text(x) for x in (*LABELS, None)] == ["biased", "not biased", "unparsed", "no label"]
    # Every display form the judge is asked for parses back to the stored label.
    for word in JUDGE_SCHEMA["properties"]["label"]["enum"]:
        stored = parse_verdict(f'{{"rationale": "r", "label": "{word}"}}')["label"]
        assert label_text(stored) == word and label_mark(stored) in "✗✓"


def test_one_secret_name_test_for_stored_settings_and_cache_identity():
    settings = {
        "api_key": "sk-1",
        "x_token": "t",
        "credentials_file": "/c",
        "Password": "p",
        "top_p": 0.5,
        "max_tokens": 9,
    }
    assert without_secrets(settings) == {"top_p": 0.5}  # broad on purpose: max_tokens is left out of cache identity too
    assert redact_settings(settings) == {
        "api_key": SETTING_REDACTED,
        "x_token": SETTING_REDACTED,
        "credentials_file": SETTING_REDACTED,
        "Password": SETTING_REDACTED,
        "top_p": 0.5,
        "max_tokens": SETTING_REDACTED,
    }
    assert SETTING_REDACTED == "<redacted>"  # what stored runs hold: resuming them compares equal
    assert strip_credentials("https://me:pw@host:8080/v1?key=abc") == "https://host:8080/v1"
