# Blind alternative (capstone round, tester A, written from the stubs alone), with its variants optimizer varA
# (per-parameter state, torch-style in-place clip without the 1e-6, addcdiv; no steps_taken/exp_avg contract)
# and tiny_lm varB (SDPA, arithmetic bias, Gumbel sampling): must pass every test of capstone/agent.
"""Canon #60, shared by parts 6 to 8: Adam with global-norm gradient clipping, one step per call.

Plan. ``step`` (1) computes the global L2 norm of all current gradients,
``||g|| = sqrt(sum_p ||g_p||^2)``; (2) if it exceeds ``max_grad_norm`` scales every gradient by
``max_grad_norm / (||g|| + 1e-6)`` (``clip_grad_norm_``'s rule), so the update direction is kept and only
its length is capped; (3) takes a bias-corrected Adam step per parameter:
``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, ``p -= lr * m_hat / (sqrt(v_hat) + eps)`` with
``m_hat = m / (1 - b1^t)``, ``v_hat = v / (1 - b2^t)``. It returns the norm before clipping, for the log.

Subtle point: the clip is *global*, over the concatenation of all gradients, not per tensor: clipping
each tensor alone would change the direction of the update. The bias correction matters in the first
steps (``m`` and ``v`` start at 0, so without it the first updates are ``~(1 - b1)`` too small and the
ratio is off); ``t`` is counted per parameter, so a parameter whose gradient was ``None`` on a step
(a frozen-by-graph branch) is neither moved nor has its moments decayed, as in ``torch.optim.Adam``.

Shapes: every moment has the shape of its parameter; the norm is a scalar ``()``.

Trade-off: hand-written rather than ``torch.optim.Adam`` + ``clip_grad_norm_``: the same maths, but one
object that the four stages share, whose ``lr`` property a schedule can reassign, and whose ``step``
returns the pre-clip norm. Parameters are updated in place under ``no_grad`` (no graph is recorded).

Tests I would write: one step equals ``torch.optim.Adam`` after ``clip_grad_norm_`` on the same
gradients; the returned norm equals ``clip_grad_norm_``'s; a gradient below the threshold is untouched;
``zero_grad`` sets grads to ``None``; parameters with ``requires_grad=False`` never move; invalid
``lr``/``betas``/``eps``/``max_grad_norm`` raise ``ValueError``.
"""
# What the rubric reads: in the docstring above, your plan (what the module computes and its subtle
# point, the shapes, a trade-off: why this way rather than another, and what you would test); a
# docstring on every public function; a shape comment at the end of every line that creates,
# reshapes, contracts or reduces a tensor: `scores = q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)`.

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn


class ClippedAdam:
    """Adam over the trainable ``params`` with the gradient clipped to a global L2 norm first.

    Args:
        params: parameters to train; those with ``requires_grad=False`` are left out.
        lr: learning rate, a float > 0; reassign :attr:`lr` between steps for a schedule.
        max_grad_norm: global L2 norm the gradient is clipped to (``clip_grad_norm_``'s ``max_norm``).
        betas: ``(beta1, beta2)``, each in ``[0, 1)``.
        eps: added to ``sqrt(v_hat)``, > 0.

    Raises:
        ValueError: no trainable parameter, a non-positive or non-finite ``lr``, ``max_grad_norm``
            or ``eps``, or a beta outside ``[0, 1)``.
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float, max_grad_norm: float = 1.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("ClippedAdam got no trainable parameter (every one has requires_grad=False)")
        if not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be finite and > 0, got {max_grad_norm}")
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be finite and > 0, got {eps}")
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"betas must each lie in [0, 1), got {betas}")
        self._lr = 0.0
        self.lr = lr  # validated by the setter
        self.max_grad_norm = float(max_grad_norm)
        self.betas = (float(beta1), float(beta2))
        self.eps = float(eps)
        self.state: dict[int, dict[str, Tensor | int]] = {}

    @property
    def lr(self) -> float:
        """Learning rate of the next step."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        """Set the learning rate of the next step; ``ValueError`` unless finite and > 0."""
        value = float(value)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"lr must be finite and > 0, got {value}")
        self._lr = value

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (set it to ``None``, as ``zero_grad(set_to_none=True)``)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> float:
        """Clip the current gradients, update the moments and the parameters in place.

        Returns:
            The global L2 norm of the gradient before clipping, as a Python float (a training log's
            usual companion to the loss).
        """
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return 0.0
        flat = torch.cat([g.reshape(-1) for g in grads])  # (n_total,)
        total_norm = float(torch.linalg.vector_norm(flat))
        scale = self.max_grad_norm / total_norm if total_norm > self.max_grad_norm else 1.0
        beta1, beta2 = self.betas
        for p in self.params:
            if p.grad is None:
                continue
            grad = p.grad.mul_(scale)  # clipped in place, as clip_grad_norm_ does
            st = self.state.setdefault(id(p), {"t": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
            st["t"] = t = int(st["t"]) + 1
            m, v = st["m"], st["v"]
            assert isinstance(m, Tensor) and isinstance(v, Tensor)
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias1, bias2 = 1 - beta1 ** t, 1 - beta2 ** t
            denom = v.sqrt() / math.sqrt(bias2) + self.eps
            p.addcdiv_(m, denom, value=-self._lr / bias1)
        return total_norm
