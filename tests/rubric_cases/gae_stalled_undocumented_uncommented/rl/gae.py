from __future__ import annotations

import math

import numpy as np


def _as_rollout(x: object, name: str, shape: tuple[int, ...] | None) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] < 1:
        raise ValueError(f"{name} must be (T,) or (N, T) with T >= 1, got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name} shape {arr.shape} must equal rewards shape {shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _as_flags(x: object, name: str, shape: tuple[int, ...]) -> np.ndarray:
    arr = _as_rollout(x, name, shape)
    if not np.all((arr == 0.0) | (arr == 1.0)):
        raise ValueError(f"{name} must hold only 0/1 (or bool) flags")
    return arr


def _check_unit(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return float(value)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_value: float | np.ndarray,
    gamma: float = 0.99,
    lam: float = 0.95,
    *,
    truncated: np.ndarray | None = None,
    truncated_values: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    gamma = _check_unit(gamma, "gamma")
    lam = _check_unit(lam, "lam")
    r = _as_rollout(rewards, "rewards", None)
    v = _as_rollout(values, "values", r.shape)
    d = _as_flags(dones, "dones", r.shape)
    batched = r.ndim == 2
    boot = np.asarray(last_value, dtype=np.float64)
    want = r.shape[:1] if batched else ()
    if boot.shape != want:
        raise ValueError(f"last_value must have shape {want} for rewards of shape {r.shape}, got {boot.shape}")
    if not np.all(np.isfinite(boot)):
        raise ValueError("last_value must be finite")
    if truncated is None:
        c = np.zeros_like(r)
        cut_values = np.zeros_like(r)
    else:
        c = _as_flags(truncated, "truncated", r.shape)
        if np.any((c == 1.0) & (d == 1.0)):
            raise ValueError("truncated and dones must not both be set at the same step")
        if truncated_values is None:
            if np.any(c == 1.0):
                raise ValueError("truncated_values is required where truncated is set")
            cut_values = np.zeros_like(r)
        else:
            cut_values = np.asarray(truncated_values, dtype=np.float64)
            if cut_values.shape != r.shape:
                raise ValueError(f"truncated_values shape {cut_values.shape} must equal rewards shape {r.shape}")
            cut_values = np.where(c == 1.0, cut_values, 0.0)
            if not np.all(np.isfinite(cut_values)):
                raise ValueError("truncated_values must be finite where truncated is set")

    T = r.shape[-1]
    r2 = r.reshape(-1, T)
    v2 = v.reshape(-1, T)
    d2 = d.reshape(-1, T)
    c2 = c.reshape(-1, T)
    cut2 = cut_values.reshape(-1, T)
    N = r2.shape[0]
    next_values = np.concatenate([v2[:, 1:], boot.reshape(N, 1)], axis=1)
    next_values = np.where(c2 == 1.0, cut2, next_values)
    deltas = r2 + gamma * (1.0 - d2) * next_values - v2
    carry = gamma * lam * (1.0 - d2) * (1.0 - c2)
    advantages = np.empty_like(deltas)
    running = np.zeros(N)
    for t in range(T - 1, -1, -1):
        running = deltas[:, t] + carry[:, t] * running
        advantages[:, t] = running
    advantages = advantages.reshape(r.shape)
    return advantages, advantages + v
