"""The page's word codes: any text comes back exactly, frequent words cost one byte, rare ones are spelled out."""

from evals.report.html.wordcode import ONE, TWO, Coder, word_list


def test_any_text_comes_back_exactly():
    texts = [
        '{"r":"The cat sat, the cat ran.\\n<script>alert(1)</script>"}',
        "naïve café — 日本語 😀 once",
        "",
        " \t\r\n",
    ]
    coder = Coder(word_list(texts))
    for text in texts:
        assert coder.decode(coder.encode(text)) == text


def test_frequent_words_cost_one_byte_and_words_seen_once_are_spelled_out():
    words = word_list(["the cat and the dog and the bird", "unique"])
    assert words.index(" the") < 3 and " cat" not in words and "unique" not in words and set("unique") <= set(words)
    coder = Coder(words)
    assert len(coder.encode(" the")) == 1 and len(coder.encode(" cat")) == 4


def test_codes_of_two_and_three_bytes_round_trip():
    many = [
        f" w{i:05d}".replace("0", "a")
        .replace("1", "b")
        .replace("2", "c")
        .replace("3", "d")
        .replace("4", "e")
        .replace("5", "f")
        .replace("6", "g")
        .replace("7", "h")
        .replace("8", "i")
        .replace("9", "j")
        for i in range(ONE + TWO + 50)
    ]
    text = "".join(many * 2)
    coder = Coder(word_list([text]))
    assert len(coder.words) > ONE + TWO  # some words need three bytes
    data = coder.encode(text)
    assert coder.decode(data) == text and max(data) >= 224
