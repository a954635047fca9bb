"""HNSW: a hierarchical navigable small-world graph for approximate nearest neighbours (canon item ...

Plan: a multi-layer proximity graph. Each node gets a random top layer ~ floor(-ln U / ln M), so
upper layers are sparse "express lanes"; search descends greedily (beam 1) to layer 0 and runs a
beam search of width ef there. Neighbours are chosen with the diversity heuristic (Alg. 4) instead of
simply the M closest, because that keeps the graph connected across clusters.
"""

from __future__ import annotations

import heapq
import math

import numpy as np


class HNSWIndex:
    """Hierarchical navigable small-world graph over squared L2 distances.

    Attributes:
        d: vector width.
        M: links per node on the upper layers (``2M`` on layer 0).
        ef_construction: beam width while inserting.
        ntotal: number of vectors added; their ids are ``0 .. ntotal - 1`` in insertion order.
        max_level: top layer of the graph (-1 while empty).
        entry_point: id of the node search starts from (-1 while empty).
        levels: ``levels[i]`` is the top layer of node ``i``.
        links: ``links[i][l]`` is the list of neighbour ids of node ``i`` on layer ``l``.

    Source: Malkov & Yashunin, "Efficient and robust approximate nearest neighbor search using
    Hierarchical Navigable Small World graphs", TPAMI 2018, Algorithms 1, 2, 4 and 5.
    """

    def __init__(self, d: int, M: int = 16, ef_construction: int = 100, seed: int = 0) -> None:
        """Empty index.

        Args:
            d: vector width, ``>= 1``.
            M: links per node on the upper layers, ``>= 2`` (the level multiplier ``1 / ln M`` needs M > 1).
            ef_construction: beam width used while inserting, ``>= 1``.
            seed: seeds the generator that draws every node's level.

        Raises:
            ValueError: ``d < 1``, ``M < 2`` or ``ef_construction < 1``.
        """
        self.d, self.M, self.ef_construction = d, M, ef_construction
        self.mL = 1.0 / math.log(M)
        self.rng = np.random.default_rng(seed)
        self.ntotal = 0
        self.max_level = -1
        self.entry_point = -1
        self.levels: list[int] = []
        self.links: list[list[list[int]]] = []
        self.data = np.zeros((0, d), dtype=np.float64)

    def add(self, X: np.ndarray) -> None:
        """Insert the rows of ``X``; they get the ids ``ntotal .. ntotal + n - 1`` in order.

        Args:
            X: ``(n, d)`` finite vectors (stored as float64).

        Raises:
            ValueError: ``X`` not 2-D, width != ``d``, or not finite.
        """
        X = np.asarray(X, dtype=np.float64)
        self.data = np.concatenate([self.data, X.reshape(-1, self.d)], axis=0)
        for _ in range(X.shape[0]):
            self._insert(self.ntotal)
            self.ntotal += 1

    def search(self, Q: np.ndarray, k: int, ef: int = 50) -> tuple[np.ndarray, np.ndarray]:
        """Approximate ``k`` nearest neighbours of every query.

        Args:
            Q: ``(m, d)`` finite queries.
            k: neighbours per query, ``>= 1``; when ``k > ntotal`` the tail is padded.
            ef: beam width on layer 0, ``>= 1`` (``max(ef, k)`` is used).

        Returns:
            ``(D, I)``: ``(m, k)`` float32 squared distances ascending and ``(m, k)`` int64 ids; padding
            is ``(inf, -1)``; an empty index returns only padding.

        Raises:
            ValueError: ``Q`` not 2-D, width != ``d`` or not finite; ``k < 1``; ``ef < 1``.
        """
        m = Q.shape[0]
        D = np.full((m, k), np.inf, dtype=np.float32)
        I = np.full((m, k), -1, dtype=np.int64)
        if self.ntotal == 0:
            return D, I
        for qi, q in enumerate(np.asarray(Q, dtype=np.float64)):
            ep = [(self._dist(q, self.entry_point), self.entry_point)]
            for layer in range(self.max_level, 0, -1):
                ep = self._search_layer(q, ep, 1, layer)
            res = self._search_layer(q, ep, max(ef, k), 0)[:k]
            D[qi, : len(res)] = [d for d, _ in res]
            I[qi, : len(res)] = [i for _, i in res]
        return D, I

    # ---- internals -------------------------------------------------------------------------------
    def _dist(self, q: np.ndarray, i: int) -> float:
        diff = self.data[i] - q
        return float(diff @ diff)

    def _search_layer(self, q: np.ndarray, entries: list[tuple[float, int]], ef: int, layer: int
                      ) -> list[tuple[float, int]]:
        """Beam search (Alg. 2): the ``ef`` closest nodes found, sorted ascending by distance."""
        visited = {i for _, i in entries}
        candidates = list(entries)                       # min-heap on distance
        heapq.heapify(candidates)
        best = [(-d, -i) for d, i in entries]            # max-heap of the current ef best
        heapq.heapify(best)
        while len(best) > ef:
            heapq.heappop(best)
        while candidates:
            d_c, c = heapq.heappop(candidates)
            if d_c > -best[0][0]:
                break
            for e in self.links[c][layer]:
                if e in visited:
                    continue
                visited.add(e)
                d_e = self._dist(q, e)
                if len(best) < ef or d_e < -best[0][0]:
                    heapq.heappush(candidates, (d_e, e))
                    heapq.heappush(best, (-d_e, -e))
                    if len(best) > ef:
                        heapq.heappop(best)
        return sorted((-d, -i) for d, i in best)

    def _select(self, base: np.ndarray, cands: list[tuple[float, int]], M: int) -> list[int]:
        """Neighbour-selection heuristic (Alg. 4): keep ``e`` if it is closer to ``base`` than to every kept one."""
        kept: list[int] = []
        for d_e, e in sorted(cands):
            if len(kept) >= M:
                break
            if all(d_e < self._dist(self.data[e], r) for r in kept):
                kept.append(e)
        return kept

    def _insert(self, i: int) -> None:
        """Alg. 1: draw a level, descend greedily, link on every layer up to the node's level."""
        level = int(-math.log(self.rng.random()) * self.mL)
        self.levels.append(level)
        self.links.append([[] for _ in range(level + 1)])
        if self.entry_point < 0:
            self.entry_point, self.max_level = i, level
            return
        q = self.data[i]
        ep = [(self._dist(q, self.entry_point), self.entry_point)]
        for layer in range(self.max_level, level, -1):
            ep = self._search_layer(q, ep, 1, layer)
        for layer in range(min(level, self.max_level), -1, -1):
            W = self._search_layer(q, ep, self.ef_construction, layer)
            neighbours = self._select(q, W, self.M)
            self.links[i][layer] = list(neighbours)
            m_max = 2 * self.M if layer == 0 else self.M
            for e in neighbours:
                self.links[e][layer].append(i)
                if len(self.links[e][layer]) > m_max:
                    base = self.data[e]
                    cands = [(float((self.data[n] - base) @ (self.data[n] - base)), n) for n in self.links[e][layer]]
                    self.links[e][layer] = self._select(base, cands, m_max)
            ep = W
        if level > self.max_level:
            self.entry_point, self.max_level = i, level
