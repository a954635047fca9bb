"""Byte-level byte-pair encoding: train a merge table on a text, encode and ...

Plan: start from the 256 byte tokens, so any text is encodable. Training repeatedly counts adjacent
pairs of the current id sequence and fuses the most frequent one (ties: first occurrence) into a new
id. Encoding replays the merges: among the pairs present, apply the one learned earliest (lowest
rank), until none is left. Decoding concatenates the byte strings and decodes UTF-8 with replacement.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from itertools import pairwise


def get_pair_counts(
    ids: Sequence[int], counts: dict[tuple[int, int], int] | None = None
) -> dict[tuple[int, int], int]:
    """Count each adjacent pair ``(ids[k], ids[k + 1])`` (insertion order = first occurrence)."""
    counts = {} if counts is None else counts
    for pair in pairwise(ids):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair`` in ``ids`` by ``new_id``, left to right."""
    out = []
    i = 0
    n = len(ids)
    while i < n:
        if i + 1 < n and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class BPETokenizer:
    """A byte-level BPE tokenizer with ``merges {(a, b): new_id}`` and ``vocab {id: bytes}``."""

    def __init__(self) -> None:
        """An untrained tokenizer: no merges, the 256 single-byte tokens."""
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}

    def train(self, text: str, vocab_size: int) -> None:
        """Learn up to ``vocab_size - 256`` merges on ``text``, replacing any previous training."""
        self.__init__()
        ids = list(text.encode("utf-8"))
        for new_id in range(256, vocab_size):
            counts = get_pair_counts(ids)
            if not counts:
                break
            best = max(counts, key=counts.get)  # first of the most frequent pairs
            if counts[best] < 2:
                break
            ids = merge(ids, best, new_id)
            self.merges[best] = new_id
            self.vocab[new_id] = self.vocab[best[0]] + self.vocab[best[1]]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: UTF-8 bytes, then the present pair of lowest rank merged repeatedly."""
        ids = list(text.encode("utf-8"))
        while len(ids) >= 2:
            pairs = get_pair_counts(ids)
            best = min(pairs, key=lambda p: self.merges.get(p, float("inf")))
            if best not in self.merges:
                break
            ids = merge(ids, best, self.merges[best])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Concatenate the byte strings of ``ids`` and decode as UTF-8 with ``errors="replace"``."""
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")
