"""CART classification tree with the Gini impurity (canon #6).

Plan: for every feature sort the samples once and sweep the cut from left to right with cumulative
class counts, so each candidate's Gini costs O(C) instead of re-counting both sides, O(n d log n)
per node. Candidate thresholds are midpoints between consecutive distinct values (as sklearn), the
split maximises the parent Gini minus the size-weighted child Gini. Grow recursively until pure,
too small, at max_depth, or no split helps. Tests: XOR needs depth 2, a pure node is a leaf,
min_samples_leaf is honoured, predict_proba rows sum to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def gini(y: np.ndarray) -> float:
    """Gini impurity ``1 - sum_c p_c^2`` of a label vector."""
    p = np.bincount(np.asarray(y)) / len(y)
    return float(1.0 - np.sum(p * p))


def best_split(
    X: np.ndarray, y: np.ndarray, min_samples_leaf: int = 1
) -> tuple[int, float, float] | None:
    """Best Gini split ``(feature, threshold, decrease)``, left is ``x[feature] <= threshold``."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    n, d = X.shape
    C = int(y.max()) + 1
    parent = gini(y)
    onehot = np.eye(C)[y]  # (n, C)
    best: tuple[int, float, float] | None = None
    best_dec = 1e-12  # a split must decrease the impurity by more than this
    for f in range(d):
        order = np.argsort(X[:, f], kind="stable")
        xs = X[order, f]
        left = np.cumsum(onehot[order], axis=0)[:-1]  # (n-1, C) counts left of cut after row i
        right = left[-1] + onehot[order[-1]] - left if n > 1 else left
        nl = np.arange(1, n, dtype=np.float64)  # (n-1,)
        nr = n - nl
        g_l = 1.0 - np.sum((left / nl[:, None]) ** 2, axis=1)
        g_r = 1.0 - np.sum((right / nr[:, None]) ** 2, axis=1)
        dec = parent - (nl * g_l + nr * g_r) / n  # (n-1,)
        valid = (xs[:-1] < xs[1:]) & (nl >= min_samples_leaf) & (nr >= min_samples_leaf)
        for i in np.flatnonzero(valid):  # ascending threshold within the feature
            if dec[i] > best_dec + (1e-12 if best is not None else 0.0):
                best_dec = dec[i]
                a, b = xs[i], xs[i + 1]
                thr = a / 2.0 + b / 2.0  # not (a + b) / 2: that overflows near the float max
                if thr >= b:  # adjacent floats: the midpoint rounds up to b
                    thr = a
                best = (f, float(thr), float(dec[i]))
    return best


@dataclass
class Node:
    """A tree node; a leaf has ``feature``, ``threshold``, ``left`` and ``right`` all None."""
    feature: int | None
    threshold: float | None
    left: Node | None
    right: Node | None
    value: np.ndarray


class DecisionTreeClassifier:
    """CART classifier grown greedily with :func:`best_split`."""

    def __init__(
        self, max_depth: int | None = None, min_samples_split: int = 2, min_samples_leaf: int = 1
    ) -> None:
        """Store the stopping rules."""
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.root_: Node | None = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> DecisionTreeClassifier:
        """Grow the tree on ``X (n, d)`` and labels ``y (n,)``; returns ``self``."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y).astype(np.int64)
        self.n_classes_ = int(y.max()) + 1
        self.depth_ = 0
        self.n_leaves_ = 0
        self.root_ = self._grow(X, y, 0)
        return self

    def _grow(self, X: np.ndarray, y: np.ndarray, depth: int) -> Node:
        value = np.bincount(y, minlength=self.n_classes_).astype(np.int64)
        split = None
        if ((self.max_depth is None or depth < self.max_depth)
                and len(y) >= self.min_samples_split and np.count_nonzero(value) > 1):
            split = best_split(X, y, self.min_samples_leaf)
        if split is None:
            self.depth_ = max(self.depth_, depth)
            self.n_leaves_ += 1
            return Node(None, None, None, None, value)
        f, t, _ = split
        mask = X[:, f] <= t
        left = self._grow(X[mask], y[mask], depth + 1)
        right = self._grow(X[~mask], y[~mask], depth + 1)
        return Node(f, t, left, right, value)

    def _leaf(self, x: np.ndarray) -> Node:
        node = self.root_
        while node.feature is not None:
            node = node.left if x[node.feature] <= node.threshold else node.right
        return node

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class frequencies of each row's leaf, ``(m, C)``."""
        X = np.asarray(X, dtype=np.float64)
        counts = np.array([self._leaf(x).value for x in X], dtype=np.float64).reshape(len(X), -1)
        return counts / counts.sum(axis=1, keepdims=True)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Majority class of each row's leaf (ties -> lower index), int64 ``(m,)``."""
        return np.argmax(self.predict_proba(X), axis=1).astype(np.int64)
