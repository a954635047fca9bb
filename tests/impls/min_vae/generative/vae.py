"""A variational autoencoder (VAE) with the reparameterisation trick, in torch.

Plan: the encoder outputs a diagonal Gaussian q(z|x) as (mu, logvar) -- log-variance instead of
sigma because it is unconstrained and exp keeps sigma positive; sampling is z = mu + sigma * eps so
gradients flow to mu and logvar. Loss = reconstruction (BCE on logits, stable) + beta * closed-form KL.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["VAE", "gaussian_kl", "reparameterize", "vae_loss"]


def gaussian_kl(mu: Tensor, logvar: Tensor) -> Tensor:
    """``KL(N(mu, diag(sigma^2)) || N(0, I)) = 1/2 sum_z (mu^2 + sigma^2 - 1 - log sigma^2)``.

    Args:
        mu: ``(B, z)`` (or ``(z,)``) means.
        logvar: log-variances ``log sigma^2``, same shape as ``mu``.

    Returns:
        ``(B,)`` (or ``()``) KL per example, summed over the latent dims, in the dtype of ``mu``.

    Raises:
        ValueError: ``mu`` not floating 1-D/2-D, or ``logvar`` of another shape.

    Source: Kingma & Welling, "Auto-Encoding Variational Bayes" (2014), Appendix B.
    """
    return 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(dim=-1)


def reparameterize(mu: Tensor, logvar: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Draw ``z = mu + exp(logvar / 2) * eps``, ``eps ~ N(0, I)``, differentiably in ``mu`` and ``logvar``.

    Args:
        mu: ``(B, z)`` (or ``(z,)``) means.
        logvar: log-variances, same shape.
        generator: source of ``eps``; ``None`` uses torch's global RNG.

    Returns:
        ``(B, z)`` sample in the dtype of ``mu``; ``dz/dmu = 1``, ``dz/dlogvar = sigma * eps / 2``.

    Raises:
        ValueError: ``mu`` not floating 1-D/2-D, or ``logvar`` of another shape.

    Source: Kingma & Welling (2014), Sec. 2.4 (the reparameterisation trick).
    """
    eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
    return mu + torch.exp(0.5 * logvar) * eps


def vae_loss(x: Tensor, x_logits: Tensor, mu: Tensor, logvar: Tensor, beta: float = 1.0,
             recon: Literal["bce", "mse"] = "bce") -> dict[str, Tensor]:
    """The negative ELBO (with a ``beta`` weight on the KL): ``recon + beta * kl``.

    Args:
        x: ``(B, d_in)`` targets; in [0, 1] for ``"bce"``.
        x_logits: ``(B, d_in)`` decoder logits.
        mu, logvar: ``(B, z)`` posterior parameters of the same batch.
        beta: KL weight (>= 0; 1 is the ELBO, > 1 the beta-VAE).
        recon: ``"bce"`` = ``binary_cross_entropy_with_logits(x_logits, x)``; ``"mse"`` = squared error
            between ``sigmoid(x_logits)`` and ``x``.

    Returns:
        ``{"loss", "recon", "kl"}``, each ``()``: the reconstruction summed over features and the KL
        summed over latent dims, both averaged over the batch.

    Raises:
        ValueError: ``beta < 0`` (or not finite), unknown ``recon``, ``x`` and ``x_logits`` of different
        shapes or not 2-D, ``mu``/``logvar`` not ``(B, z)`` for the same ``B``.

    Source: Kingma & Welling (2014), Eq. 10; Higgins et al., "beta-VAE" (2017).
    """
    if recon == "bce":
        rec = F.binary_cross_entropy_with_logits(x_logits, x, reduction="none").sum(dim=-1)  # (B,)
    else:
        rec = (torch.sigmoid(x_logits) - x).pow(2).sum(dim=-1)                               # (B,)
    rec = rec.mean()
    kl = gaussian_kl(mu, logvar).mean()
    return {"loss": rec + beta * kl, "recon": rec, "kl": kl}


class VAE(nn.Module):
    """MLP VAE: ``x -> Linear -> ReLU -> (mu, logvar)``; ``z -> Linear -> ReLU -> Linear -> logits``.

    Args:
        d_in: data width (>= 1).
        d_hidden: hidden width of the encoder and the decoder (>= 1).
        d_latent: latent width ``z`` (>= 1).

    ``forward`` maps ``(B, d_in)`` to ``(x_logits (B, d_in), mu (B, z), logvar (B, z))``; it samples ``z``
    with :func:`reparameterize` (global RNG) in train mode and uses ``z = mu`` in eval mode.

    Raises:
        ValueError: in ``__init__`` a width < 1; in ``encode``/``forward`` an ``x`` that is not
        ``(B, d_in)``; in ``decode`` a ``z`` that is not ``(B, d_latent)``.

    Source: Kingma & Welling (2014), Appendix C.2 (Gaussian encoder, Bernoulli decoder).
    """

    def __init__(self, d_in: int, d_hidden: int = 64, d_latent: int = 8) -> None:
        super().__init__()
        self.enc = nn.Linear(d_in, d_hidden)
        self.fc_mu = nn.Linear(d_hidden, d_latent)
        self.fc_logvar = nn.Linear(d_hidden, d_latent)
        self.dec1 = nn.Linear(d_latent, d_hidden)
        self.dec2 = nn.Linear(d_hidden, d_in)

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, d_in) -> mu (B, z), logvar (B, z)``."""
        h = F.relu(self.enc(x))
        return self.fc_mu(h), self.fc_logvar(h)

    def decode(self, z: Tensor) -> Tensor:
        """``(B, z) -> (B, d_in)`` Bernoulli logits (apply ``sigmoid`` for probabilities)."""
        return self.dec2(F.relu(self.dec1(z)))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, d_in) -> (x_logits (B, d_in), mu (B, z), logvar (B, z))``; ``z`` sampled only in train mode."""
        mu, logvar = self.encode(x)
        z = reparameterize(mu, logvar) if self.training else mu
        return self.decode(z), mu, logvar
