"""GAE written differently (alternative for #52): truncation folded into the reward, a functional scan.

A time-limit cut after step ``t`` is rewritten as a termination whose reward already contains the
bootstrap, ``r_t + gamma * V(s_{t+1})``; then every episode end is a plain ``done``. Each row is scanned
right to left with ``itertools.accumulate`` over ``(delta_t, carry_t)`` pairs instead of an index loop.
Shapes: ``T`` steps, ``N`` rows.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def _unit(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not 0 <= x <= 1:
        raise ValueError(f"{name} must lie in [0, 1], got {x!r}")
    return float(x)


def _arr(x, name, shape=None, flags=False):
    a = np.array(x, dtype=np.float64)                                       # (N, T) | (T,)
    if a.ndim not in (1, 2) or a.shape[-1] == 0:
        raise ValueError(f"{name} has a bad shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"{name} shape {a.shape} != {shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite")
    if flags and not np.isin(a, (0.0, 1.0)).all():
        raise ValueError(f"{name} must be 0/1 flags")
    return a


def compute_gae(rewards, values, dones, last_value, gamma=0.99, lam=0.95, *, truncated=None,
                truncated_values=None):
    """Same contract as the reference."""
    gamma, lam = _unit(gamma, "gamma"), _unit(lam, "lam")
    r = _arr(rewards, "rewards")                                            # (N, T) | (T,)
    v = _arr(values, "values", r.shape)                                     # (N, T) | (T,)
    d = _arr(dones, "dones", r.shape, flags=True)                           # (N, T) | (T,)
    lv = np.array(last_value, dtype=np.float64)                             # (N,) | ()
    if lv.shape != (r.shape[:1] if r.ndim == 2 else ()) or not np.isfinite(lv).all():
        raise ValueError(f"last_value has a bad shape {lv.shape} or is not finite")
    if truncated is not None:
        c = _arr(truncated, "truncated", r.shape, flags=True)               # (N, T) | (T,)
        if (c * d).any():
            raise ValueError("truncated and dones both set at one step")
        if c.any():
            if truncated_values is None:
                raise ValueError("truncated_values needed when truncated is set")
            tv = np.array(truncated_values, dtype=np.float64)               # (N, T) | (T,)
            if tv.shape != r.shape:
                raise ValueError("truncated_values shape mismatch")
            tv = np.where(c > 0, tv, 0.0)                                   # (N, T) | (T,)
            if not np.isfinite(tv).all():
                raise ValueError("truncated_values must be finite")
            r = r + gamma * tv
            d = d + c
    rows_r = np.atleast_2d(r)                                               # (N, T)
    rows_v = np.atleast_2d(v)                                               # (N, T)
    rows_d = np.atleast_2d(d)                                               # (N, T)
    tail = np.atleast_1d(lv)                                                # (N,)
    out = []
    for rr, vv, dd, last in zip(rows_r, rows_v, rows_d, tail):
        nxt = np.append(vv[1:], last)                                       # (T,)
        keep = 1.0 - dd
        delta = rr + gamma * keep * nxt - vv
        pairs = zip(delta[::-1], (gamma * lam * keep)[::-1])
        scan = itertools.accumulate(pairs, lambda acc, p: (p[0] + p[1] * acc[0], 0.0), initial=(0.0, 0.0))
        out.append([a for a, _ in scan][1:][::-1])
    adv = np.array(out).reshape(np.shape(v))                                # (N, T) | (T,)
    return adv, adv + v
