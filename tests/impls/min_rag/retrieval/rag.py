"""A retrieval-augmented generation (RAG) pipeline from the standard library and NumPy (canon ...

Plan: overlapping word windows as chunks; signed feature hashing of word n-grams as the embedding,
using a stable hash (md5) instead of Python's hash(), because hash() of str is salted per process and
would scatter the same word into different buckets across runs; unit rows so cosine = dot product;
exact top-k; a prompt of numbered context blocks; a default extractive "generator".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and return its runs of ``[a-z0-9]`` characters, in order."""
    return re.findall(r"[a-z0-9]+", text.lower())


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
    words = text.split()
    step = chunk_size - overlap
    chunks: list[str] = []
    for start in range(0, len(words), step):
        chunks.append(" ".join(words[start:start + chunk_size]))
        if start + chunk_size >= len(words):
            break
    return chunks


class HashingEmbedder:
    """Signed term-frequency feature hashing (the "hashing trick") with L2-normalised rows.

    Source: Weinberger et al., "Feature Hashing for Large Scale Multitask Learning", ICML 2009 (signed
    hashing); the stable-hash requirement is the subtle point of the module docstring.
    """

    def __init__(self, dim: int = 512, ngram_range: tuple[int, int] = (1, 1)) -> None:
        """Args:
            dim: number of buckets, ``>= 1``.
            ngram_range: ``(lo, hi)`` word n-gram sizes to hash, ``1 <= lo <= hi``.

        Raises:
            ValueError: ``dim < 1``; ``ngram_range`` not a pair with ``1 <= lo <= hi``.
        """
        self.dim = dim
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))

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
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        lo, hi = self.ngram_range
        for row, text in enumerate(texts):
            toks = tokenize(text)
            for n in range(lo, hi + 1):
                for j in range(len(toks) - n + 1):
                    h = int.from_bytes(hashlib.md5(" ".join(toks[j:j + n]).encode("utf-8")).digest()[:8], "little")
                    sign = 1.0 if (h >> 63) & 1 == 0 else -1.0
                    out[row, h % self.dim] += sign
            norm = np.linalg.norm(out[row])
            if norm > 0:
                out[row] /= norm
        return out.astype(np.float32)


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
        self.vectors = np.zeros((0, embedder.dim), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.chunks)

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Embed and append ``chunks`` (insertion order is the tie-break order of :meth:`search`)."""
        chunks = list(chunks)
        if not chunks:
            return
        self.vectors = np.concatenate([self.vectors, self.embedder.embed([c.text for c in chunks])], axis=0)
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
        if not self.chunks:
            return []
        q = self.embedder.embed([query])[0]
        sims = self.vectors @ q                                   # (n,)
        order = np.argsort(-sims, kind="stable")[:k]              # stable: ties in insertion order
        return [(self.chunks[i], float(sims[i])) for i in order]


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
        self.embedder = embedder if embedder is not None else HashingEmbedder()
        chunk_text("", chunk_size, overlap)  # same argument rules as chunking
        self.chunk_size, self.overlap, self.k = chunk_size, overlap, k
        self.generate_fn = generate_fn
        self.store = VectorStore(self.embedder)
        self.doc_ids: set[str] = set()

    def add_documents(self, docs: Mapping[str, str]) -> int:
        """Chunk every document and add the chunks; returns how many chunks were added.

        Raises:
            ValueError: a ``doc_id`` already added (checked for all documents before anything is added).
        """
        chunks = []
        for doc_id, text in docs.items():
            for i, piece in enumerate(chunk_text(text, self.chunk_size, self.overlap)):
                chunks.append(Chunk(doc_id, i, piece))
        self.store.add(chunks)
        self.doc_ids.update(docs.keys())
        return len(chunks)

    def retrieve(self, query: str, k: int | None = None) -> list[tuple[Chunk, float]]:
        """Top ``k`` (default ``self.k``) chunks for ``query``, as :meth:`VectorStore.search`."""
        return self.store.search(query, self.k if k is None else k)

    def build_prompt(self, query: str, retrieved: Sequence[tuple[Chunk, float]]) -> str:
        """Numbered context blocks ``[n] (doc_id) text`` in rank order, the question, and the instruction
        to answer from the context and cite the blocks as ``[n]``."""
        blocks = [f"[{n}] ({c.doc_id}) {c.text}" for n, (c, _) in enumerate(retrieved, start=1)]
        return ("Context:\n" + "\n".join(blocks) + f"\n\nQuestion: {query}\n"
                "Answer using only the context above and cite the blocks you use as [n].\nAnswer:")

    def answer(self, query: str) -> dict[str, object]:
        """Retrieve, prompt and generate.

        Returns:
            ``{"answer": str, "prompt": str, "sources": [doc_id, ...] in rank order,
            "scores": [cosine, ...]}``.
        """
        retrieved = self.retrieve(query)
        prompt = self.build_prompt(query, retrieved)
        if self.generate_fn is not None:
            text = self.generate_fn(prompt)
        else:
            text = self._extractive(query, retrieved)
        return {"answer": text, "prompt": prompt, "sources": [c.doc_id for c, _ in retrieved],
                "scores": [s for _, s in retrieved]}

    @staticmethod
    def _extractive(query: str, retrieved: Sequence[tuple[Chunk, float]]) -> str:
        """The retrieved sentence sharing most words with the question, cited by its block number."""
        q = set(tokenize(query))
        best, best_score = "", -1
        for n, (chunk, _) in enumerate(retrieved, start=1):
            for sent in re.split(r"(?<=[.!?])\s+", chunk.text):
                score = len(q & set(tokenize(sent)))
                if score > best_score:
                    best, best_score = f"{sent} [{n}]", score
        return best if best else "I don't know."
