"""A retrieval-augmented generation (RAG) pipeline from the standard library and NumPy (canon item #46).

What it implements: :func:`tokenize`; :func:`chunk_text`, overlapping word windows; :class:`HashingEmbedder`,
term-frequency feature hashing into ``dim`` buckets with a sign bit, rows L2-normalised; :class:`Chunk`;
:class:`VectorStore`, exact cosine search over the chunk embeddings; and :class:`RAGPipeline`, which
chunks documents, retrieves the top ``k`` chunks for a question, builds a prompt of numbered context
blocks that asks for ``[n]`` citations, and answers with a ``generate_fn`` (by default an extractive one
that returns the retrieved sentence sharing the most tokens with the question).

The subtle point: the hash must be stable across processes. Python's ``hash()`` of a string is salted
per process (``PYTHONHASHSEED``), so an index built in one process and queried in another would put
the same word in different buckets and every similarity would be noise. Buckets and signs therefore
come from ``hashlib`` (the first 8 bytes of the MD5 digest of the UTF-8 term). The sign bit makes
colliding terms cancel in expectation instead of piling up, so inner products stay unbiased estimates
of the un-hashed ones. Second: an all-zero row (a query of punctuation only) must stay zero rather
than be divided by its zero norm, which would turn every score into NaN.

Shape letters: ``n`` texts or stored chunks, ``dim`` hash buckets, ``t`` (text, bucket) hits of one
``embed`` call, ``k`` retrieved chunks.

Trade-off: hashing rather than a learned vocabulary because it needs no fitting pass and no stored
vocabulary, and adding documents never changes existing vectors; the price is collisions: with
``dim = 512`` buckets, two given distinct terms share a bucket with probability 1/512, so a chunk of
60 distinct words has about 60 * 59 / 2 / 512 = 3.5 colliding pairs. Retrieval is an exact scan
``E @ q`` instead of an ANN index (#45) because a corpus of a few thousand chunks costs ``n * dim``
multiply-adds, about 1 M, well under a millisecond.

What to test: 250 words with size 100 and overlap 20 give chunks at words 0, 80, 160 of lengths 100,
100, 90; two embedders (and two processes with different ``PYTHONHASHSEED``) agree; rows have unit
norm and a token-free query scores 0 everywhere; on a five-document corpus every question retrieves the
document holding its answer first; check the prompt's markers ``[1]..[k]`` and that ``answer``'s
sources match ``retrieve``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and return its runs of ``[a-z0-9]`` characters, in order."""
    return _TOKEN.findall(text.lower())


def chunk_text(text: str, chunk_size: int = 100, overlap: int = 20) -> list[str]:
    """Split ``text`` into windows of ``chunk_size`` whitespace words that overlap by ``overlap`` words.

    Windows start at words ``0, step, 2 step, ...`` with ``step = chunk_size - overlap``; the last
    window is the first one that reaches the end of the text, so no window lies inside the previous one.
    Words are rejoined with single spaces.

    Args:
        text: any string; ``""`` (or whitespace only) gives ``[]``.
        chunk_size: words per window, ``>= 1``.
        overlap: words shared by consecutive windows, ``0 <= overlap < chunk_size``.

    Returns:
        The list of chunk strings.

    Raises:
        ValueError: ``chunk_size < 1``; ``overlap < 0`` or ``overlap >= chunk_size``.
    """
    _check_chunking(chunk_size, overlap)
    words = text.split()
    step = chunk_size - overlap
    chunks: list[str] = []
    for start in range(0, len(words), step):
        chunks.append(" ".join(words[start : start + chunk_size]))
        if start + chunk_size >= len(words):
            break
    return chunks


class HashingEmbedder:
    """Signed term-frequency feature hashing (the "hashing trick") with L2-normalised rows.

    Every term (word n-gram) goes to one of ``dim`` buckets with a sign of +1 or -1, both chosen by a hash
    of the term; a text's vector adds the signs of its terms per bucket. The vector of a text is the same
    in every Python process (it must not depend on ``PYTHONHASHSEED``).

    Source: Weinberger et al., "Feature Hashing for Large Scale Multitask Learning", ICML 2009 (signed
    hashing).
    """

    def __init__(self, dim: int = 512, ngram_range: tuple[int, int] = (1, 1)) -> None:
        """Args:
            dim: number of buckets, ``>= 1``.
            ngram_range: ``(lo, hi)`` word n-gram sizes to hash, ``1 <= lo <= hi``.

        Raises:
            ValueError: ``dim < 1``; ``ngram_range`` not a pair with ``1 <= lo <= hi``.
        """
        _check_embedder(dim, ngram_range)
        self.dim = int(dim)
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))
        self._cache: dict[str, tuple[int, float]] = {}

    def _bucket(self, term: str) -> tuple[int, float]:
        """``(bucket, sign)`` of ``term``: the low 63 bits pick the bucket, the top bit the sign."""
        import hashlib  # a salted hash() would differ between processes

        hit = self._cache.get(term)
        if hit is None:
            digest = hashlib.md5(term.encode("utf-8"), usedforsecurity=False).digest()
            value = int.from_bytes(digest[:8], "little")
            hit = ((value & (2**63 - 1)) % self.dim, -1.0 if value >> 63 else 1.0)
            self._cache[term] = hit
        return hit

    def _terms(self, text: str) -> list[str]:
        tokens = tokenize(text)
        lo, hi = self.ngram_range
        return [" ".join(tokens[i : i + n]) for n in range(lo, hi + 1) for i in range(len(tokens) - n + 1)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed every text.

        Args:
            texts: a sequence of strings (a bare ``str`` is rejected, as it would embed characters).

        Returns:
            ``(n, dim)`` float32; each row is the signed term-frequency vector divided by its L2 norm,
            or all zeros when the text has no token.

        Raises:
            ValueError: ``texts`` is a ``str`` or holds a non-string.
        """
        _check_texts(texts)
        rows: list[int] = []
        cols: list[int] = []
        signs: list[float] = []
        for row, text in enumerate(texts):
            for term in self._terms(text):
                bucket, sign = self._bucket(term)
                rows.append(row)
                cols.append(bucket)
                signs.append(sign)
        row_idx = np.array(rows, dtype=np.int64)                        # (t,)
        col_idx = np.array(cols, dtype=np.int64)                        # (t,)
        counts = np.zeros((len(texts), self.dim), dtype=np.float64)     # (n, dim)
        np.add.at(counts, (row_idx, col_idx), np.array(signs, dtype=np.float64))  # repeated hits add up
        norms = np.linalg.norm(counts, axis=1, keepdims=True)           # (n, 1)
        unit = counts / np.where(norms > 0.0, norms, 1.0)               # (n, dim)
        return unit.astype(np.float32)                                  # (n, dim)


@dataclass(frozen=True)
class Chunk:
    """One stored passage: its document, its position in that document and its text."""

    doc_id: str
    chunk_index: int
    text: str


class VectorStore:
    """Chunks and their embeddings; exact cosine search (rows are unit vectors, so cosine = dot)."""

    def __init__(self, embedder: HashingEmbedder) -> None:
        """Empty store that embeds with ``embedder``."""
        self.embedder = embedder
        self.chunks: list[Chunk] = []
        self._matrix = np.zeros((0, embedder.dim), dtype=np.float32)    # (n, dim)

    def __len__(self) -> int:
        return len(self.chunks)

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Embed and append ``chunks`` (insertion order is the tie-break order of :meth:`search`)."""
        if not chunks:
            return
        vectors = self.embedder.embed([c.text for c in chunks])         # (n, dim)
        self._matrix = np.concatenate([self._matrix, vectors], axis=0)  # (n_all, dim)
        self.chunks.extend(chunks)

    def search(self, query: str, k: int) -> list[tuple[Chunk, float]]:
        """The ``k`` chunks most similar to ``query``.

        Args:
            query: question text.
            k: ``>= 1``; more than the store holds returns every chunk.

        Returns:
            ``[(chunk, cosine), ...]``, cosine descending, ties in insertion order; ``[]`` when empty.

        Raises:
            ValueError: ``k < 1``.
        """
        _check_k(k)
        if not self.chunks:
            return []
        q = self.embedder.embed([query])[0].astype(np.float64)          # (dim,)
        scores = self._matrix.astype(np.float64) @ q                    # (n,)
        top = np.argsort(-scores, kind="stable")[:k]                    # (k,)
        return [(self.chunks[i], float(scores[i])) for i in top.tolist()]


class RAGPipeline:
    """Chunk, embed, retrieve, prompt, generate.

    Source: Lewis et al., "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", NeurIPS
    2020 (the retrieve-then-generate pattern; here with a hashing retriever and any ``generate_fn``).
    """

    def __init__(self, embedder: HashingEmbedder | None = None, *, chunk_size: int = 100, overlap: int = 20,
                 k: int = 3, generate_fn: Callable[[str], str] | None = None) -> None:
        """Args:
            embedder: defaults to ``HashingEmbedder()``.
            chunk_size, overlap: passed to :func:`chunk_text`.
            k: chunks retrieved per question, ``>= 1``.
            generate_fn: maps the prompt to an answer; ``None`` uses the extractive default.

        Raises:
            ValueError: as :func:`chunk_text` for ``chunk_size``/``overlap``; ``k < 1``.
        """
        _check_chunking(chunk_size, overlap)
        _check_k(k)
        self.embedder = embedder if embedder is not None else HashingEmbedder()
        self.chunk_size = chunk_size
        self.overlap = overlap
        self.k = k
        self.generate_fn = generate_fn
        self.store = VectorStore(self.embedder)
        self._doc_ids: set[str] = set()

    def add_documents(self, docs: Mapping[str, str]) -> int:
        """Chunk every document and add the chunks; returns how many chunks were added.

        Raises:
            ValueError: a ``doc_id`` already added (checked for all documents before anything is added).
        """
        _check_new_documents(docs, self._doc_ids)
        chunks = [Chunk(doc_id, i, piece) for doc_id, text in docs.items()
                  for i, piece in enumerate(chunk_text(text, self.chunk_size, self.overlap))]
        self.store.add(chunks)
        self._doc_ids.update(docs)
        return len(chunks)

    def retrieve(self, query: str, k: int | None = None) -> list[tuple[Chunk, float]]:
        """Top ``k`` (default ``self.k``) chunks for ``query``, as :meth:`VectorStore.search`."""
        return self.store.search(query, self.k if k is None else k)

    def build_prompt(self, query: str, retrieved: Sequence[tuple[Chunk, float]]) -> str:
        """Numbered context blocks ``[n] (doc_id) text`` in rank order, the question, and the instruction
        to answer from the context and cite the blocks as ``[n]``."""
        blocks = [f"[{n}] ({chunk.doc_id}) {chunk.text}" for n, (chunk, _) in enumerate(retrieved, start=1)]
        context = "\n".join(blocks) if blocks else "(no context retrieved)"
        return (f"Context:\n{context}\n\nQuestion: {query}\n\n"
                "Answer using only the context above. Cite the passages you use as [n].")

    def answer(self, query: str) -> dict[str, object]:
        """Retrieve, prompt and generate.

        Without ``generate_fn`` the answer is extractive: it contains the retrieved sentence that shares the
        most words with the question (the reference returns that sentence alone; a citation marker or
        other decoration around it is allowed).

        Returns:
            A dict with at least ``"answer"`` (str), ``"prompt"`` (str, as :meth:`build_prompt`),
            ``"sources"`` (``[doc_id, ...]`` in rank order) and ``"scores"`` (``[cosine, ...]``); extra keys
            are allowed.
        """
        retrieved = self.retrieve(query)
        prompt = self.build_prompt(query, retrieved)
        if self.generate_fn is not None:
            text = self.generate_fn(prompt)
        else:
            text = _extractive_answer(query, retrieved)
        return {"answer": text, "prompt": prompt, "sources": [c.doc_id for c, _ in retrieved],
                "scores": [score for _, score in retrieved]}


def _extractive_answer(query: str, retrieved: Sequence[tuple[Chunk, float]]) -> str:
    """The retrieved sentence sharing the most distinct tokens with ``query`` (earliest wins ties);
    ``""`` when nothing was retrieved."""
    wanted = set(tokenize(query))
    best, best_overlap = "", -1
    for chunk, _ in retrieved:
        for sentence in _SENTENCE_END.split(chunk.text):
            overlap = len(wanted & set(tokenize(sentence)))
            if overlap > best_overlap:
                best, best_overlap = sentence, overlap
    return best


def _check_embedder(dim: int, ngram_range: tuple[int, int]) -> None:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    if (len(ngram_range) != 2 or not all(isinstance(v, (int, np.integer)) for v in ngram_range)
            or not 1 <= ngram_range[0] <= ngram_range[1]):
        raise ValueError(f"ngram_range must be (lo, hi) with 1 <= lo <= hi, got {ngram_range!r}")


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a sequence of strings (wrap a single text in a list)")


def _check_new_documents(docs: Mapping[str, str], known: set[str]) -> None:
    duplicates = sorted(set(docs) & known)
    if duplicates:
        raise ValueError(f"doc_id already in the store: {duplicates}")


def _check_chunking(chunk_size: int, overlap: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, (int, np.integer)) or not 0 <= overlap < chunk_size:
        raise ValueError(f"overlap must be an integer with 0 <= overlap < chunk_size = {chunk_size}, got {overlap!r}")


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
