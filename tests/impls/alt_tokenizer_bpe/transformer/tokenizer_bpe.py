"""Alternative correct byte-level BPE (item #24), written differently from the reference.

Pairs are counted with ``collections.Counter`` over ``zip(ids, ids[1:])`` (insertion-ordered, so
``most_common(1)`` returns the first of tied pairs); ``merge`` jumps between occurrences of the first
id with ``list.index``; encoding applies every merge once in rank order over the whole sequence
(equivalent to "lowest-ranked present pair first", since a merge only creates pairs of higher rank);
decoding fills a ``bytearray``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def get_pair_counts(
    ids: Sequence[int], counts: dict[tuple[int, int], int] | None = None
) -> dict[tuple[int, int], int]:
    """Adjacent-pair counts in order of first occurrence; adds into ``counts`` when given."""
    seq = list(ids)
    fresh = Counter(zip(seq, seq[1:]))
    if counts is None:
        return dict(fresh)
    for pair, n in fresh.items():
        counts[pair] = counts.get(pair, 0) + n
    return counts


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Left-to-right, non-overlapping replacement of ``pair`` by ``new_id``."""
    seq = list(ids)
    a, b = pair
    out: list[int] = []
    pos = 0
    while True:
        try:
            hit = seq.index(a, pos)
        except ValueError:
            out.extend(seq[pos:])
            return out
        out.extend(seq[pos:hit])
        if hit + 1 < len(seq) and seq[hit + 1] == b:
            out.append(new_id)
            pos = hit + 2
        else:
            out.append(a)
            pos = hit + 1


class BPETokenizer:
    """Byte-level BPE with ``merges`` (insertion order = rank) and ``vocab`` (id -> bytes)."""

    def __init__(self) -> None:
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {b: bytes((b,)) for b in range(256)}

    def train(self, text: str, vocab_size: int) -> None:
        if not isinstance(text, str):
            raise ValueError("text must be of type str")
        if type(vocab_size) is not int or vocab_size < 256:
            raise ValueError(f"vocab_size {vocab_size!r} is below 256 or not an int")
        seq = list(text.encode())
        merges: dict[tuple[int, int], int] = {}
        pieces = [bytes((b,)) for b in range(256)]
        while len(pieces) < vocab_size and len(seq) > 1:
            (pair, n), = Counter(zip(seq, seq[1:])).most_common(1)
            if n < 2:
                break
            merges[pair] = len(pieces)
            seq = merge(seq, pair, len(pieces))
            pieces.append(pieces[pair[0]] + pieces[pair[1]])
        self.merges = merges
        self.vocab = dict(enumerate(pieces))

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError("text must be of type str")
        seq = list(text.encode())
        for pair, new_id in self.merges.items():
            if len(seq) < 2:
                break
            seq = merge(seq, pair, new_id)
        return seq

    def decode(self, ids: Sequence[int]) -> str:
        buf = bytearray()
        for i in ids:
            piece = self.vocab.get(i) if type(i) is int else None
            if piece is None:
                raise ValueError(f"ids contains unknown token id {i!r}")
            buf += piece
        return buf.decode("utf-8", errors="replace")
