"""Words as numbers before gzip: the page's dialogue text as byte codes into one shared word list.

gzip (the only codec browsers decode natively, with deflate) finds repeats within 32 KB and
spends about 20 bits on each repeated word; numbering the words of the whole page once (most
frequent first) and writing each as a one- or two-byte code lets gzip's Huffman coding price a
word by its frequency instead. English prose comes out a sixth to a fifth smaller (the licence
texts in /usr/share/common-licenses: ×3.6 by gzip alone, ×4.5 with codes; ``python -m benchmarks page``
prints both ratios).

A token is a word with its leading space (`` ?[A-Za-z]+``) or any other single character. Words
seen once are spelled out character by character, so the list holds every character of the text
and each word seen at least twice. Code of token number ``i``: ``i`` below 192 is one byte;
below 192 + 32 × 256 two bytes, 192 + high byte, low byte; beyond, three bytes from 224.
page.js's ``detokenise`` reverses it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

TOKEN = re.compile(r" ?[A-Za-z]+|[\s\S]")
ONE, TWO, THREE = 192, 32 * 256, 32 * 256 * 256  # how many tokens get one, two or three bytes


def word_list(texts: Iterable[str]) -> list[str]:
    """Every token worth a number, most frequent first: each word seen twice or more and every character."""
    words: Counter[str] = Counter()
    for text in texts:
        words.update(TOKEN.findall(text))
    counts: Counter[str] = Counter()
    for token, n in words.items():
        if n > 1 or len(token) == 1:
            counts[token] += n
        else:
            for ch in token:
                counts[ch] += 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    room = ONE + TWO + THREE
    if len(ranked) > room:  # keep every character; the rarest words are spelled out instead
        chars = [t for t in ranked if len(t) == 1]
        ranked = [t for t in ranked if len(t) > 1][: room - len(chars)] + chars
    return ranked


def _code(i: int) -> bytes:
    if i < ONE:
        return bytes((i,))
    if i < ONE + TWO:
        i -= ONE
        return bytes((ONE + (i >> 8), i & 255))
    i -= ONE + TWO
    return bytes((224 + (i >> 16), (i >> 8) & 255, i & 255))


class Coder:
    """Text to codes with one word list (build it with :func:`word_list` over all the text it will code)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.codes = {t: _code(i) for i, t in enumerate(self.words)}

    def encode(self, text: str) -> bytes:
        codes = self.codes

        def code(token: str) -> bytes:
            found = codes.get(token)
            return found if found is not None else b"".join(codes[ch] for ch in token)

        return b"".join(map(code, TOKEN.findall(text)))

    def decode(self, data: bytes) -> str:
        """The text back (what page.js's ``detokenise`` does in the browser)."""
        out, i, n = [], 0, len(data)
        while i < n:
            c = data[i]
            if c < ONE:
                k, i = c, i + 1
            elif c < 224:
                k, i = ONE + ((c - ONE) << 8 | data[i + 1]), i + 2
            else:
                k, i = ONE + TWO + ((c - 224) << 16 | data[i + 1] << 8 | data[i + 2]), i + 3
            out.append(self.words[k])
        return "".join(out)
