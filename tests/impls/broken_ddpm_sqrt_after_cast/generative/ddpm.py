"""Broken DDPM (canon #44), mistake: ``alpha_bar_t`` is cast to the data dtype *before* the square
roots are taken; in float16, ``alpha_bar_0 = 0.9999`` rounds to 1, so ``sqrt(1 - alpha_bar_0)`` is 0 and
the least noisy steps receive no noise at all. Caught by the numerics probe
test_half_precision_forward_process_matches_float32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DDPM", "TinyDenoiser", "cosine_beta_schedule", "linear_beta_schedule"]


def _check_steps(T: int) -> None:
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T must be an int >= 1, got {T!r}")


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
    _check_steps(T)
    for name, value in (("beta_start", beta_start), ("beta_end", beta_end)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {value}")
    return torch.linspace(beta_start, beta_end, T, dtype=torch.float64)      # (T,)


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
    _check_steps(T)
    if not (math.isfinite(s) and s >= 0):
        raise ValueError(f"s must be finite and >= 0, got {s}")
    if not 0.0 < max_beta < 1.0:
        raise ValueError(f"max_beta must lie in (0, 1), got {max_beta}")
    steps = torch.arange(T + 1, dtype=torch.float64)                          # (T + 1,)
    f = torch.cos((steps / T + s) / (1 + s) * (math.pi / 2)).pow(2)           # (T + 1,)
    alpha_bar = f / f[0]                                                      # (T + 1,)
    betas = 1.0 - alpha_bar[1:] / alpha_bar[:-1]                              # (T,)
    return betas.clamp(max=max_beta)


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
        if not isinstance(betas, Tensor) or betas.ndim != 1 or betas.numel() == 0:
            shape = tuple(betas.shape) if isinstance(betas, Tensor) else type(betas).__name__
            raise ValueError(f"betas must be a non-empty 1-D tensor, got {shape}")
        betas = betas.detach().to(torch.float64).clone()
        if not bool(((betas > 0) & (betas < 1)).all()):
            raise ValueError("betas must lie in the open interval (0, 1)")
        self.T = int(betas.numel())
        self.betas = betas
        self.alphas = 1.0 - betas
        self.alpha_bars = torch.cumprod(self.alphas, dim=0)                    # (T,)
        self.alpha_bars_prev = torch.cat([betas.new_ones(1), self.alpha_bars[:-1]])  # (T,)
        self.posterior_variance = betas * (1.0 - self.alpha_bars_prev) / (1.0 - self.alpha_bars)

    def _check_t(self, t: Tensor, batch: int) -> None:
        """Raise ``ValueError`` unless ``t`` is a ``(batch,)`` integer tensor with entries in ``[0, T)``."""
        if not isinstance(t, Tensor) or t.is_floating_point() or t.dtype == torch.bool or t.ndim != 1:
            raise ValueError("t must be a 1-D integer (long) tensor of time steps")
        if t.shape[0] != batch:
            raise ValueError(f"t must hold one step per example ({batch}), got {t.shape[0]}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.T):
            raise ValueError(f"t must lie in [0, T) = [0, {self.T}), got min {int(t.min())}, max {int(t.max())}")

    def _at(self, buffer: Tensor, t: Tensor, x: Tensor) -> Tensor:
        """``buffer[t]`` cast to ``x``'s dtype and shaped ``(B, 1, ...)`` to broadcast over ``x``'s data dims."""
        picked = buffer.to(x.device)[t.to(x.device)].to(x.dtype)                # (B,)
        return picked.reshape(-1, *([1] * (x.ndim - 1)))                      # (B, ...)

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
        self._check_t(t, x0.shape[0] if x0.ndim else -1)
        if noise is None:
            noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)  # (B, ...)
        elif noise.shape != x0.shape:
            raise ValueError(f"noise must have the shape of x0 {tuple(x0.shape)}, got {tuple(noise.shape)}")
        alpha_bar = self._at(self.alpha_bars, t, x0)                          # (B, ...)
        return alpha_bar.sqrt() * x0 + (1.0 - alpha_bar).sqrt() * noise

    def predict_x0(self, x_t: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        """Invert the forward process for a noise estimate: ``x0 = (x_t - sqrt(1 - alpha_bar_t) eps) / sqrt(alpha_bar_t)``.

        Args:
            x_t: ``(B, ...)`` noised data. t: ``(B,)`` long steps. eps: ``(B, ...)`` noise estimate.

        Returns:
            ``(B, ...)`` estimate of ``x0`` in the dtype of ``x_t``.

        Raises:
            ValueError: bad ``t``, or ``eps`` shape differs from ``x_t``.
        """
        self._check_t(t, x_t.shape[0] if x_t.ndim else -1)
        if eps.shape != x_t.shape:
            raise ValueError(f"eps must have the shape of x_t {tuple(x_t.shape)}, got {tuple(eps.shape)}")
        signal = self._at(self.alpha_bars.sqrt(), t, x_t)                     # (B, ...)
        spread = self._at((1.0 - self.alpha_bars).sqrt(), t, x_t)             # (B, ...)
        return (x_t - spread * eps) / signal

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
        self._check_t(t, x_t.shape[0] if x_t.ndim else -1)
        if x0.shape != x_t.shape:
            raise ValueError(f"x0 must have the shape of x_t {tuple(x_t.shape)}, got {tuple(x0.shape)}")
        denom = 1.0 - self.alpha_bars
        coef_x0 = self._at(self.betas * self.alpha_bars_prev.sqrt() / denom, t, x_t)          # (B, ...)
        coef_xt = self._at(self.alphas.sqrt() * (1.0 - self.alpha_bars_prev) / denom, t, x_t)  # (B, ...)
        variance = self._at(self.posterior_variance, t, x_t)                  # (B, ...)
        return coef_x0 * x0 + coef_xt * x_t, variance

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
        if x0.ndim < 1 or x0.shape[0] == 0:
            raise ValueError(f"x0 must be a non-empty batch (B, ...), got shape {tuple(x0.shape)}")
        t = torch.randint(0, self.T, (x0.shape[0],), generator=generator, device=x0.device)  # (B,)
        noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)  # (B, ...)
        x_t = self.q_sample(x0, t, noise)                                     # (B, ...)
        return F.mse_loss(model(x_t, t), noise)

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
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.T:
            raise ValueError(f"t must be an int in [0, T) = [0, {self.T}), got {t!r}")
        steps = torch.full((x_t.shape[0],), t, dtype=torch.long, device=x_t.device)  # (B,)
        eps = model(x_t, steps)                                               # (B, ...)
        x0_hat = self.predict_x0(x_t, steps, eps)                             # (B, ...)
        mean, variance = self.posterior_mean_variance(x0_hat, x_t, steps)     # (B, ...), (B, ...)
        if t == 0:
            return mean
        z = torch.randn(x_t.shape, generator=generator, dtype=x_t.dtype, device=x_t.device)  # (B, ...)
        return mean + variance.sqrt() * z

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
        shape = tuple(int(n) for n in shape)
        if len(shape) == 0 or min(shape) < 1:
            raise ValueError(f"shape must be a non-empty tuple of positive sizes (B, ...), got {shape}")
        param = next(iter(model.parameters()), None)
        dtype = param.dtype if param is not None else torch.get_default_dtype()
        device = param.device if param is not None else torch.device("cpu")
        x = torch.randn(shape, generator=generator, dtype=dtype, device=device)  # (B, ...)
        for t in reversed(range(self.T)):
            x = self.p_sample(model, x, t, generator)                         # (B, ...)
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
        for name, value in (("d_data", d_data), ("d_hidden", d_hidden), ("T", T)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.d_data = d_data
        self.T = T
        half = self.d_time // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=torch.float32) / half)  # (h,)
        self.register_buffer("freqs", freqs, persistent=False)
        self.time_mlp = nn.Linear(self.d_time, d_hidden)
        self.inp = nn.Linear(d_data + d_hidden, d_hidden)
        self.hidden = nn.Linear(d_hidden, d_hidden)
        self.out = nn.Linear(d_hidden, d_data)

    def time_embedding(self, t: Tensor) -> Tensor:
        """``(B,)`` steps -> ``(B, d_t)`` sinusoidal embedding ``[sin(t w_k), cos(t w_k)]``."""
        angles = t.to(self.freqs.dtype)[:, None] * self.freqs[None, :]        # (B, h)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)                # (B, d_t)

    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        """``(B, d), (B,) long -> (B, d)`` predicted noise."""
        if x_t.ndim != 2 or x_t.shape[-1] != self.d_data:
            raise ValueError(f"x_t must have shape (B, d_data) with d_data = {self.d_data}, got {tuple(x_t.shape)}")
        if t.ndim != 1 or t.shape[0] != x_t.shape[0] or t.is_floating_point():
            raise ValueError(f"t must be a (B,) = ({x_t.shape[0]},) integer tensor, got {tuple(t.shape)} {t.dtype}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.T):
            raise ValueError(f"t must lie in [0, T) = [0, {self.T})")
        temb = F.silu(self.time_mlp(self.time_embedding(t).to(x_t.dtype)))   # (B, d_h)
        h = F.silu(self.inp(torch.cat([x_t, temb], dim=-1)))                  # (B, d_h)
        h = F.silu(self.hidden(h))                                            # (B, d_h)
        return self.out(h)                                                    # (B, d)
