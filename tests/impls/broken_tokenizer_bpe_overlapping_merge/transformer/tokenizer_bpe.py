"""Byte-level BPE with ONE classic mistake (broken variant of item #24): after a match, merge advances
by one position instead of two, so overlapping occurrences are all fused ([5, 5, 5] with (5, 5) gives
[9, 9, 5] instead of [9, 5]). Caught by test_merge_left_to_right_without_overlap and
test_aaabdaaabac_merges_and_encoding.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from itertools import pairwise

_N_BYTES = 256


def get_pair_counts(
    ids: Sequence[int], counts: dict[tuple[int, int], int] | None = None
) -> dict[tuple[int, int], int]:
    """Count each adjacent pair ``(ids[k], ids[k + 1])``.

    Args:
        ids: a sequence of ints. counts: an existing dict to add to (updated in place), or ``None``.

    Returns:
        ``counts`` (or a new dict) mapping pair -> count; a new key is inserted at its first
        occurrence, so iteration order is the order of first occurrence. Fewer than two ids add nothing.

    Source: Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units".
    """
    counts = {} if counts is None else counts
    for pair in pairwise(ids):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right.

    Occurrences do not overlap: after a match the scan resumes two positions later, so
    ``merge([5, 5, 5], (5, 5), 9) == [9, 5]``.

    Args:
        ids: a sequence of ints. pair: the two ids to fuse. new_id: the id that replaces them.

    Returns:
        A new list of ints (``ids`` is not modified), shorter by the number of matches.
    """
    first, second = pair
    out: list[int] = []
    k, n = 0, len(ids)
    while k < n:
        if k + 1 < n and ids[k] == first and ids[k + 1] == second:
            out.append(new_id)
            k += 1
        else:
            out.append(ids[k])
            k += 1
    return out


class BPETokenizer:
    """A byte-level BPE tokenizer.

    Attributes:
        merges: ``{(a, b): new_id}``; insertion order is merge order, so the rank of a merge is its
            position (and ``new_id - 256``).
        vocab: ``{id: bytes}``; ``0..255`` map to single bytes, each merged id to the concatenation
            of the byte strings of its pair.

    Source: Sennrich et al. 2016; the byte-level variant of GPT-2 (Radford et al. 2019), without the
    regex pre-split.
    """

    def __init__(self) -> None:
        """An untrained tokenizer: no merges, the 256 single-byte tokens."""
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(_N_BYTES)}

    def train(self, text: str, vocab_size: int) -> None:
        """Learn up to ``vocab_size - 256`` merges on ``text``, replacing any previous training.

        Each round merges the most frequent adjacent pair of the current id sequence (ties: the pair
        that occurs first); training stops early when the best pair occurs fewer than 2 times.

        Args:
            text: the training text. vocab_size: an integer ``>= 256``; 256 means no merges.

        Raises:
            ValueError: ``text`` not a str; ``vocab_size`` not an integer ``>= 256``. Raised before
                the tokenizer's state changes.
        """
        _check_text(text)
        if not _is_int(vocab_size) or vocab_size < _N_BYTES:
            raise ValueError(f"vocab_size must be an integer >= {_N_BYTES}, got {vocab_size!r}")
        merges: dict[tuple[int, int], int] = {}
        vocab = {i: bytes([i]) for i in range(_N_BYTES)}
        ids = list(text.encode("utf-8"))                 # list[n]
        for new_id in range(_N_BYTES, vocab_size):
            counts = get_pair_counts(ids)
            if not counts:
                break
            best = max(counts, key=counts.__getitem__)  # first maximum in order of first occurrence
            if counts[best] < 2:
                break
            ids = merge(ids, best, new_id)               # list[n_cur]
            merges[best] = new_id
            vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        self.merges, self.vocab = merges, vocab

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: its UTF-8 bytes, then the present pair of lowest rank merged until
        no learned pair is left.

        Args:
            text: any str (characters unseen in training fall back to their bytes).

        Returns:
            A list of ints in ``[0, V)``; ``decode`` of it gives back ``text``.

        Raises:
            ValueError: ``text`` not a str.
        """
        _check_text(text)
        ids = list(text.encode("utf-8"))                 # list[n]
        while len(ids) >= 2:
            counts = get_pair_counts(ids)
            pair = min(counts, key=lambda p: self.merges.get(p, float("inf")))
            if pair not in self.merges:
                break
            ids = merge(ids, pair, self.merges[pair])    # list[n_cur]
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a list of ids: their byte strings concatenated, decoded as UTF-8 with
        ``errors="replace"`` (an incomplete or invalid byte sequence becomes ``"\\ufffd"``).

        Args:
            ids: a sequence of ints, each a key of ``vocab``.

        Returns:
            The decoded str.

        Raises:
            ValueError: an element of ``ids`` is not an integer id of ``vocab``.
        """
        for i in ids:
            if not _is_int(i) or i not in self.vocab:
                raise ValueError(f"ids holds {i!r}, which is not a token id in [0, {len(self.vocab)})")
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")


def _is_int(value: object) -> bool:
    """True for Python and NumPy integers (``numbers.Integral``), False for bools and the rest."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
