"""Reference tests for canon #13 BatchNorm, #14 LayerNorm (NumPy) and #15 RMSNorm (torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from canon_refs.nn import normalization, normalization_torch
from pytest_mlcanon.testing import (
    TOL,
    assert_close,
    assert_grad_matches,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
    strict_numpy,
)


def _close(got, want, what: str, cond: float = 1.0) -> None:
    """A normalised output (or its gradient) against a trusted value: a few ulps of its size in the
    dtype it was computed in, times ``cond`` for the reductions (a mean over the normalised axis) and
    the division by a standard deviation that sit inside it."""
    size = float(np.max(np.abs(np.asarray(want.detach() if isinstance(want, torch.Tensor) else want)))) + 1.0
    assert_close(got, want, magnitude=size, cond=cond, what=what)

# ---------------------------------------------------------------------------------------------------
# #15 RMSNorm
# ---------------------------------------------------------------------------------------------------


class TestRMSNorm:
    pytestmark = pytest.mark.canon("nn/rmsnorm")

    def test_closed_form_three_four(self):
        x = torch.tensor([3.0, 4.0], dtype=torch.float64)
        want = torch.tensor([0.848528137423857, 1.131370849898476], dtype=torch.float64)
        for weight in (None, torch.ones(2, dtype=torch.float64)):
            y = call_leaves_inputs_unchanged(normalization_torch.rms_norm, x, weight, eps=1e-12)
            assert y.dtype == torch.float64
            _close(y, want, "rms_norm([3, 4])", cond=4)  # want quoted to 15 digits
        y = normalization_torch.RMSNorm(2, eps=1e-12)(x)
        assert y.dtype == torch.float64
        _close(y, want, "RMSNorm(2)([3, 4])", cond=4)

    def test_eps_sits_inside_the_square_root(self):
        # mean square 12.5e-6, + eps 3.5e-6 = 16e-6, root 4e-3: exactly [0.75, 1.0].
        # eps added to the root instead (rms + eps) gives [0.8384, 1.1179].
        x = torch.tensor([0.003, 0.004], dtype=torch.float64)
        y = normalization_torch.rms_norm(x, eps=3.5e-6)
        _close(y, torch.tensor([0.75, 1.0], dtype=torch.float64), "rms_norm([0.003, 0.004], eps=3.5e-6)", cond=4)

    @pytest.mark.parametrize("scale, eps", [(1.0, 1e-6), (1.0, 1e-2), (1e-3, 1e-6)])
    def test_matches_torch_rms_norm(self, scale, eps):
        x = scale * randn(4, 5, 8, seed=1)
        w = randn(8, seed=2)
        got = normalization_torch.rms_norm(x, w, eps=eps)
        want = F.rms_norm(x, (8,), w, eps=eps)
        assert got.shape == (4, 5, 8) and got.dtype == torch.float32
        _close(got, want, "rms_norm(x, w)", cond=8)
        _close(normalization_torch.rms_norm(x, eps=eps), F.rms_norm(x, (8,), eps=eps), "rms_norm(x)", cond=8)

    def test_module_parameters_and_default_eps(self):
        torch.manual_seed(0)
        norm = normalization_torch.RMSNorm(8)
        params = dict(norm.named_parameters())
        assert list(params) == ["weight"]
        assert norm.weight.shape == (8,) and norm.weight.dtype == torch.float32
        assert norm.weight.requires_grad
        torch.testing.assert_close(norm.weight.detach(), torch.ones(8), atol=0, rtol=0)
        with torch.no_grad():
            norm.weight.copy_(randn(8, seed=3))
        x = randn(2, 3, 8, seed=4)
        _close(norm(x), F.rms_norm(x, (8,), norm.weight, eps=1e-6), "RMSNorm(8)(x)", cond=8)

    def test_module_gradient_matches_torch(self):
        norm = normalization_torch.RMSNorm(6)
        with torch.no_grad():
            norm.weight.copy_(randn(6, seed=5))
        x = randn(3, 6, seed=6, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        w_ref = norm.weight.detach().clone().requires_grad_(True)
        dy = randn(3, 6, seed=7)
        (norm(x) * dy).sum().backward()
        (F.rms_norm(x_ref, (6,), w_ref, eps=1e-6) * dy).sum().backward()
        _close(x.grad, x_ref.grad, "RMSNorm: dL/dx", cond=6)
        _close(norm.weight.grad, w_ref.grad, "RMSNorm: dL/dweight", cond=6)

    def test_scale_invariance(self):
        norm = normalization_torch.RMSNorm(16)
        x = randn(4, 16, seed=8)
        # eps = 1e-6 against mean squares of ~1 and ~1e6 moves the output by ~5e-7 relative
        torch.testing.assert_close(norm(1000.0 * x), norm(x), rtol=1e-5, atol=1e-6)
        x64 = x.double()
        torch.testing.assert_close(
            normalization_torch.rms_norm(1000.0 * x64, eps=1e-12),
            normalization_torch.rms_norm(x64, eps=1e-12),
            rtol=1e-10,
            atol=1e-12,
        )  # eps = 1e-12 moves the float64 output by ~1e-12 relative

    def test_unit_root_mean_square(self):
        x = randn(5, 32, seed=9, dtype=torch.float64)
        y = normalization_torch.rms_norm(x, eps=1e-12)
        ms = x.pow(2).mean(-1)
        _close(y.pow(2).mean(-1), ms / (ms + 1e-12), "mean(rms_norm(x)**2)", cond=32)

    def test_gradcheck_float64(self):
        x = randn(3, 5, seed=10, dtype=torch.float64, requires_grad=True)
        w = randn(5, seed=11, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, b: normalization_torch.rms_norm(a, b, eps=1e-6), (x, w))
        assert torch.autograd.gradcheck(lambda a: normalization_torch.rms_norm(a, None, eps=1e-6), (x,))

    @pytest.mark.edge_case
    def test_zero_input_gives_zeros_and_finite_grad(self):
        x = torch.zeros(2, 4, requires_grad=True)
        norm = normalization_torch.RMSNorm(4)
        y = norm(x)
        assert torch.equal(y, torch.zeros(2, 4))
        y.sum().backward()
        assert torch.isfinite(x.grad).all() and torch.isfinite(norm.weight.grad).all()

    @pytest.mark.edge_case
    def test_width_one_batch_of_one_and_1d_input(self):
        x = torch.tensor([[-2.0], [0.5]], dtype=torch.float64)
        y = normalization_torch.rms_norm(x, eps=1e-12)
        _close(y, x / torch.sqrt(x * x + 1e-12), "rms_norm(width-1 x)", cond=4)  # +-1 up to eps
        norm = normalization_torch.RMSNorm(4)
        one = randn(1, 1, 4, seed=12)
        assert norm(one).shape == (1, 1, 4)
        _close(norm(one)[0, 0], norm(one[0, 0]), "RMSNorm(4)(1-D x)", cond=4)

    @pytest.mark.numerics_probe
    def test_low_precision_probe(self):
        # 1000 * randn: x**2 reaches ~1e7, far past float16's max of 65504, unless upcast.
        x = 1000.0 * randn(4, 64, seed=13)
        w = 1.0 + 0.1 * randn(64, seed=14)
        assert_low_precision_matches(lambda a, b: normalization_torch.rms_norm(a, b), x, w)

    @pytest.mark.numerics_probe
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
    def test_half_dtypes_upcast(self, dtype):
        x = 1000.0 * randn(4, 64, seed=15)
        norm = normalization_torch.RMSNorm(64)
        with torch.no_grad():
            norm.weight.copy_(1.0 + 0.1 * randn(64, seed=16))
        try:
            x_low = x.to(dtype)
            y_low = norm(x_low)
        except RuntimeError as exc:  # pragma: no cover - CPU without the kernel
            pytest.skip(f"no {dtype} kernel: {exc}")
        assert y_low.dtype == dtype
        assert torch.isfinite(y_low).all()
        want = norm(x_low.float())
        torch.testing.assert_close(y_low.float(), want, **TOL.LOW_PRECISION.kw())
        y_fn = normalization_torch.rms_norm(x_low)
        assert y_fn.dtype == dtype and torch.isfinite(y_fn).all()
        torch.testing.assert_close(
            y_fn.float(), normalization_torch.rms_norm(x_low.float()), **TOL.LOW_PRECISION.kw()
        )

    # ---- input checks (contract: the exception type only) ----

    @pytest.mark.contract
    @pytest.mark.parametrize("eps", [0.0, -1e-6])
    def test_bad_eps(self, eps):
        with pytest.raises(ValueError):
            normalization_torch.rms_norm(torch.ones(2, 3), eps=eps)
        with pytest.raises(ValueError):
            normalization_torch.RMSNorm(3, eps=eps)

    @pytest.mark.contract
    def test_bad_width(self):
        with pytest.raises(ValueError):
            normalization_torch.RMSNorm(0)
        with pytest.raises(ValueError):
            normalization_torch.RMSNorm(4)(torch.ones(2, 5))
        with pytest.raises(ValueError):
            normalization_torch.rms_norm(torch.ones(2, 5), torch.ones(4))


# ---------------------------------------------------------------------------------------------------
# #13 BatchNorm
# ---------------------------------------------------------------------------------------------------

BN_SHAPES = {"2d": (6, 3), "4d": (3, 4, 3, 2)}
# Finite differences: few entries and O(1) values keep the round-off of f (~1e-15 * |f| / h) well
# below 1e-6 of the smallest gradient entry.
BN_FD_SHAPES = {"2d": (4, 3), "4d": (2, 3, 2, 2)}


def _signed_away_from_zero(g, shape):
    """Entries with |v| in [0.5, 1.5] and a random sign: an upstream gradient with no tiny entries."""
    return g.choice([-1.0, 1.0], size=shape) * (0.5 + g.random(shape))


def _bn_inputs(shape, seed=0, scale=2.0):
    g = np.random.default_rng(seed)
    C = shape[1]
    x = scale * g.standard_normal(shape) + g.standard_normal((1, C) + (1,) * (len(shape) - 2))
    gamma = 1.0 + 0.5 * g.standard_normal(C)
    beta = g.standard_normal(C)
    dy = _signed_away_from_zero(g, shape)
    rm = 0.2 * g.standard_normal(C)
    rv = 0.5 + g.random(C)
    return x, gamma, beta, dy, rm, rv


def _torch_batchnorm(x, gamma, beta, dy, rm, rv, training, momentum=0.1, eps=1e-5):
    """torch's float64 batch norm: output, (dx, dgamma, dbeta), updated running stats."""
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.tensor(beta, requires_grad=True)
    rmt = None if rm is None else torch.tensor(rm)
    rvt = None if rv is None else torch.tensor(rv)
    y = F.batch_norm(xt, rmt, rvt, gt, bt, training=training, momentum=momentum, eps=eps)
    (y * torch.tensor(dy)).sum().backward()
    stats = None if rm is None else (rmt.numpy(), rvt.numpy())
    return y.detach().numpy(), (xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()), stats


class TestBatchNorm:
    pytestmark = pytest.mark.canon("nn/batchnorm")

    @pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_forward_matches_torch(self, layout, training):
        x, gamma, beta, dy, rm, rv = _bn_inputs(BN_SHAPES[layout], seed=1)
        want, _, _ = _torch_batchnorm(x, gamma, beta, dy, rm.copy(), rv.copy(), training)
        y, _ = normalization.batchnorm_forward(
            x, gamma, beta, running_mean=rm.copy(), running_var=rv.copy(), training=training
        )
        assert y.shape == x.shape and y.dtype == np.float64
        _close(y, want, "batchnorm_forward(x)", cond=x.size // x.shape[1])
        if training:  # running stats are optional in training
            y_no_stats, _ = call_leaves_inputs_unchanged(normalization.batchnorm_forward, x, gamma, beta)
            _close(y_no_stats, want, "batchnorm_forward(x) without running stats", cond=x.size // x.shape[1])

    @pytest.mark.parametrize("momentum", [0.1, 0.3])
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_running_stats_after_three_updates_match_torch(self, layout, momentum):
        _, gamma, beta, _, rm, rv = _bn_inputs(BN_SHAPES[layout], seed=2)
        rm_t, rv_t = torch.tensor(rm), torch.tensor(rv)
        for step in range(3):
            x = _bn_inputs(BN_SHAPES[layout], seed=10 + step)[0]
            out = normalization.batchnorm_forward(
                x, gamma, beta, running_mean=rm, running_var=rv, training=True, momentum=momentum
            )
            assert out[0].shape == x.shape
            F.batch_norm(torch.tensor(x), rm_t, rv_t, training=True, momentum=momentum, eps=1e-5)
        n = x.size // x.shape[1]
        assert_close(rm, rm_t.numpy(), magnitude=float(np.abs(x).max()), cond=n, what="running_mean after 3 updates")
        assert_close(rv, rv_t.numpy(), magnitude=float(np.abs(x).max()) ** 2, cond=n, what="running_var after 3 updates")

    @pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_backward_matches_torch(self, layout, training):
        x, gamma, beta, dy, rm, rv = _bn_inputs(BN_SHAPES[layout], seed=3)
        _, want, _ = _torch_batchnorm(x, gamma, beta, dy, rm.copy(), rv.copy(), training)
        _, cache = normalization.batchnorm_forward(
            x, gamma, beta, running_mean=rm.copy(), running_var=rv.copy(), training=training
        )
        got = call_leaves_inputs_unchanged(normalization.batchnorm_backward, dy, cache)
        assert len(got) == 3
        for name, g, w in zip(("dx", "dgamma", "dbeta"), got, want):
            assert g.shape == w.shape, name
            _close(g, w, f"batchnorm_backward(dy).{name}", cond=4 * x.size)

    @pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_finite_differences(self, layout, training):
        x, gamma, beta, dy, rm, rv = _bn_inputs(BN_FD_SHAPES[layout], seed=4, scale=1.0)

        def loss():
            y, _ = normalization.batchnorm_forward(
                x, gamma, beta, running_mean=rm.copy(), running_var=rv.copy(), training=training
            )
            return float((y * dy).sum())

        _, cache = normalization.batchnorm_forward(
            x, gamma, beta, running_mean=rm.copy(), running_var=rv.copy(), training=training
        )
        dx, dgamma, dbeta = normalization.batchnorm_backward(dy, cache)
        assert_grad_matches(loss, x, dx)
        assert_grad_matches(loss, gamma, dgamma)
        assert_grad_matches(loss, beta, dbeta)

    @pytest.mark.parametrize("eps", [1e-5, 0.1])
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_training_output_moments(self, layout, eps):
        x = _bn_inputs(BN_SHAPES[layout], seed=5)[0]
        C = x.shape[1]
        axes = (0,) if x.ndim == 2 else (0, 2, 3)
        y, _ = normalization.batchnorm_forward(x, np.ones(C), np.zeros(C), eps=eps)
        var = x.var(axis=axes)
        n = x.size // C
        _close(y.mean(axis=axes), np.zeros(C), "mean of the batch-normalised output", cond=n)
        _close(y.var(axis=axes), var / (var + eps), "variance of the batch-normalised output (biased)", cond=n)

    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_dx_sums_to_zero_per_channel(self, layout):
        x, gamma, beta, dy, _, _ = _bn_inputs(BN_SHAPES[layout], seed=6)
        _, cache = normalization.batchnorm_forward(x, gamma, beta)
        dx, _, _ = normalization.batchnorm_backward(dy, cache)
        axes = (0,) if x.ndim == 2 else (0, 2, 3)
        _close(dx.sum(axis=axes), np.zeros(x.shape[1]), "batchnorm dx summed per channel", cond=4 * x.size)

    def test_eval_backward_is_the_affine_map(self):
        x, gamma, beta, dy, rm, rv = _bn_inputs(BN_SHAPES["4d"], seed=7)
        y, cache = normalization.batchnorm_forward(
            x, gamma, beta, running_mean=rm, running_var=rv, training=False, eps=1e-3
        )
        scale = (gamma / np.sqrt(rv + 1e-3))[None, :, None, None]
        _close(y, (x - rm[None, :, None, None]) * scale + beta[None, :, None, None], "eval batchnorm_forward", cond=4)
        dx, _, dbeta = normalization.batchnorm_backward(dy, cache)
        _close(dx, dy * scale, "eval batchnorm_backward dx", cond=4)
        _close(dbeta, dy.sum(axis=(0, 2, 3)), "eval batchnorm_backward dbeta", cond=x.size)

    def test_eval_and_inputs_are_not_mutated(self):
        x, gamma, beta, _, rm, rv = _bn_inputs(BN_SHAPES["4d"], seed=8)
        saved = [a.copy() for a in (x, gamma, beta, rm, rv)]
        normalization.batchnorm_forward(x, gamma, beta, running_mean=rm, running_var=rv, training=False)
        for before, after in zip(saved, (x, gamma, beta, rm, rv)):
            np.testing.assert_array_equal(before, after)
        normalization.batchnorm_forward(x, gamma, beta, running_mean=rm, running_var=rv, training=True)
        for before, after in zip(saved[:3], (x, gamma, beta)):
            np.testing.assert_array_equal(before, after)
        assert not np.array_equal(saved[3], rm)

    @pytest.mark.edge_case
    def test_momentum_zero_and_one(self):
        x, gamma, beta, _, rm, rv = _bn_inputs(BN_SHAPES["2d"], seed=9)
        rm0, rv0 = rm.copy(), rv.copy()
        normalization.batchnorm_forward(x, gamma, beta, running_mean=rm0, running_var=rv0, momentum=0.0)
        np.testing.assert_array_equal(rm0, rm)
        np.testing.assert_array_equal(rv0, rv)
        normalization.batchnorm_forward(x, gamma, beta, running_mean=rm0, running_var=rv0, momentum=1.0)
        size = float(np.abs(x).max())
        assert_close(rm0, x.mean(axis=0), magnitude=size, cond=x.shape[0], what="running_mean at momentum 1")
        assert_close(rv0, x.var(axis=0, ddof=1), magnitude=size**2, cond=x.shape[0],
                     what="running_var at momentum 1 (unbiased)")

    @pytest.mark.edge_case
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_constant_channel_outputs_beta(self, layout):
        x, gamma, beta, dy, _, _ = _bn_inputs(BN_SHAPES[layout], seed=10)
        x[:, 1] = 3.0
        with strict_numpy():
            y, cache = normalization.batchnorm_forward(x, gamma, beta)
            grads = normalization.batchnorm_backward(dy, cache)
        # centred values are exactly 0 (or a rounding of 3.0's mean, ~1e-16) over sqrt(eps) = 3e-3
        _close(y[:, 1], np.full(y[:, 1].shape, beta[1]), "constant channel outputs beta", cond=1e3)
        assert all(np.isfinite(g).all() for g in grads)

    @pytest.mark.edge_case
    def test_two_samples_train_and_one_sample_eval(self):
        x = np.array([[1.0, -2.0], [3.0, 2.0]])
        y, _ = normalization.batchnorm_forward(x, np.ones(2), np.zeros(2), eps=1e-12)
        var = np.array([1.0, 4.0])  # biased batch variances of the two columns
        _close(y, np.array([[-1.0, -1.0], [1.0, 1.0]]) * np.sqrt(var / (var + 1e-12)), "batchnorm of two samples", cond=4)
        y1, cache = normalization.batchnorm_forward(
            x[:1], np.ones(2), np.zeros(2), running_mean=np.zeros(2), running_var=np.ones(2), training=False
        )
        _close(y1, x[:1] / np.sqrt(1.0 + 1e-5), "eval batchnorm of one sample", cond=4)
        dx, _, _ = normalization.batchnorm_backward(np.ones((1, 2)), cache)
        assert dx.shape == (1, 2)

    @pytest.mark.numerics_probe
    def test_large_offset(self):
        # Mean 1e8, spread ~1: the one-pass E[x^2] - E[x]^2 cancels all 16 digits (and may go negative).
        z, gamma, beta, dy, _, _ = _bn_inputs(BN_SHAPES["4d"], seed=11)
        with strict_numpy():
            y, cache = normalization.batchnorm_forward(1e8 + z, gamma, beta)
            dx, _, _ = normalization.batchnorm_backward(dy, cache)
        # Trusted value: torch on the exactly representable centred input ((1e8 + z) - 1e8 is exact),
        # which batch norm maps to the same output. A mean of values near 1e8 is off by a few ulps of
        # 1e8 (~1e-8), moving outputs of spread ~2 by ~1e-8: 1e-6 is a safe bound, and far below the
        # error of a one-pass variance (everything).
        y_ref, (dx_ref, _, _), _ = _torch_batchnorm((1e8 + z) - 1e8, gamma, beta, dy, None, None, True)
        np.testing.assert_allclose(y, y_ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(dx, dx_ref, atol=1e-6, rtol=0)

    # ---- input checks (contract: the exception type only) ----

    @pytest.mark.contract
    @pytest.mark.parametrize(
        "kwargs",
        [
            {"x": np.ones((2, 3, 4))},
            {"gamma": np.ones(4)},
            {"beta": np.ones((3, 1))},
            {"running_mean": np.zeros(2), "running_var": np.ones(3)},
            {"running_mean": np.zeros(3), "running_var": np.ones(4)},
            {"x": np.ones((1, 3))},
            {"x": np.ones((1, 3, 1, 1))},
            {"training": False},
            {"eps": 0.0},
            {"eps": -1e-5},
            {"momentum": -0.1},
            {"momentum": 1.5},
        ],
        ids=["x-3d", "gamma", "beta", "running_mean", "running_var", "x-one-row", "x-one-pixel", "eval-no-stats",
             "eps0", "eps-", "momentum-", "momentum>1"],
    )
    def test_errors(self, kwargs):
        args = {"x": np.arange(6.0).reshape(2, 3), "gamma": np.ones(3), "beta": np.zeros(3)}
        args.update(kwargs)
        x, gamma, beta = args.pop("x"), args.pop("gamma"), args.pop("beta")
        with pytest.raises(ValueError):
            normalization.batchnorm_forward(x, gamma, beta, **args)

    @pytest.mark.contract
    @pytest.mark.parametrize("bad", [{"gamma": np.ones(2)}, {"eps": 0.0}, {"momentum": 2.0}])
    def test_failed_call_leaves_running_stats_untouched(self, bad):
        x, gamma, beta, _, rm, rv = _bn_inputs(BN_SHAPES["2d"], seed=12)
        rm_before, rv_before = rm.copy(), rv.copy()
        kwargs = {"running_mean": rm, "running_var": rv, "training": True, **bad}
        with pytest.raises(ValueError):
            normalization.batchnorm_forward(x, kwargs.pop("gamma", gamma), beta, **kwargs)
        np.testing.assert_array_equal(rm, rm_before)
        np.testing.assert_array_equal(rv, rv_before)

    @pytest.mark.contract
    def test_backward_rejects_wrong_dy_shape(self):
        x, gamma, beta, _, _, _ = _bn_inputs(BN_SHAPES["2d"], seed=13)
        _, cache = normalization.batchnorm_forward(x, gamma, beta)
        with pytest.raises(ValueError):
            normalization.batchnorm_backward(np.ones((x.shape[0] + 1, x.shape[1])), cache)


# ---------------------------------------------------------------------------------------------------
# #14 LayerNorm
# ---------------------------------------------------------------------------------------------------


def _ln_inputs(shape, seed=0, scale=2.0):
    g = np.random.default_rng(seed)
    D = shape[-1]
    x = scale * g.standard_normal(shape) + g.standard_normal(shape[:-1] + (1,))
    gamma = 1.0 + 0.5 * g.standard_normal(D)
    beta = g.standard_normal(D)
    dy = _signed_away_from_zero(g, shape)
    return x, gamma, beta, dy


def _torch_layernorm(x, gamma, beta, dy, eps=1e-5):
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.tensor(beta, requires_grad=True)
    y = F.layer_norm(xt, (x.shape[-1],), gt, bt, eps=eps)
    (y * torch.tensor(dy)).sum().backward()
    return y.detach().numpy(), (xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy())


class TestLayerNorm:
    pytestmark = pytest.mark.canon("nn/layernorm")

    def test_closed_form_one_to_four(self):
        x = np.array([1.0, 2.0, 3.0, 4.0])
        y, _ = call_leaves_inputs_unchanged(normalization.layernorm_forward, x, np.ones(4), np.zeros(4))
        want = np.array([-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269])
        assert y.shape == (4,) and y.dtype == np.float64
        _close(y, want, "layernorm_forward([1, 2, 3, 4])", cond=4)

    @pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)], ids=["2d", "3d"])
    def test_forward_matches_torch(self, shape):
        x, gamma, beta, dy = _ln_inputs(shape, seed=1)
        want, _ = _torch_layernorm(x, gamma, beta, dy)
        y, _ = normalization.layernorm_forward(x, gamma, beta)
        assert y.shape == shape
        D = shape[-1]
        _close(y, want, "layernorm_forward(x)", cond=D)
        y_eps, _ = normalization.layernorm_forward(x, gamma, beta, eps=0.5)
        _close(y_eps, _torch_layernorm(x, gamma, beta, dy, eps=0.5)[0], "layernorm_forward(x, eps=0.5)", cond=D)

    @pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)], ids=["2d", "3d"])
    def test_backward_matches_torch(self, shape):
        x, gamma, beta, dy = _ln_inputs(shape, seed=2)
        _, want = _torch_layernorm(x, gamma, beta, dy)
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        got = call_leaves_inputs_unchanged(normalization.layernorm_backward, dy, cache)
        assert len(got) == 3
        for name, g, w in zip(("dx", "dgamma", "dbeta"), got, want):
            assert g.shape == w.shape, name
            _close(g, w, f"layernorm_backward(dy).{name}", cond=4 * x.size)

    @pytest.mark.parametrize("shape", [(3, 4), (2, 2, 3)], ids=["2d", "3d"])
    def test_finite_differences(self, shape):
        x, gamma, beta, dy = _ln_inputs(shape, seed=3, scale=1.0)

        def loss():
            return float((normalization.layernorm_forward(x, gamma, beta)[0] * dy).sum())

        _, cache = normalization.layernorm_forward(x, gamma, beta)
        dx, dgamma, dbeta = normalization.layernorm_backward(dy, cache)
        assert_grad_matches(loss, x, dx)
        assert_grad_matches(loss, gamma, dgamma)
        assert_grad_matches(loss, beta, dbeta)

    def test_shift_invariance_per_row(self):
        x, gamma, beta, _ = _ln_inputs((5, 6), seed=4)
        c = np.array([[-7.0], [0.5], [3.0], [10.0], [-0.25]])
        y, _ = normalization.layernorm_forward(x, gamma, beta)
        y_shift, _ = normalization.layernorm_forward(x + c, gamma, beta)
        # x + c is rounded at the size of |x + c| (<= ~20), then divided by a std of ~2
        _close(y_shift, y, "layernorm_forward(x + c)", cond=60)

    @pytest.mark.parametrize("eps", [1e-5, 0.1])
    def test_dx_row_sums(self, eps):
        # With gamma = 1: sum_D dx = 0 and sum_D dx * xhat = rstd * eps / (var + eps) * sum_D dy * xhat.
        x, _, beta, dy = _ln_inputs((4, 6), seed=5, scale=0.5)
        y, cache = normalization.layernorm_forward(x, np.ones(6), beta, eps=eps)
        dx, _, _ = normalization.layernorm_backward(dy, cache)
        var = x.var(axis=-1)
        rstd = 1.0 / np.sqrt(var + eps)
        xhat = (x - x.mean(axis=-1, keepdims=True)) * rstd[:, None]
        cond = 4 * 6 * float(rstd.max())  # sums of 6 gradient entries of size ~rstd
        _close(y, xhat + beta, "layernorm_forward(x, gamma=1)", cond=6)
        _close(dx.sum(axis=-1), np.zeros(4), "layernorm dx row sums", cond=cond)
        want = rstd * eps / (var + eps) * (dy * xhat).sum(axis=-1)
        _close((dx * xhat).sum(axis=-1), want, "layernorm sum(dx * xhat)", cond=cond)

    def test_dgamma_dbeta_sum_over_leading_axes(self):
        x, gamma, beta, dy = _ln_inputs((2, 3, 5), seed=6)
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        _, dgamma, dbeta = normalization.layernorm_backward(dy, cache)
        _, cache2 = normalization.layernorm_forward(x.reshape(6, 5), gamma, beta)
        dx2, dgamma2, dbeta2 = normalization.layernorm_backward(dy.reshape(6, 5), cache2)
        assert dgamma.shape == (5,) and dbeta.shape == (5,)
        _close(dbeta, dy.sum(axis=(0, 1)), "layernorm dbeta", cond=6)
        _close(dgamma, dgamma2, "layernorm dgamma (3-D vs 2-D)", cond=6)
        _close(dbeta, dbeta2, "layernorm dbeta (3-D vs 2-D)", cond=6)

    def test_inputs_are_not_mutated(self):
        x, gamma, beta, dy = _ln_inputs((3, 4), seed=7)
        saved = [a.copy() for a in (x, gamma, beta, dy)]
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        normalization.layernorm_backward(dy, cache)
        for before, after in zip(saved, (x, gamma, beta, dy)):
            np.testing.assert_array_equal(before, after)

    @pytest.mark.edge_case
    def test_constant_row_and_width_one_output_beta(self):
        x, gamma, beta, dy = _ln_inputs((3, 4), seed=8)
        x[1] = 2.5
        with strict_numpy():
            y, cache = normalization.layernorm_forward(x, gamma, beta)
            grads = normalization.layernorm_backward(dy, cache)
        # centred values are exactly 0 (or a rounding of 2.5's mean, ~1e-16) over sqrt(eps) = 3e-3
        _close(y[1], beta, "layernorm of a constant row", cond=1e3)
        assert all(np.isfinite(g).all() for g in grads)
        x1 = np.array([[3.0], [-1.0]])
        with strict_numpy():
            y1, cache1 = normalization.layernorm_forward(x1, np.array([2.0]), np.array([0.7]))
            grads1 = normalization.layernorm_backward(np.ones((2, 1)), cache1)
        _close(y1, np.array([[0.7], [0.7]]), "layernorm of width 1", cond=1e3)
        assert all(np.isfinite(g).all() for g in grads1)

    @pytest.mark.edge_case
    def test_batch_of_one(self):
        x, gamma, beta, dy = _ln_inputs((4, 6), seed=9)
        y, cache = normalization.layernorm_forward(x, gamma, beta)
        dx, _, _ = normalization.layernorm_backward(dy, cache)
        y1, cache1 = normalization.layernorm_forward(x[2:3], gamma, beta)
        dx1, dgamma1, dbeta1 = normalization.layernorm_backward(dy[2:3], cache1)
        assert y1.shape == (1, 6) and dx1.shape == (1, 6)
        _close(y1[0], y[2], "layernorm of a batch of one", cond=6)
        _close(dx1[0], dx[2], "layernorm dx of a batch of one", cond=24)
        y0, cache0 = normalization.layernorm_forward(x[2], gamma, beta)
        dx0, dgamma0, _ = normalization.layernorm_backward(dy[2], cache0)
        _close(y0, y[2], "layernorm of a 1-D row", cond=6)
        _close(dx0, dx[2], "layernorm dx of a 1-D row", cond=24)
        _close(dgamma0, dgamma1, "layernorm dgamma of a 1-D row", cond=24)
        _close(dbeta1, dy[2], "layernorm dbeta of a batch of one", cond=6)

    @pytest.mark.numerics_probe
    def test_large_offset(self):
        # Row means 1e8 with spread ~1: a one-pass variance cancels all 16 digits.
        z, gamma, beta, dy = _ln_inputs((4, 16), seed=10, scale=1.0)
        with strict_numpy():
            y, cache = normalization.layernorm_forward(1e8 + z, gamma, beta)
            dx, _, _ = normalization.layernorm_backward(dy, cache)
        # Trusted value (never the learner's own output on z): torch on the exactly representable
        # centred input ((1e8 + z) - 1e8 is exact), which layer norm maps to the same output. A row
        # mean near 1e8 is off by a few ulps of 1e8 (~1e-8), moving outputs of spread ~1 by ~1e-8.
        y_ref, (dx_ref, _, _) = _torch_layernorm((1e8 + z) - 1e8, gamma, beta, dy)
        np.testing.assert_allclose(y, y_ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(dx, dx_ref, atol=1e-6, rtol=0)

    # ---- input checks (contract: the exception type only) ----

    @pytest.mark.contract
    @pytest.mark.parametrize(
        "gamma, beta, eps",
        [
            (np.ones(3), np.zeros(4), 1e-5),
            (np.ones((4, 1)), np.zeros(4), 1e-5),
            (np.ones(4), np.zeros(5), 1e-5),
            (np.ones(4), np.zeros(4), 0.0),
            (np.ones(4), np.zeros(4), -1.0),
        ],
        ids=["gamma-short", "gamma-2d", "beta", "eps0", "eps-"],
    )
    def test_errors(self, gamma, beta, eps):
        with pytest.raises(ValueError):
            normalization.layernorm_forward(np.ones((2, 4)), gamma, beta, eps=eps)

    @pytest.mark.contract
    def test_backward_rejects_wrong_dy_shape(self):
        x, gamma, beta, _ = _ln_inputs((3, 4), seed=11)
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        with pytest.raises(ValueError):
            normalization.layernorm_backward(np.ones((3, 5)), cache)
        with pytest.raises(ValueError):
            normalization.layernorm_backward(np.ones((4, 3)), cache)
