"""Denoising diffusion probabilistic models (DDPM): noise schedules, the forward process, the

Plan: precompute the schedule (alphas, cumulative alpha_bars, posterior variance) in float64 once,
because the products of ~1000 numbers near 1 lose precision in float32; gather per-sample
coefficients by t and cast them to the data dtype. Train by noise prediction (Ho et al.'s simple
loss); sample by ancestral steps using the posterior q(x_{t-1} | x_t, x0_hat).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DDPM", "TinyDenoiser", "cosine_beta_schedule", "linear_beta_schedule"]


def linear_beta_schedule(T: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> Tensor:
    """``T`` betas evenly spaced from ``beta_start`` to ``beta_end`` (both included).

    Args:
        T: number of steps (>= 1); ``T = 1`` gives ``[beta_start]``.
        beta_start, beta_end: first and last beta, in (0, 1).

    Returns:
        ``(T,)`` float64 tensor.

    Raises:
        ValueError: ``T < 1``, or a beta outside (0, 1).

    Source: Ho, Jain & Abbeel, "Denoising Diffusion Probabilistic Models" (2020), Sec. 4 (1e-4 to 0.02).
    """
    return torch.linspace(beta_start, beta_end, T, dtype=torch.float64)


def cosine_beta_schedule(T: int, s: float = 0.008, max_beta: float = 0.999) -> Tensor:
    """Betas of the cosine schedule ``alpha_bar(t) = f(t) / f(0)``, ``f(t) = cos^2((t/T + s)/(1 + s) * pi/2)``.

    ``beta_t = min(1 - alpha_bar(t + 1) / alpha_bar(t), max_beta)`` for ``t = 0..T-1``; the cap keeps the
    last steps (where ``f`` reaches 0) from becoming a singular ``beta = 1``.

    Args:
        T: number of steps (>= 1).
        s: small offset (>= 0) that keeps ``beta_0`` from being vanishingly small.
        max_beta: cap on every beta, in (0, 1).

    Returns:
        ``(T,)`` float64 tensor with entries in (0, max_beta].

    Raises:
        ValueError: ``T < 1``, ``s < 0``, ``max_beta`` outside (0, 1).

    Source: Nichol & Dhariwal, "Improved Denoising Diffusion Probabilistic Models" (2021), Eq. 17.
    """
    steps = torch.arange(T + 1, dtype=torch.float64)
    f = torch.cos((steps / T + s) / (1 + s) * math.pi / 2) ** 2
    alpha_bar = f / f[0]
    betas = 1.0 - alpha_bar[1:] / alpha_bar[:-1]
    return torch.clamp(betas, max=max_beta)


def _coef(v: Tensor, t: Tensor, like: Tensor) -> Tensor:
    """Gather ``v[t]`` and reshape to ``(B, 1, ...)`` to broadcast against ``like``, in its dtype."""
    out = v.to(like.device)[t.long().to(like.device)].to(like.dtype)
    return out.reshape(-1, *([1] * (like.dim() - 1)))


class DDPM:
    """The diffusion process for a fixed schedule: forward noising, the loss and ancestral sampling.

    Args:
        betas: ``(T,)`` schedule, every entry in the open interval (0, 1); copied to float64.

    Attributes (all ``(T,)`` float64, indexed by the 0-based step ``t``):
        T: number of steps.
        betas, alphas (``1 - betas``), alpha_bars (cumulative product of ``alphas``),
        alpha_bars_prev (``alpha_bars`` shifted right by one, ``alpha_bars_prev[0] = 1``),
        posterior_variance (``beta_t (1 - alpha_bar_{t-1}) / (1 - alpha_bar_t)``, entry 0 is 0).

    Raises:
        ValueError: ``betas`` not a non-empty 1-D tensor, or an entry outside (0, 1) (NaN included).

    Source: Ho et al. (2020), Eqs. 4, 6, 7, 11, 14 and Algorithms 1-2.
    """

    def __init__(self, betas: Tensor) -> None:
        self.betas = torch.as_tensor(betas).detach().clone().to(torch.float64)
        self.T = int(self.betas.shape[0])
        self.alphas = 1.0 - self.betas
        self.alpha_bars = torch.cumprod(self.alphas, dim=0)
        self.alpha_bars_prev = torch.cat([torch.ones(1, dtype=torch.float64), self.alpha_bars[:-1]])
        self.posterior_variance = self.betas * (1.0 - self.alpha_bars_prev) / (1.0 - self.alpha_bars)
        # composite coefficients in float64: 1 - alpha_bar near t = 0 cancels badly in low precision
        self._sqrt_ab = self.alpha_bars.sqrt()
        self._sqrt_1m_ab = (1.0 - self.alpha_bars).sqrt()
        self._post_c0 = self.betas * self.alpha_bars_prev.sqrt() / (1.0 - self.alpha_bars)
        self._post_c1 = self.alphas.sqrt() * (1.0 - self.alpha_bars_prev) / (1.0 - self.alpha_bars)

    def q_sample(self, x0: Tensor, t: Tensor, noise: Tensor | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
        """Draw ``x_t ~ q(x_t | x_0) = sqrt(alpha_bar_t) x0 + sqrt(1 - alpha_bar_t) eps``.

        Args:
            x0: ``(B, ...)`` clean data.
            t: ``(B,)`` long steps in ``[0, T)``.
            noise: ``eps`` of the shape of ``x0``; drawn from ``generator`` (global RNG if None) when omitted.

        Returns:
            ``(B, ...)`` noised data in the dtype of ``x0``.

        Raises:
            ValueError: ``t`` not ``(B,)`` integers in ``[0, T)``; ``noise`` shape differs from ``x0``.
        """
        if noise is None:
            noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)
        return _coef(self._sqrt_ab, t, x0) * x0 + _coef(self._sqrt_1m_ab, t, x0) * noise

    def predict_x0(self, x_t: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        """Invert the forward process for a noise estimate: ``x0 = (x_t - sqrt(1 - alpha_bar_t) eps) / sqrt(alpha_bar_t)``.

        Args:
            x_t: ``(B, ...)`` noised data. t: ``(B,)`` long steps. eps: ``(B, ...)`` noise estimate.

        Returns:
            ``(B, ...)`` estimate of ``x0`` in the dtype of ``x_t``.

        Raises:
            ValueError: bad ``t``, or ``eps`` shape differs from ``x_t``.
        """
        return (x_t - _coef(self._sqrt_1m_ab, t, x_t) * eps) / _coef(self._sqrt_ab, t, x_t)

    def posterior_mean_variance(self, x0: Tensor, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and variance of ``q(x_{t-1} | x_t, x0)``.

        ``mean = beta_t sqrt(alpha_bar_{t-1}) / (1 - alpha_bar_t) * x0
        + sqrt(alpha_t) (1 - alpha_bar_{t-1}) / (1 - alpha_bar_t) * x_t``; ``variance = posterior_variance[t]``.

        Args:
            x0: ``(B, ...)`` (estimated) clean data. x_t: ``(B, ...)`` noised data. t: ``(B,)`` long steps.

        Returns:
            ``mean (B, ...)`` like ``x_t`` and ``variance (B, 1, ...)`` (broadcastable), dtype of ``x_t``.

        Raises:
            ValueError: bad ``t``, or ``x0`` and ``x_t`` of different shapes.
        """
        mean = _coef(self._post_c0, t, x_t) * x0 + _coef(self._post_c1, t, x_t) * x_t
        return mean, _coef(self.posterior_variance, t, x_t)

    def loss(self, model: nn.Module, x0: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """The simplified DDPM objective ``E_{t, eps} ||eps - model(x_t, t)||^2`` (mean over all entries).

        Args:
            model: maps ``(x_t (B, ...), t (B,) long)`` to a noise estimate of the shape of ``x_t``.
            x0: ``(B, ...)`` clean batch (B >= 1).
            generator: source of ``t ~ U{0..T-1}`` and ``eps``; global RNG if None.

        Returns:
            ``()`` loss in the dtype of the model output.

        Raises:
            ValueError: ``x0`` has no batch dim or an empty batch.

        Source: Ho et al. (2020), Algorithm 1 and Eq. 14.
        """
        B = x0.shape[0]
        t = torch.randint(0, self.T, (B,), generator=generator, device=x0.device)
        noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)
        x_t = self.q_sample(x0, t, noise)
        eps_hat = model(x_t, t)
        return F.mse_loss(eps_hat, noise.to(eps_hat.dtype))

    @torch.no_grad()
    def p_sample(self, model: nn.Module, x_t: Tensor, t: int, generator: torch.Generator | None = None) -> Tensor:
        """One reverse step ``x_t -> x_{t-1}``: the posterior mean at ``x0_hat`` plus ``sigma_t z`` (none at t = 0).

        Args:
            model: the noise predictor. x_t: ``(B, ...)`` current sample. t: the current step, an int in ``[0, T)``.
            generator: source of ``z``; global RNG if None.

        Returns:
            ``(B, ...)`` sample of ``x_{t-1}`` in the dtype of ``x_t``.

        Raises:
            ValueError: ``t`` not an int in ``[0, T)``.

        Source: Ho et al. (2020), Algorithm 2, with the posterior mean of Eq. 7 evaluated at ``x0_hat``.
        """
        tt = torch.full((x_t.shape[0],), t, dtype=torch.long, device=x_t.device)
        eps_hat = model(x_t, tt).to(x_t.dtype)
        x0_hat = self.predict_x0(x_t, tt, eps_hat)
        mean, var = self.posterior_mean_variance(x0_hat, x_t, tt)
        if t == 0:
            return mean
        z = torch.randn(x_t.shape, generator=generator, dtype=x_t.dtype, device=x_t.device)
        return mean + var.sqrt() * z

    @torch.no_grad()
    def sample(self, model: nn.Module, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        """Ancestral sampling: ``x_{T-1} ~ N(0, I)`` then :meth:`p_sample` for ``t = T-1, ..., 0``.

        Args:
            model: the noise predictor; its parameters' dtype (float32 when it has none) is the sample dtype.
            shape: ``(B, ...)`` shape of the batch to draw (B >= 1).
            generator: source of the initial noise and every ``z``; global RNG if None.

        Returns:
            ``(B, ...)`` samples.

        Raises:
            ValueError: ``shape`` is empty or has a non-positive entry.

        Source: Ho et al. (2020), Algorithm 2.
        """
        p = next(iter(model.parameters()), None)
        dtype = p.dtype if p is not None else torch.float32
        device = p.device if p is not None else None
        x = torch.randn(tuple(shape), generator=generator, dtype=dtype, device=device)
        for t in reversed(range(self.T)):
            x = self.p_sample(model, x, t, generator=generator)
        return x


class TinyDenoiser(nn.Module):
    """A noise predictor for vector data: sinusoidal time embedding + a 3-layer SiLU MLP.

    ``forward(x_t (B, d), t (B,) long) -> eps_hat (B, d)``. The time embedding has ``d_t = 32`` dims
    (sines and cosines of ``t`` at 16 geometric frequencies from 1 to 1/1000, as in the Transformer), is
    passed through a Linear + SiLU, and is concatenated with ``x_t``.

    Args:
        d_data: ``d``, data width (>= 1).
        d_hidden: ``d_h``, hidden width (>= 1).
        T: number of diffusion steps the model will see (>= 1); ``t`` must lie in ``[0, T)``.

    Raises:
        ValueError: in ``__init__`` a size < 1; in ``forward`` ``x_t`` not ``(B, d)``, or ``t`` not ``(B,)``
        integers in ``[0, T)``.

    Source: Ho et al. (2020), Appendix B (sinusoidal position embedding of ``t``); Vaswani et al. (2017).
    """
    d_time = 32

    def __init__(self, d_data: int, d_hidden: int = 128, T: int = 1000) -> None:
        super().__init__()
        self.T = T
        half = self.d_time // 2
        # 16 geometric frequencies from 1 down to 1/1000 (both ends included)
        self.register_buffer("freqs", torch.exp(-math.log(1000.0) * torch.arange(half) / (half - 1)))
        self.time_mlp = nn.Sequential(nn.Linear(self.d_time, d_hidden), nn.SiLU())
        self.net = nn.Sequential(
            nn.Linear(d_data + d_hidden, d_hidden), nn.SiLU(),
            nn.Linear(d_hidden, d_hidden), nn.SiLU(),
            nn.Linear(d_hidden, d_data),
        )

    def time_embedding(self, t: Tensor) -> Tensor:
        """``(B,)`` steps -> ``(B, d_t)`` sinusoidal embedding ``[sin(t w_k), cos(t w_k)]``."""
        args = t.to(self.freqs.dtype)[:, None] * self.freqs[None, :]  # (B, 16)
        return torch.cat([torch.sin(args), torch.cos(args)], dim=-1)  # (B, 32)

    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        """``(B, d), (B,) long -> (B, d)`` predicted noise."""
        temb = self.time_mlp(self.time_embedding(t).to(x_t.dtype))    # (B, d_h)
        return self.net(torch.cat([x_t, temb], dim=-1))             # (B, d)
