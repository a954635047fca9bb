"""Alternative RAG pipeline (#46): the same contract, written differently.

Differences from the reference: buckets and signs come from ``blake2b`` (8-byte digest; bucket from
the integer mod dim, sign from its lowest bit after the division) instead of MD5; term frequencies are
counted with ``collections.Counter`` and written row by row; chunking is a ``while`` loop; cosine is
computed by normalising at search time; the prompt wording differs.
Shape letters: ``n`` chunks, ``dim`` buckets, ``k``. Test: all reference tests pass.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np


def tokenize(text):
    """Lowercase alphanumeric runs."""
    return re.findall(r"[a-z0-9]+", text.lower())


def _validate(chunk_size, overlap):
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be positive")
    if overlap < 0 or overlap >= chunk_size:
        raise ValueError(f"overlap={overlap} must satisfy 0 <= overlap < chunk_size")


def chunk_text(text, chunk_size=100, overlap=20):
    """Overlapping word windows."""
    _validate(chunk_size, overlap)
    words, out, start = text.split(), [], 0
    while words:
        out.append(" ".join(words[start : start + chunk_size]))
        if start + chunk_size >= len(words):
            break
        start += chunk_size - overlap
    return out


class HashingEmbedder:
    """blake2b feature hashing."""

    def __init__(self, dim=512, ngram_range=(1, 1)):
        if dim < 1:
            raise ValueError(f"dim={dim} must be >= 1")
        lo, hi = ngram_range
        if lo < 1 or hi < lo:
            raise ValueError(f"bad ngram_range {ngram_range}")
        self.dim, self.ngram_range = dim, (lo, hi)

    def _slot(self, term):
        h = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "big")
        return h % self.dim, (1.0 if (h // self.dim) % 2 == 0 else -1.0)

    def embed(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float64)                   # (n, dim)
        lo, hi = self.ngram_range
        for r, text in enumerate(texts):
            toks = tokenize(text)
            grams = Counter(" ".join(toks[i : i + n]) for n in range(lo, hi + 1) for i in range(len(toks) - n + 1))
            for term, count in grams.items():
                slot, sign = self._slot(term)
                out[r, slot] += sign * count
            norm = np.sqrt(out[r] @ out[r])
            if norm > 0:
                out[r] /= norm
        return out.astype(np.float32)                                              # (n, dim)


@dataclass(frozen=True)
class Chunk:
    doc_id: str
    chunk_index: int
    text: str


class VectorStore:
    """Cosine search, normalising at query time."""

    def __init__(self, embedder):
        self.embedder, self.items, self.vecs = embedder, [], []

    def add(self, chunks):
        if chunks:
            self.vecs.extend(self.embedder.embed([c.text for c in chunks]))
            self.items.extend(chunks)

    def search(self, query, k):
        if k < 1:
            raise ValueError(f"k={k} must be >= 1")
        if not self.items:
            return []
        E = np.stack(self.vecs).astype(np.float64)                                 # (n, dim)
        q = self.embedder.embed([query])[0].astype(np.float64)                     # (dim,)
        denom = np.linalg.norm(E, axis=1) * np.linalg.norm(q)                      # (n,)
        cos = np.divide(E @ q, denom, out=np.zeros(len(E)), where=denom > 0)       # (n,)
        ranked = sorted(range(len(cos)), key=lambda i: (-cos[i], i))[:k]
        return [(self.items[i], float(cos[i])) for i in ranked]


class RAGPipeline:
    """Chunk, embed, retrieve, prompt, generate."""

    def __init__(self, embedder=None, *, chunk_size=100, overlap=20, k=3, generate_fn=None):
        _validate(chunk_size, overlap)
        if k < 1:
            raise ValueError(f"k={k} must be >= 1")
        self.embedder = embedder or HashingEmbedder()
        self.chunk_size, self.overlap, self.k, self.generate_fn = chunk_size, overlap, k, generate_fn
        self.store, self.seen = VectorStore(self.embedder), set()

    def add_documents(self, docs):
        clash = [d for d in docs if d in self.seen]
        if clash:
            raise ValueError(f"duplicate doc_id {clash[0]!r}")
        new = []
        for doc_id, text in docs.items():
            new += [Chunk(doc_id, i, c) for i, c in enumerate(chunk_text(text, self.chunk_size, self.overlap))]
        self.store.add(new)
        self.seen |= set(docs)
        return len(new)

    def retrieve(self, query, k=None):
        return self.store.search(query, self.k if k is None else k)

    def build_prompt(self, query, retrieved):
        lines = ["Use the numbered passages below to answer; cite them like [1]."]
        lines += [f"[{i}] ({c.doc_id}) {c.text}" for i, (c, _) in enumerate(retrieved, 1)]
        lines.append(f"Question: {query}")
        return "\n".join(lines)

    def answer(self, query):
        hits = self.retrieve(query)
        prompt = self.build_prompt(query, hits)
        if self.generate_fn is None:
            q = set(tokenize(query))
            sentences = [s for c, _ in hits for s in re.split(r"(?<=[.!?])\s+", c.text)]
            text = max(sentences, key=lambda s: len(q & set(tokenize(s))), default="")
        else:
            text = self.generate_fn(prompt)
        return {"answer": text, "prompt": prompt, "sources": [c.doc_id for c, _ in hits],
                "scores": [s for _, s in hits]}
