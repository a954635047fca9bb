"""Generalized advantage estimation (canon item #52; Schulman et al. 2016, eq. 11-16).

Backward recursion over time: TD residuals, then a discounted (gamma*lam) sum of them that is
cut at episode ends; time-limit truncations bootstrap from the real next state's value.
"""

from __future__ import annotations

import math

import numpy as np


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
    """Advantages and value targets of one rollout by GAE(``gamma``, ``lam``).

    ``delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t`` and
    ``A_t = delta_t + gamma * lam * (1 - d_t) * (1 - c_t) * A_{t+1}`` with ``V_T = last_value`` and
    ``c`` the truncation flags; where ``c_t = 1``, ``V_{t+1}`` is replaced by ``truncated_values[t]``.

    Args:
        rewards: ``(T,)`` or ``(N, T)`` finite rewards.
        values: ``V(s_t)``, shape of ``rewards``.
        dones: 0/1 or bool, shape of ``rewards``; 1 = the episode terminated after step ``t``.
        last_value: ``V(s_T)`` of the state after the rollout: a scalar for ``(T,)``, ``(N,)`` for
            ``(N, T)``; unused where the last step is done or truncated.
        gamma: discount in ``[0, 1]``. lam: GAE parameter in ``[0, 1]``.
        truncated: optional 0/1 flags, shape of ``rewards``; 1 = a time limit cut the episode after
            step ``t`` (never together with ``dones[t] = 1``).
        truncated_values: ``V(s_{t+1})`` of the real next state where ``truncated`` is 1 (other
            entries are ignored); required when any flag is set.

    Returns:
        ``(advantages, returns)``, float64 arrays of the shape of ``rewards``,
        ``returns = advantages + values``.

    Raises:
        ValueError: shape mismatches, non-finite inputs, flags other than 0/1, ``gamma`` or ``lam``
            outside ``[0, 1]``, ``last_value`` not a scalar (``(T,)``) or not ``(N,)`` (``(N, T)``),
            a step both done and truncated, ``truncated`` set without ``truncated_values``.

    Source: Schulman, Moritz, Levine, Jordan, Abbeel, "High-Dimensional Continuous Control Using
    Generalized Advantage Estimation", ICLR 2016, eq. (16).
    """
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    d = np.asarray(dones, dtype=np.float64)
    c = np.zeros_like(r) if truncated is None else np.asarray(truncated, dtype=np.float64)
    tv = np.zeros_like(r) if truncated_values is None else np.asarray(truncated_values, dtype=np.float64)
    T = r.shape[-1]
    adv = np.zeros_like(r)
    next_v = np.asarray(last_value, dtype=np.float64)
    next_a = np.zeros_like(r[..., 0])
    for t in reversed(range(T)):
        boot = np.where(c[..., t] > 0, tv[..., t], next_v)  # value of the real next state
        delta = r[..., t] + gamma * (1.0 - d[..., t]) * boot - v[..., t]
        next_a = delta + gamma * lam * (1.0 - d[..., t]) * (1.0 - c[..., t]) * next_a
        adv[..., t] = next_a
        next_v = v[..., t]
    return adv, adv + v
