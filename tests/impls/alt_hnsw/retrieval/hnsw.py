"""Alternative HNSW (#45): the same contract, written differently.

Differences from the reference: the beam of ``_search_layer`` is one sorted Python list maintained with
``bisect.insort`` instead of two heaps; visited nodes are a Python set; the graph is one dict per layer
(``node -> list of neighbours``); neighbours are chosen by the simple rule (Malkov & Yashunin,
Algorithm 3: the M nearest candidates) instead of the heuristic. Levels are drawn one node at a time.
Shape letters: ``n``, ``d``, ``m``, ``k``, ``b``. Test: all reference tests pass.
"""

from __future__ import annotations

import bisect
import math

import numpy as np


class HNSWIndex:
    """HNSW with sorted-list beams and simple neighbour selection."""

    def __init__(self, d, M=16, ef_construction=100, seed=0):
        if M < 2:
            raise ValueError(f"M={M} must be >= 2")
        if ef_construction < 1 or d < 1:
            raise ValueError("ef_construction and d must be >= 1")
        self.d, self.M, self.ef_construction = d, M, ef_construction
        self.rng = np.random.default_rng(seed)
        self.data = np.empty((0, d))                                          # (n, d)
        self.layers: list[dict[int, list[int]]] = []
        self.entry = None
        self.ntotal = 0

    def _d(self, q, ids):
        diff = self.data[ids] - q                                             # (b, d)
        return (diff * diff).sum(axis=1)                                      # (b,)

    def _beam(self, q, entry, ef, layer):
        graph = self.layers[layer]
        seen = {entry}
        beam = [(float(self._d(q, [entry])[0]), entry)]
        frontier = list(beam)
        while frontier:
            dist, node = frontier.pop(0)
            if len(beam) >= ef and dist > beam[-1][0]:
                break
            fresh = [x for x in graph[node] if x not in seen]
            seen.update(fresh)
            if not fresh:
                continue
            for dn, x in zip(self._d(q, fresh).tolist(), fresh):
                if len(beam) < ef or dn < beam[-1][0]:
                    bisect.insort(beam, (dn, x))
                    bisect.insort(frontier, (dn, x))
                    if len(beam) > ef:
                        beam.pop()
        return beam

    def add(self, X):
        X = np.asarray(X, dtype=np.float64)                                   # (n, d)
        if X.ndim != 2 or X.shape[1] != self.d or not np.isfinite(X).all():
            raise ValueError(f"X must be finite with shape (n, {self.d})")
        self.data = np.vstack([self.data, X])                                 # (n_all, d)
        for row in range(X.shape[0]):
            node = self.ntotal
            level = int(-math.log(1.0 - self.rng.random()) / math.log(self.M))
            while len(self.layers) <= level:
                self.layers.append({})
            for lc in range(level + 1):
                self.layers[lc][node] = []
            if self.entry is None:
                self.entry = node
                self.ntotal += 1
                continue
            q = self.data[node]
            ep = self.entry
            entry_level = max(lc for lc in range(len(self.layers)) if self.entry in self.layers[lc])
            for lc in range(entry_level, level, -1):
                ep = self._beam(q, ep, 1, lc)[0][1]
            for lc in range(min(level, entry_level), -1, -1):
                beam = self._beam(q, ep, self.ef_construction, lc)
                chosen = [x for _, x in beam[: self.M]]
                self.layers[lc][node] = chosen
                cap = 2 * self.M if lc == 0 else self.M
                for x in chosen:
                    nbrs = self.layers[lc][x] + [node]
                    if len(nbrs) > cap:
                        keep = np.argsort(self._d(self.data[x], nbrs), kind="stable")[:cap]   # (b,)
                        nbrs = [nbrs[i] for i in keep]
                    self.layers[lc][x] = nbrs
                ep = beam[0][1]
            if level > entry_level:
                self.entry = node
            self.ntotal += 1

    def search(self, Q, k, ef=50):
        Q = np.asarray(Q, dtype=np.float64)                                   # (m, d)
        if Q.ndim != 2 or Q.shape[1] != self.d:
            raise ValueError(f"Q must have shape (m, {self.d})")
        if k < 1:
            raise ValueError(f"k={k} must be >= 1")
        if ef < 1:
            raise ValueError(f"ef={ef} must be >= 1")
        D = np.full((len(Q), k), np.inf, dtype=np.float32)                    # (m, k)
        I = np.full((len(Q), k), -1, dtype=np.int64)                          # (m, k)
        if self.entry is None:
            return D, I                                                       # (m, k), (m, k)
        entry_level = max(lc for lc in range(len(self.layers)) if self.entry in self.layers[lc])
        for r, q in enumerate(Q):
            ep = self.entry
            for lc in range(entry_level, 0, -1):
                ep = self._beam(q, ep, 1, lc)[0][1]
            best = self._beam(q, ep, max(ef, k), 0)[:k]
            D[r, : len(best)] = [b[0] for b in best]
            I[r, : len(best)] = [b[1] for b in best]
        return D, I                                                           # (m, k), (m, k)
