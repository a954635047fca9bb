"""Alternative DDPM (canon #44): log-space cumulative products, ``gather`` + ``view`` broadcasting, the
posterior as a precision-weighted product of Gaussians, and the reverse step in Ho et al.'s
epsilon form ``mu = (x_t - beta_t / sqrt(1 - alpha_bar_t) eps) / sqrt(alpha_t)`` (Eq. 11) instead of
evaluating the posterior mean at ``x0_hat`` (the two agree because ``x0_hat`` is linear in ``eps``).
The denoiser scales ``t`` to [0, 1] and uses random Fourier features and a residual MLP rather than the
reference's Transformer-style sinusoids.

Shape letters: ``B`` batch, ``d`` data width, ``T`` steps, ``F`` Fourier features, ``d_h`` hidden.
What to test: the same checks as the reference.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def linear_beta_schedule(T: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> Tensor:
    """``(T,)`` float64 evenly spaced betas."""
    if T < 1:
        raise ValueError("T must be >= 1")
    steps = torch.arange(T, dtype=torch.float64)                    # (T,)
    return beta_start + (beta_end - beta_start) * steps / max(T - 1, 1)


def cosine_beta_schedule(T: int, s: float = 0.008, max_beta: float = 0.999) -> Tensor:
    """``(T,)`` float64 cosine-schedule betas, capped at ``max_beta``."""
    if T < 1:
        raise ValueError("T must be >= 1")
    u = torch.linspace(0.0, 1.0, T + 1, dtype=torch.float64)        # (T + 1,)
    log_f = 2.0 * torch.log(torch.cos((u + s) / (1.0 + s) * math.pi / 2).clamp_min(1e-300))
    ratio = torch.exp(log_f[1:] - log_f[:-1])                        # (T,)
    return torch.minimum(1.0 - ratio, torch.full_like(ratio, max_beta))


class DDPM:
    """Forward process, loss and ancestral sampler for a fixed schedule."""

    def __init__(self, betas: Tensor) -> None:
        if betas.dim() != 1 or len(betas) == 0:
            raise ValueError("betas must be 1-D and non-empty")
        b = betas.double()
        if torch.isnan(b).any() or (b <= 0).any() or (b >= 1).any():
            raise ValueError("betas must be in (0, 1)")
        self.T = len(b)
        self.betas = b.clone()
        self.alphas = 1.0 - self.betas
        self.alpha_bars = torch.exp(torch.cumsum(torch.log1p(-self.betas), dim=0))  # (T,)
        self.alpha_bars_prev = torch.ones_like(self.alpha_bars)      # (T,)
        self.alpha_bars_prev[1:] = self.alpha_bars[:-1]
        self.posterior_variance = torch.zeros_like(self.betas)       # (T,)
        # 1 / (alpha_t / beta_t + 1 / (1 - alpha_bar_{t-1})) for t >= 1
        self.posterior_variance[1:] = 1.0 / (self.alphas[1:] / self.betas[1:] + 1.0 / (1.0 - self.alpha_bars[:-1]))

    def _take(self, buf: Tensor, t: Tensor, like: Tensor) -> Tensor:
        if t.dtype not in (torch.int64, torch.int32) or t.shape != (like.shape[0],):
            raise ValueError("t must be a (B,) integer tensor")
        if (t < 0).any() or (t >= self.T).any():
            raise ValueError(f"t out of range [0, {self.T})")
        return buf.gather(0, t.long()).to(like.dtype).view(-1, *(1,) * (like.dim() - 1))  # (B, ...)

    def q_sample(self, x0: Tensor, t: Tensor, noise: Tensor | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
        """``sqrt(ab) x0 + sqrt(1 - ab) eps``."""
        if noise is not None and noise.shape != x0.shape:
            raise ValueError("noise shape differs from x0")
        # the square roots are taken in float64 and only then cast: 1 - 0.9999 is 0 in float16
        keep = self._take(self.alpha_bars.sqrt(), t, x0)             # (B, ...)
        drop = self._take((1.0 - self.alpha_bars).sqrt(), t, x0)     # (B, ...)
        if noise is None:
            noise = torch.empty_like(x0).normal_(generator=generator)  # (B, ...)
        return torch.addcmul(keep * x0, drop, noise)

    def predict_x0(self, x_t: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        """Invert ``q_sample`` for a noise estimate."""
        inv_keep = self._take(self.alpha_bars.rsqrt(), t, x_t)       # (B, ...)
        ratio = self._take((1.0 / self.alpha_bars - 1.0).sqrt(), t, x_t)  # (B, ...)
        return inv_keep * x_t - ratio * eps

    def posterior_mean_variance(self, x0: Tensor, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Closed-form posterior mean; the variance is the precision-weighted product computed in ``__init__``."""
        var = self._take(self.posterior_variance, t, x_t)            # (B, ...)
        a = self._take(self.alphas, t, x_t)                          # (B, ...)
        b = self._take(self.betas, t, x_t)                           # (B, ...)
        ab_prev = self._take(self.alpha_bars_prev, t, x_t)           # (B, ...)
        ab = self._take(self.alpha_bars, t, x_t)                     # (B, ...)
        w_x0 = ab_prev.sqrt() * b / (1.0 - ab)
        w_xt = a.sqrt() * (1.0 - ab_prev) / (1.0 - ab)
        return w_x0 * x0 + w_xt * x_t, var

    def loss(self, model: nn.Module, x0: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``mean((model(x_t, t) - eps)^2)`` with ``t ~ U{0..T-1}``."""
        t = torch.randint(self.T, (len(x0),), generator=generator)   # (B,)
        eps = torch.empty_like(x0).normal_(generator=generator)      # (B, ...)
        return ((model(self.q_sample(x0, t, eps), t) - eps) ** 2).mean()

    @torch.no_grad()
    def p_sample(self, model: nn.Module, x_t: Tensor, t: int, generator=None) -> Tensor:
        """Eq. 11 mean plus ``sqrt(posterior_variance[t]) z`` for ``t > 0``."""
        if not 0 <= t < self.T:
            raise ValueError(f"t must be in [0, {self.T})")
        tt = torch.full((len(x_t),), t, dtype=torch.long)            # (B,)
        eps = model(x_t, tt)                                         # (B, ...)
        beta, alpha, ab = (float(v[t]) for v in (self.betas, self.alphas, self.alpha_bars))
        mean = (x_t - beta / math.sqrt(1.0 - ab) * eps) / math.sqrt(alpha)
        if t == 0:
            return mean
        noise = torch.empty_like(x_t).normal_(generator=generator)   # (B, ...)
        return mean + math.sqrt(float(self.posterior_variance[t])) * noise

    @torch.no_grad()
    def sample(self, model: nn.Module, shape: tuple[int, ...], generator=None) -> Tensor:
        """Ancestral sampling from pure noise."""
        dtype = next((p.dtype for p in model.parameters()), torch.float32)
        x = torch.empty(shape, dtype=dtype).normal_(generator=generator)  # (B, ...)
        for t in range(self.T - 1, -1, -1):
            x = self.p_sample(model, x, t, generator)                # (B, ...)
        return x


class TinyDenoiser(nn.Module):
    """``(B, d), (B,) -> (B, d)``: Fourier features of ``t / T`` and a residual SiLU MLP."""

    def __init__(self, d_data: int, d_hidden: int = 128, T: int = 1000) -> None:
        super().__init__()
        self.T = T
        self.register_buffer("w", torch.randn(16) * 8.0)
        self.embed = nn.Linear(d_data + 32, d_hidden)
        self.block = nn.Sequential(nn.SiLU(), nn.Linear(d_hidden, d_hidden), nn.SiLU(), nn.Linear(d_hidden, d_hidden))
        self.head = nn.Sequential(nn.SiLU(), nn.Linear(d_hidden, d_data))

    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        """Predicted noise."""
        phase = (t.float() / self.T)[:, None] * self.w[None, :]      # (B, F)
        feats = torch.cat([x_t, torch.sin(phase), torch.cos(phase)], dim=1)  # (B, d + 2*F)
        h = self.embed(feats)                                        # (B, d_h)
        return self.head(h + self.block(h))                          # (B, d)
