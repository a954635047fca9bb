"""Reference tests for canon #44: DDPM schedules, forward process, loss, sampling and a tiny denoiser.

Schedule quantities are recomputed here from their definitions; the posterior is checked against the
precision-weighted product of the two Gaussians it comes from (an independent derivation of Eq. 7).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from canon_refs.generative import ddpm
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("generative/ddpm")

BLOB_CENTRES = torch.tensor([[1.5, 0.5], [-0.5, 1.5]])
BLOB_STD = 0.3
TRAIN_T = 200          # cosine schedule: alpha_bar_{T-1} = 6e-8, so x_{T-1} is pure noise
TRAIN_STEPS = 1000
MAX_LOSS_RATIO = 0.6   # reference: 0.312-0.315 on seeds 0-4
MAX_MEAN_ERROR = 0.3   # reference: 0.013-0.033 on seeds 0-4 (1024 samples)
MIN_NEAR_A_BLOB = 0.8  # share of samples within 1.0 of a centre; reference: 0.983-0.989
# Float64 schedule quantities compare at SCHEDULE_COND times 16 ulps: alpha_bar is a product of up to 1000
# factors (a rounding per factor), and 1 - alpha_bar_0 = 1e-4 amplifies alpha_bar's rounding 1e4-fold, so
# an equally correct evaluation order (cumprod, exp(cumsum(log1p)), 1 - alpha_bar vs a sum of betas) can
# differ by that much.
SCHEDULE_COND = 1e4


def alpha_bars_of(betas: torch.Tensor) -> torch.Tensor:
    return torch.cumprod(1.0 - betas.double(), dim=0)


def _close(value, expected, what: str, magnitude: float | None = None, dtype=None) -> None:
    """A float64 schedule-derived value against a trusted one (see SCHEDULE_COND)."""
    assert_close(torch.as_tensor(value).detach(), torch.as_tensor(expected, dtype=torch.float64), dtype=dtype,
                 magnitude=magnitude, cond=SCHEDULE_COND, what=what)


class OracleEps(nn.Module):
    """The exact noise predictor for data concentrated on one point ``x0_star``."""

    def __init__(self, betas: torch.Tensor, x0_star: torch.Tensor) -> None:
        super().__init__()
        self.alpha_bars = alpha_bars_of(betas)
        self.x0_star = x0_star

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        ab = self.alpha_bars[t].to(x_t.dtype).reshape(-1, *([1] * (x_t.dim() - 1)))
        return (x_t - ab.sqrt() * self.x0_star.to(x_t.dtype)) / (1 - ab).sqrt()


class Recorder(nn.Module):
    """Predicts zero noise and remembers what it was called with."""

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        self.x_t, self.t = x_t, t
        return torch.zeros_like(x_t)


def two_blobs(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    return BLOB_CENTRES[labels] + BLOB_STD * torch.randn(n, 2, generator=g)


# --- schedules ------------------------------------------------------------------------------------------


def test_linear_schedule_closed_forms():
    betas = ddpm.linear_beta_schedule(1000)
    assert betas.shape == (1000,) and betas.dtype == torch.float64
    _close(betas[[0, -1]], [1e-4, 0.02], "linear_beta_schedule(1000)[[0, -1]]")
    d = ddpm.DDPM(betas.clone())
    assert d.T == 1000
    _close(d.alpha_bars[0], 0.9999, "alpha_bars[0]")
    _close(d.alpha_bars[499], 0.07858724288177824, "alpha_bars[499]")
    _close(d.alpha_bars[999], 4.035829765375676e-05, "alpha_bars[999]")
    _close(d.posterior_variance[1], 5.4531876613021935e-05, "posterior_variance[1]")
    assert d.posterior_variance[0].item() == 0.0


def test_buffers_follow_their_definitions():
    betas = ddpm.linear_beta_schedule(50, 1e-3, 0.05)
    d = ddpm.DDPM(betas)
    ab = alpha_bars_of(betas)
    for name in ("betas", "alphas", "alpha_bars", "alpha_bars_prev", "posterior_variance"):
        value = getattr(d, name)
        assert value.shape == (50,) and value.dtype == torch.float64, name
    _close(d.alphas, 1 - betas, "DDPM.alphas")
    _close(d.alpha_bars, ab, "DDPM.alpha_bars")
    assert d.alpha_bars_prev[0].item() == 1.0
    _close(d.alpha_bars_prev[1:], ab[:-1], "DDPM.alpha_bars_prev[1:]")
    want = betas[1:] * (1 - ab[:-1]) / (1 - ab[1:])
    _close(d.posterior_variance[1:], want, "DDPM.posterior_variance[1:]")
    assert (d.posterior_variance[1:] < betas[1:]).all(), "the posterior is narrower than the forward step"


def test_cosine_schedule():
    betas = ddpm.cosine_beta_schedule(1000)
    assert betas.shape == (1000,) and betas.dtype == torch.float64
    assert (betas > 0).all() and (betas <= 0.999).all()
    assert betas[-1].item() == 0.999  # the cap binds at the last step
    f = lambda t: math.cos((t / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    _close(betas[0], 1 - f(1) / f(0), "cosine_beta_schedule(1000)[0]")
    _close(betas[500], 1 - f(501) / f(500), "cosine_beta_schedule(1000)[500]")
    ab = ddpm.DDPM(betas).alpha_bars
    assert (ab > 0).all() and (ab < 1).all()
    assert (ab[1:] < ab[:-1]).all(), "alpha_bar must be strictly decreasing"
    capped = ddpm.cosine_beta_schedule(100, max_beta=0.5)
    assert capped.max().item() == 0.5


@pytest.mark.edge_case
def test_single_step_schedule():
    assert ddpm.linear_beta_schedule(1, beta_start=0.1, beta_end=0.3).tolist() == [0.1]  # T = 1: [beta_start]
    d = ddpm.DDPM(ddpm.linear_beta_schedule(1, beta_start=0.3, beta_end=0.3))
    assert d.T == 1 and d.betas.tolist() == [0.3]
    assert d.posterior_variance.tolist() == [0.0]
    out = d.sample(OracleEps(d.betas, torch.tensor([0.25, -0.5])), (3, 2), generator=torch.Generator().manual_seed(0))
    # one float32 step: x0_hat = (x - sqrt(0.3) eps) / sqrt(0.7) from noise of size ~3
    assert_close(out, torch.tensor([[0.25, -0.5]] * 3), magnitude=4.0, what="DDPM(T=1).sample(oracle)")


# --- forward process ------------------------------------------------------------------------------------


def test_q_sample_without_noise_scales_by_sqrt_alpha_bar_per_example():
    d = ddpm.DDPM(ddpm.linear_beta_schedule(1000))
    x0 = randn(4, 2, 3, seed=1, dtype=torch.float64)
    t = torch.tensor([0, 10, 499, 999])
    ab = alpha_bars_of(ddpm.linear_beta_schedule(1000))[t][:, None, None]
    out = d.q_sample(x0, t, noise=torch.zeros_like(x0))
    assert out.shape == x0.shape and out.dtype == torch.float64
    _close(out, ab.sqrt() * x0, "q_sample(x0, t, noise=0)")
    noise = randn(4, 2, 3, seed=2, dtype=torch.float64)
    got = call_leaves_inputs_unchanged(d.q_sample, x0, t, noise=noise)
    _close(got, ab.sqrt() * x0 + (1 - ab).sqrt() * noise, "q_sample(x0, t, noise)")


@pytest.mark.parametrize("step", [5, 300, 900])
def test_q_sample_moments(step):
    n = 50_000
    d = ddpm.DDPM(ddpm.linear_beta_schedule(1000))
    x0 = torch.full((n, 1), 1.7, dtype=torch.float64)
    x_t = d.q_sample(x0, torch.full((n,), step), generator=torch.Generator().manual_seed(step))
    ab = alpha_bars_of(d.betas)[step].item()
    mean, var = math.sqrt(ab) * 1.7, 1 - ab
    assert abs(x_t.mean().item() - mean) <= 4 * math.sqrt(var / n)
    assert abs(x_t.var().item() - var) <= 4 * var * math.sqrt(2 / (n - 1))


def test_q_sample_is_reproducible_with_a_generator():
    d = ddpm.DDPM(ddpm.linear_beta_schedule(100))
    x0, t = randn(8, 2, seed=3), torch.arange(8) * 10
    a = d.q_sample(x0, t, generator=torch.Generator().manual_seed(4))
    b = d.q_sample(x0, t, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert not torch.equal(a, d.q_sample(x0, t, generator=torch.Generator().manual_seed(5)))


def test_predict_x0_inverts_q_sample():
    d = ddpm.DDPM(ddpm.cosine_beta_schedule(200))
    x0 = randn(5, 3, seed=6, dtype=torch.float64)
    eps = randn(5, 3, seed=7, dtype=torch.float64)
    t = torch.tensor([0, 1, 50, 120, 180])
    _close(d.predict_x0(d.q_sample(x0, t, eps), t, eps), x0, "predict_x0(q_sample(x0, t, eps), t, eps)")


def test_posterior_is_the_product_of_the_two_gaussians():
    betas = ddpm.linear_beta_schedule(1000)
    d = ddpm.DDPM(betas)
    x0 = randn(3, 2, 2, seed=8, dtype=torch.float64)
    x_t = randn(3, 2, 2, seed=9, dtype=torch.float64)
    t = torch.tensor([1, 250, 999])
    mean, var = call_leaves_inputs_unchanged(d.posterior_mean_variance, x0, x_t, t)
    assert mean.shape == x_t.shape
    assert torch.broadcast_shapes(var.shape, x_t.shape) == x_t.shape and var.shape[0] == 3
    ab = alpha_bars_of(betas)
    beta, alpha, ab_prev = betas[t], 1 - betas[t], ab[t - 1]
    # q(x_t | x_{t-1}) = N(sqrt(alpha) x_{t-1}, beta) and q(x_{t-1} | x0) = N(sqrt(ab_prev) x0, 1 - ab_prev)
    precision = alpha / beta + 1 / (1 - ab_prev)
    want_mean = ((alpha.sqrt() / beta)[:, None, None] * x_t
                 + (ab_prev.sqrt() / (1 - ab_prev))[:, None, None] * x0) / precision[:, None, None]
    _close(mean, want_mean, "posterior_mean_variance(...) mean")
    _close(var.expand_as(x_t), (1 / precision)[:, None, None].expand_as(x_t), "posterior_mean_variance(...) variance")


@pytest.mark.edge_case
def test_posterior_at_step_zero_is_the_clean_data():
    d = ddpm.DDPM(ddpm.linear_beta_schedule(1000))
    x0, x_t = randn(2, 4, seed=10, dtype=torch.float64), randn(2, 4, seed=11, dtype=torch.float64)
    mean, var = d.posterior_mean_variance(x0, x_t, torch.zeros(2, dtype=torch.long))
    _close(mean, x0, "posterior mean at t = 0")
    assert torch.count_nonzero(var) == 0


# --- loss -----------------------------------------------------------------------------------------------


def test_loss_is_the_mse_to_the_noise_that_was_added():
    d = ddpm.DDPM(ddpm.linear_beta_schedule(100))
    x0 = randn(64, 3, seed=12, dtype=torch.float64)
    model = Recorder()
    loss = d.loss(model, x0, generator=torch.Generator().manual_seed(0))
    assert loss.shape == ()
    t = model.t
    assert t.shape == (64,) and t.dtype == torch.long and 0 <= int(t.min()) and int(t.max()) < 100
    ab = alpha_bars_of(ddpm.linear_beta_schedule(100))[t][:, None]
    eps = (model.x_t - ab.sqrt() * x0) / (1 - ab).sqrt()
    _close(loss, eps.pow(2).mean(), "DDPM.loss vs the MSE of the noise read back from x_t")
    assert 0.5 < eps.std().item() < 1.5  # the noise read back is standard normal-ish
    again = d.loss(Recorder(), x0, generator=torch.Generator().manual_seed(0))
    assert again.item() == loss.item()


def test_loss_draws_every_step_uniformly():
    d = ddpm.DDPM(ddpm.linear_beta_schedule(5))
    model = Recorder()
    n = 20_000
    d.loss(model, torch.zeros(n, 1), generator=torch.Generator().manual_seed(1))
    counts = torch.bincount(model.t, minlength=5)
    assert counts.shape == (5,), "t must lie in [0, T)"
    p = 1 / 5
    assert ((counts / n - p).abs() <= 4 * math.sqrt(p * (1 - p) / n)).all(), counts.tolist()


def test_oracle_model_has_zero_loss_and_samples_the_data_point():
    betas = ddpm.linear_beta_schedule(100)
    d = ddpm.DDPM(betas)
    x0_star = torch.tensor([0.7, -1.3], dtype=torch.float64)
    oracle = OracleEps(betas, x0_star)
    loss = d.loss(oracle, x0_star.expand(16, 2).clone(), generator=torch.Generator().manual_seed(2))
    # the oracle's estimate is off by rounding amplified by 1 / sqrt(1 - alpha_bar_0) = 100: (100 * 1e-15)^2
    assert loss.item() <= 1e-20
    samples = d.sample(oracle, (16, 2), generator=torch.Generator().manual_seed(3))
    assert samples.shape == (16, 2)
    # The last step's coefficients divide by 1 - alpha_bar_0 = 1e-4: computed from the schedule cast to
    # float32 first, as the stub allows ("cast to the data dtype on use"), they carry float32's rounding
    # amplified 1e4-fold (blind round 35 measured 1.7e-4 relative); that bound also covers the rounding of
    # 100 float32 steps at the size of the noise (~4 x 200 ulps). Noise added at t = 0 (std 0.01) or a
    # wrong coefficient is still far outside it.
    amplified = 1.0 / (1.0 - float(alpha_bars_of(betas)[0]))
    assert_close(samples, x0_star.float().expand(16, 2), dtype=torch.float32, magnitude=float(x0_star.abs().max()),
                 cond=amplified, ulps=2, what="DDPM(T=100).sample(oracle)")


@pytest.mark.edge_case
def test_last_step_adds_no_noise():
    betas = ddpm.linear_beta_schedule(100)
    d = ddpm.DDPM(betas)
    x0_star = torch.tensor([0.5, 2.0], dtype=torch.float64)
    x_t = randn(6, 2, seed=13, dtype=torch.float64)
    a = d.p_sample(OracleEps(betas, x0_star), x_t, 0, generator=torch.Generator().manual_seed(0))
    b = d.p_sample(OracleEps(betas, x0_star), x_t, 0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    _close(a, x0_star.expand(6, 2), "p_sample(oracle, x_t, 0)", magnitude=3.0)


@pytest.mark.parametrize("step", [2, 400])  # at t = 2 the posterior variance is 0.6 beta_t, at 400 almost beta_t
def test_reverse_step_has_the_posterior_moments(step):
    n = 40_000
    betas = ddpm.linear_beta_schedule(1000)
    d = ddpm.DDPM(betas)
    x0_star = torch.tensor([1.0], dtype=torch.float64)
    x_t = torch.full((n, 1), 0.3, dtype=torch.float64)
    oracle = OracleEps(betas, x0_star)
    out = d.p_sample(oracle, x_t, step, generator=torch.Generator().manual_seed(4))
    ab = alpha_bars_of(betas)
    mu = float(betas[step] * ab[step - 1].sqrt() / (1 - ab[step]) * 1.0
               + (1 - betas[step]).sqrt() * (1 - ab[step - 1]) / (1 - ab[step]) * 0.3)
    sigma2 = float(betas[step] * (1 - ab[step - 1]) / (1 - ab[step]))
    assert abs(out.mean().item() - mu) <= 4 * math.sqrt(sigma2 / n)
    assert abs(out.var().item() - sigma2) <= 4 * sigma2 * math.sqrt(2 / (n - 1))


def test_sample_is_reproducible_with_a_generator():
    betas = ddpm.linear_beta_schedule(20)
    d = ddpm.DDPM(betas)
    torch.manual_seed(0)
    model = ddpm.TinyDenoiser(2, d_hidden=16, T=20)
    a = d.sample(model, (5, 2), generator=torch.Generator().manual_seed(9))
    b = d.sample(model, (5, 2), generator=torch.Generator().manual_seed(9))
    assert a.shape == (5, 2) and a.dtype == torch.float32 and torch.equal(a, b)


# --- numerics -------------------------------------------------------------------------------------------


@pytest.mark.numerics_probe
def test_half_precision_forward_process_matches_float32():
    d = ddpm.DDPM(ddpm.linear_beta_schedule(1000))
    x0, noise = randn(8, 4, seed=14), randn(8, 4, seed=15)
    t = torch.tensor([0, 1, 10, 100, 400, 700, 998, 999])
    assert_low_precision_matches(lambda a, b: d.q_sample(a, t, b), x0, noise)
    assert d.q_sample(x0.half(), t, noise.half()).dtype == torch.float16


@pytest.mark.numerics_probe
def test_extreme_steps_stay_finite():
    # The last cosine step has alpha_bar = 2.4e-9: predict_x0 divides by sqrt(alpha_bar) = 4.9e-5.
    d = ddpm.DDPM(ddpm.cosine_beta_schedule(1000))
    x0, eps = randn(4, 3, seed=16), randn(4, 3, seed=17)
    t = torch.tensor([0, 1, 998, 999])
    x_t = d.q_sample(x0, t, eps)
    x0_hat = d.predict_x0(x_t, t, eps)
    assert torch.isfinite(x_t).all() and torch.isfinite(x0_hat).all()
    assert_close(x0_hat[:2], x0[:2], magnitude=float(x0.abs().max()), what="predict_x0(q_sample(x0)) in float32 at t = 0, 1")
    mean, var = d.posterior_mean_variance(x0_hat, x_t, t)
    assert torch.isfinite(mean).all() and torch.isfinite(var).all() and (var >= 0).all()


# --- the tiny denoiser ------------------------------------------------------------------------------------


def test_tiny_denoiser_shapes_and_time_conditioning():
    torch.manual_seed(0)
    model = ddpm.TinyDenoiser(3, d_hidden=32, T=50)
    x = randn(6, 3, seed=18)
    out = model(x, torch.tensor([0, 1, 2, 10, 25, 49]))
    assert out.shape == (6, 3) and out.dtype == torch.float32
    same_x = x[:1].expand(2, 3)
    early_late = model(same_x, torch.tensor([0, 49]))
    assert not torch.allclose(early_late[0], early_late[1]), "the output must depend on t"


def test_tiny_denoiser_learns_two_blobs():
    betas = ddpm.cosine_beta_schedule(TRAIN_T)
    d = ddpm.DDPM(betas)
    data, held_out = two_blobs(2048, seed=0), two_blobs(2048, seed=1)
    torch.manual_seed(0)
    model = ddpm.TinyDenoiser(2, d_hidden=128, T=TRAIN_T)
    with torch.no_grad():
        initial = d.loss(model, held_out, generator=torch.Generator().manual_seed(123)).item()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / TRAIN_STEPS)
    gen = torch.Generator().manual_seed(0)
    for _ in range(TRAIN_STEPS):
        idx = torch.randint(0, len(data), (128,), generator=gen)
        loss = d.loss(model, data[idx], generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        final = d.loss(model, held_out, generator=torch.Generator().manual_seed(123)).item()
    assert final < MAX_LOSS_RATIO * initial, f"loss {initial:.3f} -> {final:.3f} after {TRAIN_STEPS} steps"
    samples = d.sample(model, (1024, 2), generator=torch.Generator().manual_seed(7))
    assert torch.isfinite(samples).all()
    error = (samples.mean(0) - data.mean(0)).norm().item()
    assert error < MAX_MEAN_ERROR, f"sample mean {samples.mean(0).tolist()} vs data mean {data.mean(0).tolist()}"
    nearest = torch.cdist(samples, BLOB_CENTRES)
    assert (nearest.min(dim=1).values < 1.0).float().mean().item() >= MIN_NEAR_A_BLOB
    share = (nearest.argmin(dim=1) == 0).float().mean().item()
    assert 0.3 < share < 0.7, f"one blob gets {share:.2f} of the samples"


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.contract
@pytest.mark.parametrize(
    "betas",
    [torch.tensor([0.1, 0.0, 0.2]), torch.tensor([0.1, 1.0]), torch.tensor([-0.1, 0.2]),
     torch.tensor([0.1, float("nan")]), torch.full((2, 3), 0.1), torch.zeros(0)],
    ids=["zero", "one", "negative", "nan", "2-D", "empty"],
)
def test_bad_betas(betas):
    with pytest.raises(ValueError):
        ddpm.DDPM(betas)


@pytest.mark.contract
def test_errors():
    for make in (ddpm.linear_beta_schedule, ddpm.cosine_beta_schedule):
        with pytest.raises(ValueError):
            make(0)
    d = ddpm.DDPM(ddpm.linear_beta_schedule(10))
    x0 = torch.zeros(3, 2)
    for bad_t in (torch.tensor([0, 10, 1]), torch.tensor([-1, 0, 1])):
        with pytest.raises(ValueError):
            d.q_sample(x0, bad_t)
    with pytest.raises(ValueError):
        d.q_sample(x0, torch.tensor([0, 1, 2]), noise=torch.zeros(3, 3))
    with pytest.raises(ValueError):
        d.p_sample(Recorder(), x0, 10)
    with pytest.raises(ValueError):
        d.predict_x0(x0, torch.tensor([0, 1, 11]), x0)
