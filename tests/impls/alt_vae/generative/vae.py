"""Alternative VAE (canon #43): one encoder head of width 2z split with ``chunk``, the KL written as
``-1/2 sum(1 + logvar - mu^2 - exp(logvar))``, sigma from ``exp(logvar).sqrt()`` and the Bernoulli NLL
written as ``softplus(l) - x * l`` instead of calling ``binary_cross_entropy_with_logits``; it is the
same quantity because ``-log sigmoid(l) = softplus(-l)`` and ``softplus(l) - l = softplus(-l)``.

Shape letters: ``B`` batch, ``d_in`` features, ``d_h`` hidden, ``z`` latent.
What to test: the same checks as the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _same(mu: Tensor, logvar: Tensor) -> None:
    if mu.shape != logvar.shape:
        raise ValueError(f"logvar shape {tuple(logvar.shape)} differs from mu shape {tuple(mu.shape)}")


def gaussian_kl(mu: Tensor, logvar: Tensor) -> Tensor:
    """``(B, z) -> (B,)`` closed-form KL to the standard normal."""
    _same(mu, logvar)
    return -0.5 * torch.sum(1.0 + logvar - mu * mu - torch.exp(logvar), dim=-1)  # (B,) | ()


def reparameterize(mu: Tensor, logvar: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """``z = mu + sigma * eps``."""
    _same(mu, logvar)
    noise = torch.empty_like(mu).normal_(generator=generator)  # (B, z)
    return torch.addcmul(mu, torch.exp(logvar).sqrt(), noise)


def vae_loss(x: Tensor, x_logits: Tensor, mu: Tensor, logvar: Tensor, beta: float = 1.0,
             recon: str = "bce") -> dict[str, Tensor]:
    """``{"loss", "recon", "kl"}`` scalars."""
    if beta < 0:
        raise ValueError("beta must be >= 0")
    if recon not in ("bce", "mse"):
        raise ValueError(f"unknown recon {recon!r}")
    if x.shape != x_logits.shape:
        raise ValueError("x_logits must match x")
    _same(mu, logvar)
    if mu.shape[0] != x.shape[0]:
        raise ValueError("mu batch differs from x")
    if recon == "bce":
        rec = (F.softplus(x_logits) - x * x_logits).sum(dim=1).mean()  # ()
    else:
        rec = torch.sum((x_logits.sigmoid() - x) ** 2, dim=1).mean()  # ()
    kl = gaussian_kl(mu, logvar).mean()                        # ()
    return {"loss": rec + beta * kl, "recon": rec, "kl": kl}


class VAE(nn.Module):
    """MLP VAE with one ``2z``-wide encoder head."""

    def __init__(self, d_in: int, d_hidden: int = 64, d_latent: int = 8) -> None:
        super().__init__()
        if min(d_in, d_hidden, d_latent) < 1:
            raise ValueError("d_in, d_hidden and d_latent must be >= 1")
        self.d_in = d_in
        self.encoder = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, 2 * d_latent))
        self.decoder = nn.Sequential(nn.Linear(d_latent, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_in))

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, d_in) -> (B, z), (B, z)``."""
        if x.shape[-1] != self.d_in:
            raise ValueError(f"x width {x.shape[-1]} != d_in {self.d_in}")
        mu, logvar = self.encoder(x).chunk(2, dim=-1)          # (B, z), (B, z)
        return mu, logvar

    def decode(self, z: Tensor) -> Tensor:
        """``(B, z) -> (B, d_in)`` logits."""
        return self.decoder(z)                                 # (B, d_in)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``x_logits, mu, logvar``; z = mu in eval mode."""
        mu, logvar = self.encode(x)                            # (B, z), (B, z)
        z = reparameterize(mu, logvar) if self.training else mu
        return self.decode(z), mu, logvar

