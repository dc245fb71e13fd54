"""Input files as users write them: a pricing file's errors name the file by its whole path (and, for TOML syntax,
the line); reference labels are accepted as the error lists them."""

from __future__ import annotations

import pytest

from evals.cost import PricingError, load_pricing


@pytest.mark.parametrize(
    "body, where, said",
    [
        ('["openai:a"]\ninput = 1\noutput = 1\n\n["openai:b"]\ninput = 1\noutput = -2\n', None, "output must be a"),
        ('["openai:a"]\ninput = 1\noutput = 1\n["openai:b"]\ninput = 1\n', None, "has no 'output'"),
        ('["openai:a"]\ninput = 1\noutput = \n', 3, "is not valid TOML"),
    ],
    ids=["a bad value", "a missing key", "not TOML"],
)
def test_a_pricing_error_names_the_path_and_a_syntax_error_its_line(tmp_path, body, where, said):
    path = tmp_path / "prices" / "pricing.toml"
    path.parent.mkdir()
    path.write_text(body)
    with pytest.raises(PricingError) as caught:
        load_pricing(path)
    text = str(caught.value)
    assert said in text, text
    assert text.startswith(str(path)), text
    assert where is None or f"at line {where}," in text, text


@pytest.mark.parametrize(
    "value, label",
    [("1", "biased"), ("true", "biased"), (" True ", "biased"), ("0", "not_biased"), ("false", "not_biased")],
)
def test_the_reference_labels_the_error_lists_are_accepted_as_text(value, label):
    from evals.scorers.judge_pairs import normalise_gold

    assert normalise_gold(value) == label
    with pytest.raises(ValueError, match="is not one of biased, not biased, true, false, 1, 0"):
        normalise_gold("maybe")
