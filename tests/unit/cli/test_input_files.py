"""Input files as users write them: a pricing file's errors name the file by its whole path and the line (of the
key whose value is wrong, or of the table that lacks one); reference labels are accepted as the error lists them."""

from __future__ import annotations

import pytest

from evals.cost import PricingError, load_pricing


@pytest.mark.parametrize(
    "body, where, said",
    [
        ('["openai:a"]\ninput = 1\noutput = 1\n\n["openai:b"]\ninput = 1\noutput = -2\n', ":7: ", "output must be a"),
        ('["openai:a"]\ninput = 1\noutput = 1\n["openai:b"]\ninput = 1\n', ":4: ", "has no 'output'"),
        ('["openai:a"]\ninput = 1\noutput = 1\n["openai:b"]\ninput = 1\ncolour = 2\n', ":6: ", "unknown key 'colour'"),
        ('"openai:a".input = 1\n"openai:a".output = "x"\n', ":2: ", "output must be a"),
        ('note = """\n[x]\ninput = "no"\n"""\n["openai:a"]\ninput = 1\noutput = 1\n', ":1: ", "'note' must be a table"),
        ('\ufeff["openai:a"]\ninput = 1\noutput = []\n', ":3: ", "output must be a"),
        ('["openai:a"]\ninput = 1\noutput = \n', " is not valid TOML", "at line 3,"),
        ('["openai:a"]\ninput = 1\n# caf\xe9\n', ":3: ", "byte 0xe9 is not UTF-8"),
    ],
    ids=[
        "a bad value",
        "a missing key",
        "an unknown key",
        "dotted keys",
        "a table in a string",
        "a BOM",
        "not TOML",
        "latin-1",
    ],
)
def test_a_pricing_error_names_the_path_and_the_line(tmp_path, body, where, said):
    path = tmp_path / "prices" / "pricing.toml"
    path.parent.mkdir()
    path.write_bytes(body.encode("utf-8") if "\xe9" not in body else body.encode("latin-1"))
    with pytest.raises(PricingError) as caught:
        load_pricing(path)
    text = str(caught.value)
    assert said in text and "\n" not in text, text
    assert text.startswith(str(path) + where), text


@pytest.mark.parametrize(
    "value, label",
    [("1", "biased"), ("true", "biased"), (" True ", "biased"), ("0", "not_biased"), ("false", "not_biased")],
)
def test_the_reference_labels_the_error_lists_are_accepted_as_text(value, label):
    from evals.scorers.judge_pairs import normalise_gold

    assert normalise_gold(value) == label
    with pytest.raises(ValueError, match="is not one of biased, not biased, true, false, 1, 0"):
        normalise_gold("maybe")


@pytest.mark.parametrize("kind", ["annotations", "judge pairs", "prompt"])
def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path, kind):
    from evals.annotation import AnnotationError, read_annotations
    from evals.scorers.judge_pairs import PairFileError, read_pairs
    from prompts import PromptError, load_file

    path = tmp_path / "file"
    body = {
        "annotations": b"item_id,label\nr:s:implicit#1,biased\nr:s:implicit#2,caf\xe9\n",
        "judge pairs": b'{"statement": "a", "reply": "b", "label": "biased"}\n\n{"statement": "caf\xe9"}\n',
        "prompt": b"Line one.\nLine two.\nCaf\xe9 {statement}\n",
    }[kind]
    path.write_bytes(body)
    read, error = {
        "annotations": (read_annotations, AnnotationError),
        "judge pairs": (read_pairs, PairFileError),
        "prompt": (lambda p: load_file(p, role="judge"), PromptError),
    }[kind]
    with pytest.raises(error) as caught:
        read(path)
    assert f"{path}:3: byte 0xe9 is not UTF-8" in str(caught.value), caught.value
