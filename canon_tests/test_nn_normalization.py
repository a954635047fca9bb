"""Reference tests for canon #13 BatchNorm, #14 LayerNorm (NumPy) and #15 RMSNorm (torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from canon_refs.nn import normalization, normalization_torch
from pytest_mlcanon.testing import TOL, assert_grad_matches, assert_low_precision_matches, randn, strict_numpy

# ---------------------------------------------------------------------------------------------------
# #15 RMSNorm
# ---------------------------------------------------------------------------------------------------


class TestRMSNorm:
    pytestmark = pytest.mark.canon("nn/rmsnorm")

    def test_closed_form_three_four(self):
        x = torch.tensor([3.0, 4.0], dtype=torch.float64)
        want = torch.tensor([0.848528137423857, 1.131370849898476], dtype=torch.float64)
        for weight in (None, torch.ones(2, dtype=torch.float64)):
            y = normalization_torch.rms_norm(x, weight, eps=1e-12)
            assert y.dtype == torch.float64
            torch.testing.assert_close(y, want, atol=1e-10, rtol=0)
        y = normalization_torch.RMSNorm(2, eps=1e-12)(x)
        assert y.dtype == torch.float64
        torch.testing.assert_close(y, want, atol=1e-10, rtol=0)

    def test_eps_sits_inside_the_square_root(self):
        # mean square 12.5e-6, + eps 3.5e-6 = 16e-6, root 4e-3: exactly [0.75, 1.0].
        # eps added to the root instead (rms + eps) gives [0.8384, 1.1179].
        x = torch.tensor([0.003, 0.004], dtype=torch.float64)
        y = normalization_torch.rms_norm(x, eps=3.5e-6)
        torch.testing.assert_close(y, torch.tensor([0.75, 1.0], dtype=torch.float64), atol=1e-10, rtol=0)

    @pytest.mark.parametrize("scale, eps", [(1.0, 1e-6), (1.0, 1e-2), (1e-3, 1e-6)])
    def test_matches_torch_rms_norm(self, scale, eps):
        x = scale * randn(4, 5, 8, seed=1)
        w = randn(8, seed=2)
        got = normalization_torch.rms_norm(x, w, eps=eps)
        want = F.rms_norm(x, (8,), w, eps=eps)
        assert got.shape == (4, 5, 8) and got.dtype == torch.float32
        torch.testing.assert_close(got, want, **TOL.TORCH_OP.kw())
        torch.testing.assert_close(
            normalization_torch.rms_norm(x, eps=eps), F.rms_norm(x, (8,), eps=eps), **TOL.TORCH_OP.kw()
        )

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
        torch.testing.assert_close(norm(x), F.rms_norm(x, (8,), norm.weight, eps=1e-6), **TOL.TORCH_OP.kw())

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
        torch.testing.assert_close(x.grad, x_ref.grad, **TOL.TORCH_OP.kw())
        torch.testing.assert_close(norm.weight.grad, w_ref.grad, **TOL.TORCH_OP.kw())

    def test_scale_invariance(self):
        norm = normalization_torch.RMSNorm(16)
        x = randn(4, 16, seed=8)
        torch.testing.assert_close(norm(1000.0 * x), norm(x), rtol=1e-5, atol=1e-6)
        x64 = x.double()
        torch.testing.assert_close(
            normalization_torch.rms_norm(1000.0 * x64, eps=1e-12),
            normalization_torch.rms_norm(x64, eps=1e-12),
            rtol=1e-10,
            atol=1e-12,
        )

    def test_unit_root_mean_square(self):
        x = randn(5, 32, seed=9, dtype=torch.float64)
        y = normalization_torch.rms_norm(x, eps=1e-12)
        torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(5, dtype=torch.float64), atol=1e-10, rtol=0)

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
        torch.testing.assert_close(y, torch.tensor([[-1.0], [1.0]], dtype=torch.float64), atol=1e-10, rtol=0)
        norm = normalization_torch.RMSNorm(4)
        one = randn(1, 1, 4, seed=12)
        assert norm(one).shape == (1, 1, 4)
        torch.testing.assert_close(norm(one)[0, 0], norm(one[0, 0]), atol=0, rtol=0)

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

    @pytest.mark.parametrize("eps", [0.0, -1e-6])
    def test_bad_eps(self, eps):
        with pytest.raises(ValueError, match="eps"):
            normalization_torch.rms_norm(torch.ones(2, 3), eps=eps)
        with pytest.raises(ValueError, match="eps"):
            normalization_torch.RMSNorm(3, eps=eps)

    def test_bad_width(self):
        with pytest.raises(ValueError, match="d"):
            normalization_torch.RMSNorm(0)
        with pytest.raises(ValueError, match="x"):
            normalization_torch.RMSNorm(4)(torch.ones(2, 5))
        with pytest.raises(ValueError, match="weight"):
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
        np.testing.assert_allclose(y, want, **TOL.EXACT64.kw())
        if training:  # running stats are optional in training
            y_no_stats, _ = normalization.batchnorm_forward(x, gamma, beta)
            np.testing.assert_allclose(y_no_stats, want, **TOL.EXACT64.kw())

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
        np.testing.assert_allclose(rm, rm_t.numpy(), **TOL.EXACT64.kw())
        np.testing.assert_allclose(rv, rv_t.numpy(), **TOL.EXACT64.kw())

    @pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_backward_matches_torch(self, layout, training):
        x, gamma, beta, dy, rm, rv = _bn_inputs(BN_SHAPES[layout], seed=3)
        _, want, _ = _torch_batchnorm(x, gamma, beta, dy, rm.copy(), rv.copy(), training)
        _, cache = normalization.batchnorm_forward(
            x, gamma, beta, running_mean=rm.copy(), running_var=rv.copy(), training=training
        )
        got = normalization.batchnorm_backward(dy, cache)
        assert len(got) == 3
        for name, g, w in zip(("dx", "dgamma", "dbeta"), got, want):
            assert g.shape == w.shape, name
            np.testing.assert_allclose(g, w, atol=1e-10, rtol=0, err_msg=name)

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
        np.testing.assert_allclose(y.mean(axis=axes), np.zeros(C), atol=1e-12, rtol=0)
        np.testing.assert_allclose(y.var(axis=axes), var / (var + eps), atol=1e-10, rtol=0)

    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_dx_sums_to_zero_per_channel(self, layout):
        x, gamma, beta, dy, _, _ = _bn_inputs(BN_SHAPES[layout], seed=6)
        _, cache = normalization.batchnorm_forward(x, gamma, beta)
        dx, _, _ = normalization.batchnorm_backward(dy, cache)
        axes = (0,) if x.ndim == 2 else (0, 2, 3)
        np.testing.assert_allclose(dx.sum(axis=axes), np.zeros(x.shape[1]), atol=1e-12, rtol=0)

    def test_eval_backward_is_the_affine_map(self):
        x, gamma, beta, dy, rm, rv = _bn_inputs(BN_SHAPES["4d"], seed=7)
        y, cache = normalization.batchnorm_forward(
            x, gamma, beta, running_mean=rm, running_var=rv, training=False, eps=1e-3
        )
        scale = (gamma / np.sqrt(rv + 1e-3))[None, :, None, None]
        np.testing.assert_allclose(
            y, (x - rm[None, :, None, None]) * scale + beta[None, :, None, None], **TOL.EXACT64.kw()
        )
        dx, _, dbeta = normalization.batchnorm_backward(dy, cache)
        np.testing.assert_allclose(dx, dy * scale, **TOL.EXACT64.kw())
        np.testing.assert_allclose(dbeta, dy.sum(axis=(0, 2, 3)), **TOL.EXACT64.kw())

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
        np.testing.assert_allclose(rm0, x.mean(axis=0), **TOL.EXACT64.kw())
        np.testing.assert_allclose(rv0, x.var(axis=0, ddof=1), **TOL.EXACT64.kw())

    @pytest.mark.edge_case
    @pytest.mark.parametrize("layout", ["2d", "4d"])
    def test_constant_channel_outputs_beta(self, layout):
        x, gamma, beta, dy, _, _ = _bn_inputs(BN_SHAPES[layout], seed=10)
        x[:, 1] = 3.0
        with strict_numpy():
            y, cache = normalization.batchnorm_forward(x, gamma, beta)
            grads = normalization.batchnorm_backward(dy, cache)
        np.testing.assert_allclose(y[:, 1], np.full(y[:, 1].shape, beta[1]), **TOL.EXACT64.kw())
        assert all(np.isfinite(g).all() for g in grads)

    @pytest.mark.edge_case
    def test_two_samples_train_and_one_sample_eval(self):
        x = np.array([[1.0, -2.0], [3.0, 2.0]])
        y, _ = normalization.batchnorm_forward(x, np.ones(2), np.zeros(2), eps=1e-12)
        np.testing.assert_allclose(y, [[-1.0, -1.0], [1.0, 1.0]], atol=1e-10, rtol=0)
        y1, cache = normalization.batchnorm_forward(
            x[:1], np.ones(2), np.zeros(2), running_mean=np.zeros(2), running_var=np.ones(2), training=False
        )
        np.testing.assert_allclose(y1, x[:1] / np.sqrt(1.0 + 1e-5), **TOL.EXACT64.kw())
        dx, _, _ = normalization.batchnorm_backward(np.ones((1, 2)), cache)
        assert dx.shape == (1, 2)

    @pytest.mark.numerics_probe
    def test_large_offset(self):
        # Mean 1e8, spread ~1: the one-pass E[x^2] - E[x]^2 cancels all 16 digits (and may go negative).
        z, gamma, beta, dy, _, _ = _bn_inputs(BN_SHAPES["4d"], seed=11)
        with strict_numpy():
            y, cache = normalization.batchnorm_forward(1e8 + z, gamma, beta)
            dx, _, _ = normalization.batchnorm_backward(dy, cache)
        y_ref, cache_ref = normalization.batchnorm_forward(z, gamma, beta)
        dx_ref, _, _ = normalization.batchnorm_backward(dy, cache_ref)
        np.testing.assert_allclose(y, y_ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(dx, dx_ref, atol=1e-6, rtol=0)

    @pytest.mark.parametrize(
        "kwargs, arg",
        [
            ({"x": np.ones((2, 3, 4))}, "x"),
            ({"gamma": np.ones(4)}, "gamma"),
            ({"beta": np.ones((3, 1))}, "beta"),
            ({"running_mean": np.zeros(2), "running_var": np.ones(3)}, "running_mean"),
            ({"running_mean": np.zeros(3), "running_var": np.ones(4)}, "running_var"),
            ({"x": np.ones((1, 3))}, "x"),
            ({"x": np.ones((1, 3, 1, 1))}, "x"),
            ({"training": False}, "running_"),
            ({"eps": 0.0}, "eps"),
            ({"eps": -1e-5}, "eps"),
            ({"momentum": -0.1}, "momentum"),
            ({"momentum": 1.5}, "momentum"),
        ],
    )
    def test_errors(self, kwargs, arg):
        args = {"x": np.arange(6.0).reshape(2, 3), "gamma": np.ones(3), "beta": np.zeros(3)}
        args.update(kwargs)
        x, gamma, beta = args.pop("x"), args.pop("gamma"), args.pop("beta")
        with pytest.raises(ValueError, match=arg):
            normalization.batchnorm_forward(x, gamma, beta, **args)

    @pytest.mark.parametrize("bad", [{"gamma": np.ones(2)}, {"eps": 0.0}, {"momentum": 2.0}])
    def test_failed_call_leaves_running_stats_untouched(self, bad):
        x, gamma, beta, _, rm, rv = _bn_inputs(BN_SHAPES["2d"], seed=12)
        rm_before, rv_before = rm.copy(), rv.copy()
        kwargs = {"running_mean": rm, "running_var": rv, "training": True, **bad}
        with pytest.raises(ValueError):
            normalization.batchnorm_forward(x, kwargs.pop("gamma", gamma), beta, **kwargs)
        np.testing.assert_array_equal(rm, rm_before)
        np.testing.assert_array_equal(rv, rv_before)

    def test_backward_rejects_wrong_dy_shape(self):
        x, gamma, beta, _, _, _ = _bn_inputs(BN_SHAPES["2d"], seed=13)
        _, cache = normalization.batchnorm_forward(x, gamma, beta)
        with pytest.raises(ValueError, match="dy"):
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
        y, _ = normalization.layernorm_forward(np.array([1.0, 2.0, 3.0, 4.0]), np.ones(4), np.zeros(4))
        want = [-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269]
        assert y.shape == (4,) and y.dtype == np.float64
        np.testing.assert_allclose(y, want, **TOL.EXACT64.kw())

    @pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)], ids=["2d", "3d"])
    def test_forward_matches_torch(self, shape):
        x, gamma, beta, dy = _ln_inputs(shape, seed=1)
        want, _ = _torch_layernorm(x, gamma, beta, dy)
        y, _ = normalization.layernorm_forward(x, gamma, beta)
        assert y.shape == shape
        np.testing.assert_allclose(y, want, **TOL.EXACT64.kw())
        y_eps, _ = normalization.layernorm_forward(x, gamma, beta, eps=0.5)
        np.testing.assert_allclose(
            y_eps, _torch_layernorm(x, gamma, beta, dy, eps=0.5)[0], **TOL.EXACT64.kw()
        )

    @pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)], ids=["2d", "3d"])
    def test_backward_matches_torch(self, shape):
        x, gamma, beta, dy = _ln_inputs(shape, seed=2)
        _, want = _torch_layernorm(x, gamma, beta, dy)
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        got = normalization.layernorm_backward(dy, cache)
        assert len(got) == 3
        for name, g, w in zip(("dx", "dgamma", "dbeta"), got, want):
            assert g.shape == w.shape, name
            np.testing.assert_allclose(g, w, atol=1e-10, rtol=0, err_msg=name)

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
        np.testing.assert_allclose(y_shift, y, atol=1e-10, rtol=0)

    @pytest.mark.parametrize("eps", [1e-5, 0.1])
    def test_dx_row_sums(self, eps):
        # With gamma = 1: sum_D dx = 0 and sum_D dx * xhat = rstd * eps / (var + eps) * sum_D dy * xhat.
        x, _, beta, dy = _ln_inputs((4, 6), seed=5, scale=0.5)
        y, cache = normalization.layernorm_forward(x, np.ones(6), beta, eps=eps)
        dx, _, _ = normalization.layernorm_backward(dy, cache)
        var = x.var(axis=-1)
        rstd = 1.0 / np.sqrt(var + eps)
        xhat = (x - x.mean(axis=-1, keepdims=True)) * rstd[:, None]
        np.testing.assert_allclose(y, xhat + beta, **TOL.EXACT64.kw())
        np.testing.assert_allclose(dx.sum(axis=-1), np.zeros(4), atol=1e-12, rtol=0)
        want = rstd * eps / (var + eps) * (dy * xhat).sum(axis=-1)
        np.testing.assert_allclose((dx * xhat).sum(axis=-1), want, atol=1e-12, rtol=0)

    def test_dgamma_dbeta_sum_over_leading_axes(self):
        x, gamma, beta, dy = _ln_inputs((2, 3, 5), seed=6)
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        _, dgamma, dbeta = normalization.layernorm_backward(dy, cache)
        _, cache2 = normalization.layernorm_forward(x.reshape(6, 5), gamma, beta)
        dx2, dgamma2, dbeta2 = normalization.layernorm_backward(dy.reshape(6, 5), cache2)
        assert dgamma.shape == (5,) and dbeta.shape == (5,)
        np.testing.assert_allclose(dbeta, dy.sum(axis=(0, 1)), **TOL.EXACT64.kw())
        np.testing.assert_allclose(dgamma, dgamma2, **TOL.EXACT64.kw())
        np.testing.assert_allclose(dbeta, dbeta2, **TOL.EXACT64.kw())

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
        np.testing.assert_allclose(y[1], beta, **TOL.EXACT64.kw())
        assert all(np.isfinite(g).all() for g in grads)
        x1 = np.array([[3.0], [-1.0]])
        with strict_numpy():
            y1, cache1 = normalization.layernorm_forward(x1, np.array([2.0]), np.array([0.7]))
            grads1 = normalization.layernorm_backward(np.ones((2, 1)), cache1)
        np.testing.assert_allclose(y1, [[0.7], [0.7]], **TOL.EXACT64.kw())
        assert all(np.isfinite(g).all() for g in grads1)

    @pytest.mark.edge_case
    def test_batch_of_one(self):
        x, gamma, beta, dy = _ln_inputs((4, 6), seed=9)
        y, cache = normalization.layernorm_forward(x, gamma, beta)
        dx, _, _ = normalization.layernorm_backward(dy, cache)
        y1, cache1 = normalization.layernorm_forward(x[2:3], gamma, beta)
        dx1, dgamma1, dbeta1 = normalization.layernorm_backward(dy[2:3], cache1)
        assert y1.shape == (1, 6) and dx1.shape == (1, 6)
        np.testing.assert_allclose(y1[0], y[2], **TOL.EXACT64.kw())
        np.testing.assert_allclose(dx1[0], dx[2], **TOL.EXACT64.kw())
        y0, cache0 = normalization.layernorm_forward(x[2], gamma, beta)
        dx0, dgamma0, _ = normalization.layernorm_backward(dy[2], cache0)
        np.testing.assert_allclose(y0, y[2], **TOL.EXACT64.kw())
        np.testing.assert_allclose(dx0, dx[2], **TOL.EXACT64.kw())
        np.testing.assert_allclose(dgamma0, dgamma1, **TOL.EXACT64.kw())
        np.testing.assert_allclose(dbeta1, dy[2], **TOL.EXACT64.kw())

    @pytest.mark.numerics_probe
    def test_large_offset(self):
        # Row means 1e8 with spread ~1: a one-pass variance cancels all 16 digits.
        z, gamma, beta, dy = _ln_inputs((4, 16), seed=10, scale=1.0)
        with strict_numpy():
            y, cache = normalization.layernorm_forward(1e8 + z, gamma, beta)
            dx, _, _ = normalization.layernorm_backward(dy, cache)
        y_ref, cache_ref = normalization.layernorm_forward(z, gamma, beta)
        dx_ref, _, _ = normalization.layernorm_backward(dy, cache_ref)
        np.testing.assert_allclose(y, y_ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(dx, dx_ref, atol=1e-6, rtol=0)

    @pytest.mark.parametrize(
        "gamma, beta, eps, arg",
        [
            (np.ones(3), np.zeros(4), 1e-5, "gamma"),
            (np.ones((4, 1)), np.zeros(4), 1e-5, "gamma"),
            (np.ones(4), np.zeros(5), 1e-5, "beta"),
            (np.ones(4), np.zeros(4), 0.0, "eps"),
            (np.ones(4), np.zeros(4), -1.0, "eps"),
        ],
    )
    def test_errors(self, gamma, beta, eps, arg):
        with pytest.raises(ValueError, match=arg):
            normalization.layernorm_forward(np.ones((2, 4)), gamma, beta, eps=eps)

    def test_backward_rejects_wrong_dy_shape(self):
        x, gamma, beta, _ = _ln_inputs((3, 4), seed=11)
        _, cache = normalization.layernorm_forward(x, gamma, beta)
        with pytest.raises(ValueError, match="dy"):
            normalization.layernorm_backward(np.ones((3, 5)), cache)
        with pytest.raises(ValueError, match="dy"):
            normalization.layernorm_backward(np.ones((4, 3)), cache)
