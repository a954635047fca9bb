"""Alternative correct CART tree (canon #6): all features scanned at once, a flat-array tree.

``best_split`` sorts every column with one ``argsort(axis=0)`` and builds the cumulative class counts
of all features together, ``(n - 1, d, C)``, instead of looping over features. The fitted tree is
also stored as flat arrays (feature, threshold, children), and prediction moves every row one level
per iteration. Shapes: ``X (n, d)``, ``y (n,)``, counts ``(n - 1, d, C)``, proba ``(m, C)``.
Test: it must pass every test of the item.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _labels(y, n=None):
    y = np.asarray(y)  # (...,)
    if y.ndim != 1 or (n is not None and len(y) != n):
        raise ValueError("y has the wrong shape")
    if not np.issubdtype(y.dtype, np.integer):
        if not np.issubdtype(y.dtype, np.floating) or np.any(y != np.floor(y)):
            raise ValueError("y must be integer labels")
    y = y.astype(np.int64)
    if np.any(y < 0):
        raise ValueError("y must be non-negative")
    return y


def _X(X):
    X = np.asarray(X, dtype=float)  # (...,)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise ValueError("X must be a finite 2-D array")
    return X


def gini(y):
    y = _labels(y)
    if not len(y):
        raise ValueError("y is empty")
    p = np.bincount(y) / len(y)  # (C,)
    return float(1.0 - p @ p)  # ()


def best_split(X, y, min_samples_leaf=1):
    X = _X(X)
    y = _labels(y, X.shape[0])
    if min_samples_leaf < 1:
        raise ValueError("min_samples_leaf must be >= 1")
    n, d = X.shape
    if n < 2:
        return None
    C = int(y.max()) + 1
    order = np.argsort(X, axis=0, kind="stable")  # (n, d)
    xs = np.take_along_axis(X, order, axis=0)  # (n, d)
    onehot = (y[order][:, :, None] == np.arange(C)).astype(float)  # (n, d, C)
    left = np.cumsum(onehot, axis=0)[:-1]  # (n-1, d, C)
    total = np.bincount(y, minlength=C).astype(float)  # (C,)
    right = total - left  # (n-1, d, C)
    nl = np.arange(1, n, dtype=float)[:, None]  # (n-1, 1)
    nr = n - nl  # (n-1, 1)
    gl = 1 - np.einsum("kdc,kdc->kd", left, left) / nl**2  # (n-1, d)
    gr = 1 - np.einsum("kdc,kdc->kd", right, right) / nr**2  # (n-1, d)
    dec = (1 - total @ total / n**2) - (nl * gl + nr * gr) / n  # (n-1, d)
    valid = (xs[1:] > xs[:-1]) & (nl >= min_samples_leaf) & (nr >= min_samples_leaf)  # (n-1, d)
    if not valid.any():
        return None
    dec = np.where(valid, dec, -np.inf)  # (n-1, d)
    best = dec.max()
    if best <= 1e-12:
        return None
    ks, js = np.nonzero(dec >= best - 1e-12)  # (t,), (t,)
    j = js.min()
    k = ks[js == j].min()  # sorted values increase with k, so the lowest k is the lowest threshold
    lo, hi = xs[k, j], xs[k + 1, j]
    t = 0.5 * lo + 0.5 * hi
    if t >= hi:
        t = lo
    return int(j), float(t), float(dec[k, j])


@dataclass
class Node:
    feature: int | None
    threshold: float | None
    left: "Node | None"
    right: "Node | None"
    value: np.ndarray


class DecisionTreeClassifier:
    def __init__(self, max_depth=None, min_samples_split=2, min_samples_leaf=1):
        if max_depth is not None and max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        if min_samples_split < 2:
            raise ValueError("min_samples_split must be >= 2")
        if min_samples_leaf < 1:
            raise ValueError("min_samples_leaf must be >= 1")
        self.max_depth, self.min_samples_split, self.min_samples_leaf = max_depth, min_samples_split, min_samples_leaf

    def fit(self, X, y):
        X = _X(X)
        y = _labels(y, X.shape[0])
        C = int(y.max()) + 1
        feat, thr, kids, values, depths = [], [], [], [], []

        def build(idx, depth):
            node_id = len(feat)
            feat.append(-1)
            thr.append(0.0)
            kids.append((-1, -1))
            values.append(np.bincount(y[idx], minlength=C))
            depths.append(depth)
            can = (self.max_depth is None or depth < self.max_depth) and len(idx) >= self.min_samples_split
            split = best_split(X[idx], y[idx], self.min_samples_leaf) if can else None
            if split is not None:
                j, t, _ = split
                mask = X[idx, j] <= t  # (r,)
                feat[node_id], thr[node_id] = j, t
                kids[node_id] = (build(idx[mask], depth + 1), build(idx[~mask], depth + 1))
            return node_id

        build(np.arange(len(y)), 0)
        self._feat = np.array(feat)  # (N,)
        self._thr = np.array(thr)  # (N,)
        self._kids = np.array(kids)  # (N, 2)
        self._values = np.array(values)  # (N, C)
        leaves = self._feat < 0  # (N,)
        self.n_leaves_ = int(leaves.sum())
        self.depth_ = int(max(d for d, leaf in zip(depths, leaves) if leaf))

        def node(i):
            if feat[i] < 0:
                return Node(None, None, None, None, values[i])
            return Node(feat[i], thr[i], node(kids[i][0]), node(kids[i][1]), values[i])

        self.root_ = node(0)
        self._d = X.shape[1]
        return self

    def predict_proba(self, X):
        if not hasattr(self, "_feat"):
            raise RuntimeError("fit first")
        X = _X(X)
        if X.shape[1] != self._d:
            raise ValueError("X has the wrong width")
        at = np.zeros(len(X), dtype=np.int64)  # (m,)
        for _ in range(self.depth_):
            f = self._feat[at]  # (m,)
            inner = f >= 0
            go_right = X[np.arange(len(X)), np.maximum(f, 0)] > self._thr[at]  # (m,)
            at = np.where(inner, self._kids[at, go_right.astype(int)], at)  # (m,)
        v = self._values[at].astype(float)  # (m, C)
        return v / v.sum(axis=1, keepdims=True)  # (m, C)

    def predict(self, X):
        return self.predict_proba(X).argmax(axis=1).astype(np.int64)  # (m,)
