"""Canon #60, shared by parts 6 to 8: Adam with global-norm gradient clipping, the step every stage takes.

SFT, the reward model, DPO and GRPO all train the same way: clip the gradient to global L2 norm 1,
then take an Adam step (Kingma & Ba 2015, Algorithm 1; with no weight decay it is also AdamW). With
``g`` the clipped gradient of all parameters as one vector and ``t`` the step number:

    m <- beta1 m + (1 - beta1) g            v <- beta2 v + (1 - beta2) g^2
    theta <- theta - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

Clipping scales ``g`` by ``max_grad_norm / (||g|| + 1e-6)`` when that is below 1, exactly as
``torch.nn.utils.clip_grad_norm_`` does, so a step equals ``clip_grad_norm_`` followed by
``torch.optim.AdamW(weight_decay=0)`` (tested to 1e-6).

The subtle point is the order: the clip acts on the raw gradient *before* it enters the moments.
Adam's update is already scale-free (``m / sqrt(v)`` is unchanged when every gradient is multiplied
by the same constant), so what needs bounding is how far one outlier batch moves ``m`` and ``v``, for
this step and the next hundreds. Clipping the update instead shrinks only the current step and lets
the outlier into both moments.

Shapes: ``N`` is the total number of trainable parameters (78,796 for the default VLM) and ``M`` the
number of parameter tensors (76); the moments are two ``(N,)`` float32 vectors in the order of ``params``.

Trade-off: this class rather than ``torch.optim.AdamW``. Constructing any ``torch.optim`` optimizer
imports ``torch._dynamo`` (1.0 to 1.1 s here, a tenth of the pipeline's 10 s target), and its
per-tensor clip and update cost about 1 ms per step for the VLM's 76 tensors. Flat moments make a
step one concatenation, a handful of vector operations and one in-place add per tensor; the default
pipeline went from 9.6 to 8.3-8.8 s here. A parameter whose gradient is ``None`` counts as a zero
gradient (``torch.optim`` skips it instead); the two agree while its moments are zero, which holds
for a parameter that never receives a gradient, such as the reward model's unused LM head.

What to test: ten steps equal ``clip_grad_norm_`` + ``torch.optim.AdamW(weight_decay=0)``, with
batches both above and below the clip norm; the returned norm is the pre-clip norm; a parameter with
no gradient does not move; ``zero_grad`` clears the gradients; bad arguments raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


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
            raise ValueError("params holds no trainable parameter")
        _check_positive("max_grad_norm", max_grad_norm)
        _check_positive("eps", eps)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two values in [0, 1), got {betas!r}")
        self.lr = lr
        self.max_grad_norm = float(max_grad_norm)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.sizes = [p.numel() for p in self.params]
        first = self.params[0]
        self.exp_avg = torch.zeros(sum(self.sizes), dtype=first.dtype, device=first.device)     # (N,)
        self.exp_avg_sq = torch.zeros(sum(self.sizes), dtype=first.dtype, device=first.device)  # (N,)
        self.steps_taken = 0

    @property
    def lr(self) -> float:
        """Learning rate of the next step."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        """Set the learning rate of the next step; ``ValueError`` unless finite and > 0."""
        _check_positive("lr", value)
        self._lr = float(value)

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (set it to ``None``, as ``zero_grad(set_to_none=True)``)."""
        for p in self.params:
            p.grad = None

    def _flat_grad(self) -> Tensor:
        """``(N,)`` gradient of all parameters in order, zeros where a gradient is ``None``."""
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in self.params]  # list[M]
        return torch.cat([g.reshape(-1) for g in grads])                 # (N,)

    @torch.no_grad()
    def step(self) -> float:
        """Clip the current gradients, update the moments and the parameters in place.

        Returns:
            The global L2 norm of the gradient before clipping, as a Python float (a training log's
            usual companion to the loss).
        """
        self.steps_taken += 1
        beta1, beta2 = self.betas
        grad = self._flat_grad()                                         # (N,)
        norm = torch.linalg.vector_norm(grad)                            # ()
        grad.mul_(torch.clamp(self.max_grad_norm / (norm + 1e-6), max=1.0))
        self.exp_avg.lerp_(grad, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias1 = 1.0 - beta1 ** self.steps_taken
        bias2 = 1.0 - beta2 ** self.steps_taken
        denom = (self.exp_avg_sq / bias2).sqrt_().add_(self.eps)         # (N,)
        update = (self.exp_avg / denom).mul_(-self.lr / bias1)          # (N,)
        for p, delta in zip(self.params, update.split(self.sizes)):
            p.add_(delta.view_as(p))
        return float(norm)
