"""Reference tests for canon #43: the VAE, its closed-form KL and the reparameterisation trick."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from canon_refs.generative import vae
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, randn

pytestmark = pytest.mark.canon("generative/vae")

D_IN = 16
TRAIN_STEPS = 300
MAX_LOSS_RATIO = 0.7  # loss falls by >= 30%; the reference's ratio is 0.40-0.42 on seeds 0-4


def make_prototype_bits(n: int, seed: int, d: int = D_IN, k: int = 4, flip: float = 0.05):
    """``n`` binary ``d``-vectors: one of ``k`` random prototypes with each bit flipped with prob. ``flip``."""
    g = torch.Generator().manual_seed(seed)
    prototypes = (torch.rand(k, d, generator=g) < 0.5).float()
    labels = torch.randint(0, k, (n,), generator=g)
    flips = (torch.rand(n, d, generator=g) < flip).float()
    return (prototypes[labels] + flips) % 2, labels


def full_data_loss(model: vae.VAE, X: torch.Tensor) -> float:
    """The eval-mode (z = mu) loss on the whole data set; the model's mode is restored."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        x_logits, mu, logvar = model(X)
        loss = vae.vae_loss(X, x_logits, mu, logvar)["loss"].item()
    model.train(was_training)
    return loss


# --- KL ------------------------------------------------------------------------------------------------


def test_gaussian_kl_closed_forms():
    zero = torch.zeros(3, 5, dtype=torch.float64)
    kl = vae.gaussian_kl(zero, zero)
    assert kl.shape == (3,) and kl.dtype == torch.float64
    assert_close(kl, torch.zeros(3, dtype=torch.float64), magnitude=1.0, what="gaussian_kl(0, 0)")  # terms of size 1 cancel
    one = vae.gaussian_kl(torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64))
    assert one.shape == ()
    assert_close(one, 0.5, what="gaussian_kl(1, 0)")
    wide = vae.gaussian_kl(torch.zeros(1, dtype=torch.float64), torch.full((1,), math.log(4.0), dtype=torch.float64))
    # 0.5 * (4 - 1 - ln 4): terms of size 4 cancel to 0.8
    assert_close(wide, 0.8068528194400547, magnitude=4.0, what="gaussian_kl(0, ln 4)")


def test_gaussian_kl_sums_over_latent_dims():
    mu = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    logvar = torch.tensor([[0.0, math.log(4.0), 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    kl = call_leaves_inputs_unchanged(vae.gaussian_kl, mu, logvar)
    assert_close(kl, torch.tensor([0.5 + 0.8068528194400547 + 2.0, 0.0], dtype=torch.float64), magnitude=4.0,
                 what="gaussian_kl sums over the latent dims")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gaussian_kl_matches_torch_distributions(dtype):
    mu = randn(6, 4, seed=1, dtype=dtype)
    logvar = randn(6, 4, seed=2, dtype=dtype)
    want = kl_divergence(Normal(mu, torch.exp(0.5 * logvar)), Normal(torch.zeros_like(mu), torch.ones_like(mu))).sum(-1)
    got = vae.gaussian_kl(mu, logvar)
    assert got.dtype == dtype
    # the terms mu^2, exp(logvar), 1, logvar cancel: compare at the size of their sum
    terms = (mu.pow(2) + logvar.exp() + 1 + logvar.abs()).sum(-1).max()
    assert_close(got, want, magnitude=float(terms), what=f"gaussian_kl vs torch.distributions ({dtype})")


# --- the reparameterisation trick ----------------------------------------------------------------------------


def test_reparameterized_draws_have_the_right_moments():
    n = 100_000
    mu = torch.tensor([0.5, -2.0, 3.0], dtype=torch.float64)
    var = torch.tensor([1.0, 4.0, 0.25], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    z = vae.reparameterize(mu.expand(n, 3), var.log().expand(n, 3), generator=gen)
    assert z.shape == (n, 3) and z.dtype == torch.float64
    se_mean = (var / n).sqrt()
    se_var = var * math.sqrt(2.0 / (n - 1))
    assert ((z.mean(0) - mu).abs() <= 4 * se_mean).all(), f"means {z.mean(0)} vs {mu}"
    assert ((z.var(0) - var).abs() <= 4 * se_var).all(), f"variances {z.var(0)} vs {var}"


def test_reparameterize_uses_the_generator():
    mu, logvar = torch.zeros(4, 3), torch.zeros(4, 3)
    a = vae.reparameterize(mu, logvar, generator=torch.Generator().manual_seed(5))
    b = vae.reparameterize(mu, logvar, generator=torch.Generator().manual_seed(5))
    c = vae.reparameterize(mu, logvar, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_reparameterization_gradients_are_exact():
    mu = randn(5, 3, seed=3, dtype=torch.float64, requires_grad=True)
    logvar = randn(5, 3, seed=4, dtype=torch.float64, requires_grad=True)
    z = vae.reparameterize(mu, logvar, generator=torch.Generator().manual_seed(1))
    sigma = torch.exp(0.5 * logvar.detach())
    eps = (z.detach() - mu.detach()) / sigma  # the drawn noise, read back from the sample
    weights = randn(5, 3, seed=5, dtype=torch.float64)
    (z * weights).sum().backward()
    assert_close(mu.grad, weights, what="d z / d mu (= 1)")
    # eps is read back from z, so it carries the rounding of z: compare at the size of |w| (|z| + |mu|)
    scale = float((weights.abs() * (z.detach().abs() + mu.detach().abs())).max())
    assert_close(logvar.grad, weights * 0.5 * sigma * eps, magnitude=scale, what="d z / d logvar (= sigma eps / 2)")


# --- the loss ---------------------------------------------------------------------------------------------


def test_vae_loss_bce_and_mse_written_out():
    x = (randn(4, 6, seed=6) > 0).double()
    logits = randn(4, 6, seed=7, dtype=torch.float64)
    mu = randn(4, 3, seed=8, dtype=torch.float64)
    logvar = randn(4, 3, seed=9, dtype=torch.float64)
    kl = 0.5 * (mu**2 + logvar.exp() - 1 - logvar).sum(-1).mean()
    kl_terms = float(0.5 * (mu**2 + logvar.exp() + 1 + logvar.abs()).sum(-1).max())  # what cancels in kl
    p = torch.sigmoid(logits)
    bce = -(x * torch.log(p) + (1 - x) * torch.log1p(-p)).sum(-1).mean()
    mse_recon = (p - x).pow(2).sum(-1).mean()
    scale = float(bce) + 2.5 * kl_terms
    out = call_leaves_inputs_unchanged(vae.vae_loss, x, logits, mu, logvar, beta=2.5)
    assert {"loss", "recon", "kl"} <= set(out)
    assert all(out[k].shape == () for k in ("loss", "recon", "kl"))
    assert_close(out["recon"], bce, what="vae_loss(bce)['recon']")
    assert_close(out["kl"], kl, magnitude=kl_terms, what="vae_loss['kl']")
    assert_close(out["loss"], bce + 2.5 * kl, magnitude=scale, what="vae_loss(beta=2.5)['loss']")
    mse = vae.vae_loss(x, logits, mu, logvar, recon="mse")
    assert_close(mse["recon"], mse_recon, what="vae_loss(mse)['recon']")
    assert_close(mse["loss"], mse_recon + kl, magnitude=float(mse_recon) + kl_terms, what="vae_loss(mse)['loss']")
    zero_beta = vae.vae_loss(x, logits, mu, logvar, beta=0.0)
    assert_close(zero_beta["loss"], bce, what="vae_loss(beta=0)['loss']")


def test_vae_loss_gradients_match_finite_differences():
    x = (randn(3, 4, seed=10) > 0).double()
    logits = randn(3, 4, seed=11, dtype=torch.float64, requires_grad=True)
    mu = randn(3, 2, seed=12, dtype=torch.float64, requires_grad=True)
    logvar = randn(3, 2, seed=13, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: vae.vae_loss(x, a, b, c, beta=0.7)["loss"], (logits, mu, logvar))


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bce_of_logits_of_1e4_is_finite_and_exact(dtype):
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=dtype)
    logits = torch.tensor([[1e4, -1e4, -1e4, 1e4]], dtype=dtype, requires_grad=True)
    mu, logvar = torch.zeros(1, 2, dtype=dtype), torch.zeros(1, 2, dtype=dtype)
    out = vae.vae_loss(x, logits, mu, logvar)
    assert torch.isfinite(out["loss"])
    assert_close(out["recon"], 2e4, what=f"vae_loss recon of two confidently wrong bits ({dtype})")
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.numerics_probe
def test_logvar_of_30_keeps_the_loss_finite():
    x = (randn(2, 4, seed=14) > 0).float()
    logits = randn(2, 4, seed=15, requires_grad=True)
    mu = randn(2, 3, seed=16, requires_grad=True)
    logvar = torch.tensor([[30.0, -30.0, 0.0], [-30.0, 30.0, 30.0]], requires_grad=True)
    out = vae.vae_loss(x, logits, mu, logvar)
    z = vae.reparameterize(mu, logvar, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(out["loss"]) and torch.isfinite(z).all()
    (out["loss"] + z.sum()).backward()
    assert torch.isfinite(logvar.grad).all() and torch.isfinite(mu.grad).all()


# --- the model -----------------------------------------------------------------------------------------


def test_model_shapes_and_modes():
    torch.manual_seed(0)
    model = vae.VAE(D_IN, d_hidden=32, d_latent=5)
    x = (torch.rand(7, D_IN) < 0.5).float()
    mu, logvar = model.encode(x)
    assert mu.shape == (7, 5) and logvar.shape == (7, 5)
    assert model.decode(mu).shape == (7, D_IN)
    model.train()
    x_logits, mu_t, logvar_t = model(x)
    assert x_logits.shape == (7, D_IN)
    assert_close(mu_t, mu, what="VAE(x) mu vs encode(x) mu")
    assert not torch.allclose(x_logits, model.decode(mu)), "train mode must sample z"
    model.eval()
    first, mu_e, _ = model(x)
    second, _, _ = model(x)
    assert torch.equal(first, second), "eval-mode forward must be deterministic"
    assert_close(first, model.decode(mu_e), what="eval-mode VAE(x) logits vs decode(mu)")


def test_training_gradient_reaches_the_encoder():
    torch.manual_seed(1)
    model = vae.VAE(D_IN)
    x, _ = make_prototype_bits(8, seed=3)
    x_logits, mu, logvar = model(x)
    mu.retain_grad()
    logvar.retain_grad()
    vae.vae_loss(x, x_logits, mu, logvar)["recon"].backward()  # recon alone reaches the encoder only via z
    assert mu.grad is not None and mu.grad.abs().sum() > 0
    assert logvar.grad is not None and logvar.grad.abs().sum() > 0, "logvar must get a gradient through the sample"
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, f"{name} gets no gradient"


def test_loss_falls_on_noisy_prototypes():
    X, _ = make_prototype_bits(512, seed=0)
    torch.manual_seed(0)
    model = vae.VAE(D_IN, d_hidden=64, d_latent=8)
    before = full_data_loss(model, X)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(TRAIN_STEPS):
        idx = torch.randint(0, len(X), (64,), generator=gen)
        x_logits, mu, logvar = model(X[idx])
        out = vae.vae_loss(X[idx], x_logits, mu, logvar)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        losses.append(out["loss"].item())
    assert all(math.isfinite(v) for v in losses)
    after = full_data_loss(model, X)
    assert after <= MAX_LOSS_RATIO * before, f"loss {before:.3f} -> {after:.3f} after {TRAIN_STEPS} steps"
    assert sum(losses[-20:]) / 20 < sum(losses[:20]) / 20
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(X[:16])[0], model(X[:16])[0])


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_errors():
    x = torch.zeros(3, 4)
    logits = torch.zeros(3, 4)
    mu, logvar = torch.zeros(3, 2), torch.zeros(3, 2)
    with pytest.raises(ValueError):
        vae.vae_loss(x, logits, mu, logvar, beta=-0.1)
    with pytest.raises(ValueError):
        vae.vae_loss(x, logits, mu, logvar, recon="l1")
    with pytest.raises(ValueError):
        vae.vae_loss(x, torch.zeros(3, 5), mu, logvar)
    with pytest.raises(ValueError):
        vae.vae_loss(x, logits, mu, torch.zeros(3, 3))
    with pytest.raises(ValueError):
        vae.vae_loss(x, logits, torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError):
        vae.gaussian_kl(mu, torch.zeros(3, 3))
    with pytest.raises(ValueError):
        vae.reparameterize(mu, torch.zeros(2, 2))
    model = vae.VAE(4)
    with pytest.raises(ValueError):
        model(torch.zeros(3, 5))
    with pytest.raises(ValueError):
        vae.VAE(4, d_latent=0)
