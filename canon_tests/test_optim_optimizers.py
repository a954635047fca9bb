"""Reference tests for canon #9 (SGD with momentum, plus the global grad-norm clip) and #10 (Adam, AdamW)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.optim import optimizers as optim
from pytest_mlcanon.testing import rng


class _Quadratic:
    """A random float64 quadratic over two parameter arrays: f = sum_i 0.5 p_i^T A_i p_i - c_i^T p_i."""

    def __init__(self, seed: int = 0, scale: float = 1.0) -> None:
        g = rng(seed)
        self.shapes = [(3, 4), (5,)]
        self.A, self.c = [], []
        for shape in self.shapes:
            size = int(np.prod(shape))
            M = g.normal(size=(size, size))
            self.A.append(scale * (M @ M.T / size + 0.5 * np.eye(size)))
            self.c.append(scale * g.normal(size=size))
        self.init = [g.normal(size=shape) for shape in self.shapes]

    def params(self) -> list[np.ndarray]:
        return [p.copy() for p in self.init]

    def grads(self, params: list[np.ndarray]) -> list[np.ndarray]:
        return [(A @ p.reshape(-1) - c).reshape(p.shape) for A, c, p in zip(self.A, self.c, params)]


def _run_numpy(opt_cls, quad: _Quadratic, n_steps: int, **kwargs) -> list[list[np.ndarray]]:
    params = quad.params()
    opt = opt_cls(params, **kwargs)
    trajectory = []
    for _ in range(n_steps):
        opt.step(quad.grads(params))
        trajectory.append([p.copy() for p in params])
    return trajectory


def _run_torch(torch, opt_name: str, quad: _Quadratic, n_steps: int, **kwargs) -> list[list[np.ndarray]]:
    params = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in quad.init]
    opt = getattr(torch.optim, opt_name)(params, **kwargs)
    trajectory = []
    for _ in range(n_steps):
        grads = quad.grads([p.detach().numpy() for p in params])
        for p, g in zip(params, grads):
            p.grad = torch.from_numpy(g)
        opt.step()
        trajectory.append([p.detach().numpy().copy() for p in params])
    return trajectory


def _assert_trajectories_close(ours, ref, atol: float, rtol: float = 0.0) -> None:
    for step, (a, b) in enumerate(zip(ours, ref)):
        for p, q in zip(a, b):
            np.testing.assert_allclose(p, q, atol=atol, rtol=rtol, err_msg=f"step {step + 1}")


class TestSGD:
    pytestmark = pytest.mark.canon("optim/sgd_momentum")

    @pytest.mark.parametrize("nesterov", [False, True])
    @pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
    def test_matches_torch_sgd(self, nesterov, weight_decay):
        torch = pytest.importorskip("torch")
        quad = _Quadratic(seed=1)
        kwargs = {"lr": 0.05, "momentum": 0.9, "nesterov": nesterov, "weight_decay": weight_decay}
        ours = _run_numpy(optim.SGD, quad, 20, **kwargs)
        ref = _run_torch(torch, "SGD", quad, 20, **kwargs)
        _assert_trajectories_close(ours, ref, atol=1e-12)

    def test_constant_gradient_momentum_closed_form(self):
        p = np.zeros(1)
        opt = optim.SGD([p], lr=0.1, momentum=0.9)
        expected = [-0.1, -0.29, -0.561]  # v = 1, 1.9, 2.71
        for value in expected:
            opt.step([np.ones(1)])
            assert abs(p[0] - value) <= 1e-12

    def test_first_momentum_step_uses_the_gradient(self):
        p = np.array([1.0, -2.0])
        opt = optim.SGD([p], lr=0.5, momentum=0.9)
        opt.step([np.array([0.2, 0.4])])
        np.testing.assert_allclose(p, [0.9, -2.2], atol=1e-15)

    def test_nesterov_closed_form(self):
        p = np.zeros(1)
        opt = optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True)
        opt.step([np.ones(1)])  # v = 1, update = 1 + 0.9 * 1
        assert abs(p[0] + 0.19) <= 1e-15
        opt.step([np.ones(1)])  # v = 1.9, update = 1 + 0.9 * 1.9
        assert abs(p[0] + 0.19 + 0.271) <= 1e-15

    def test_plain_sgd_is_exactly_p_minus_lr_g(self):
        g = rng(2)
        params = [g.normal(size=(4, 3)), g.normal(size=7)]
        start = [p.copy() for p in params]
        grads = [g.normal(size=(4, 3)), g.normal(size=7)]
        optim.SGD(params, lr=0.3).step(grads)
        for p, p0, gr in zip(params, start, grads):
            np.testing.assert_array_equal(p, p0 - 0.3 * gr)

    def test_updates_in_place_and_keeps_identity(self):
        p = np.ones(3)
        ident = id(p)
        opt = optim.SGD([p], lr=0.5)
        opt.step([np.ones(3)])
        assert id(opt.params[0]) == ident
        np.testing.assert_array_equal(p, [0.5, 0.5, 0.5])

    def test_lr_is_read_at_every_step(self):
        p = np.zeros(1)
        opt = optim.SGD([p], lr=0.1, momentum=0.9)
        opt.step([np.ones(1)])  # v = 1, p = -0.1
        opt.lr = 0.01
        opt.step([np.ones(1)])  # v = 1.9, p = -0.1 - 0.019
        assert abs(p[0] + 0.119) <= 1e-15

    def test_lr_schedule_matches_torch(self):
        torch = pytest.importorskip("torch")
        quad = _Quadratic(seed=3)
        params = quad.params()
        opt = optim.SGD(params, lr=0.05, momentum=0.9)
        tparams = [torch.tensor(p, requires_grad=True) for p in quad.init]
        topt = torch.optim.SGD(tparams, lr=0.05, momentum=0.9)
        for step in range(10):
            lr = 0.05 * 0.8**step
            opt.lr = lr
            topt.param_groups[0]["lr"] = lr
            opt.step(quad.grads(params))
            for tp, g in zip(tparams, quad.grads([t.detach().numpy() for t in tparams])):
                tp.grad = torch.from_numpy(g)
            topt.step()
        for p, tp in zip(params, tparams):
            np.testing.assert_allclose(p, tp.detach().numpy(), atol=1e-12, rtol=0)

    def test_weight_decay_is_coupled_into_the_gradient(self):
        p = np.array([2.0])
        optim.SGD([p], lr=0.1, weight_decay=0.5).step([np.array([1.0])])
        assert abs(p[0] - (2.0 - 0.1 * (1.0 + 0.5 * 2.0))) <= 1e-15

    # ---- global grad-norm clip (seed 002) ----

    def test_clip_three_four_example(self):
        grads = [np.array([3.0, 4.0])]
        norm = optim.clip_grad_norm(grads, max_norm=1.0)
        assert norm == 5.0 and isinstance(norm, float)
        np.testing.assert_allclose(grads[0], [0.6, 0.8], atol=1e-15, rtol=0)

    def test_clip_is_a_cap_not_a_normalisation(self):
        grads = [np.array([0.3, 0.4])]
        norm = optim.clip_grad_norm(grads, max_norm=1.0)
        assert abs(norm - 0.5) <= 1e-15
        np.testing.assert_array_equal(grads[0], [0.3, 0.4])

    def test_clip_is_global_across_arrays(self):
        grads = [np.array([3.0]), np.array([4.0])]
        norm = optim.clip_grad_norm(grads, max_norm=1.0)
        assert norm == 5.0
        np.testing.assert_allclose(grads[0], [0.6], atol=1e-15, rtol=0)
        np.testing.assert_allclose(grads[1], [0.8], atol=1e-15, rtol=0)

    @pytest.mark.edge_case
    def test_clip_all_zero_gradients(self):
        grads = [np.zeros(3), np.zeros((2, 2))]
        assert optim.clip_grad_norm(grads, max_norm=1.0) == 0.0
        assert all(np.all(g == 0.0) and np.all(np.isfinite(g)) for g in grads)

    @pytest.mark.edge_case
    def test_clip_exactly_at_the_cap_is_unchanged(self):
        grads = [np.array([0.6, 0.8]), np.zeros(2)]
        before = [g.copy() for g in grads]
        norm = optim.clip_grad_norm(grads, max_norm=1.0)
        assert abs(norm - 1.0) <= 1e-15
        for g, b in zip(grads, before):
            np.testing.assert_allclose(g, b, atol=1e-15, rtol=0)

    @pytest.mark.numerics_probe
    def test_clip_norm_of_huge_gradients_does_not_overflow(self):
        grads = [np.array([3e200]), np.array([4e200])]
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            norm = optim.clip_grad_norm(grads, max_norm=1.0)
        assert np.isfinite(norm) and abs(norm / 5e200 - 1.0) <= 1e-15
        np.testing.assert_allclose(np.concatenate(grads), [0.6, 0.8], atol=1e-15, rtol=0)

    def test_clip_matches_torch(self):
        torch = pytest.importorskip("torch")
        g = rng(4)
        for trial in range(5):
            shapes = [(3, 4), (7,), (2, 2, 2)]
            grads = [g.normal(size=s) * (0.1 if trial % 2 else 3.0) for s in shapes]
            tparams = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in shapes]
            for tp, gr in zip(tparams, grads):
                tp.grad = torch.from_numpy(gr.copy())
            ref_norm = float(torch.nn.utils.clip_grad_norm_(tparams, max_norm=2.0))
            norm = optim.clip_grad_norm(grads, max_norm=2.0)
            assert abs(norm - ref_norm) <= 1e-12
            clipped = np.sqrt(sum(float(np.sum(x * x)) for x in grads))
            assert clipped <= 2.0 + 1e-12
            for gr, tp in zip(grads, tparams):
                np.testing.assert_allclose(gr, tp.grad.numpy(), atol=1e-6, rtol=0)

    def test_clip_errors(self):
        with pytest.raises(ValueError, match="max_norm"):
            optim.clip_grad_norm([np.ones(2)], max_norm=0.0)
        with pytest.raises(ValueError, match="max_norm"):
            optim.clip_grad_norm([np.ones(2)], max_norm=-1.0)
        with pytest.raises(ValueError, match="max_norm"):
            optim.clip_grad_norm([np.ones(2)], max_norm=float("inf"))
        with pytest.raises(ValueError, match="max_norm"):
            optim.clip_grad_norm([np.ones(2)], max_norm=float("nan"))
        grads = [np.array([30.0, 40.0]), np.array([np.nan])]
        with pytest.raises(ValueError, match="grads"):
            optim.clip_grad_norm(grads, max_norm=1.0)
        np.testing.assert_array_equal(grads[0], [30.0, 40.0])  # untouched: validation came first
        with pytest.raises(ValueError, match="grads"):
            optim.clip_grad_norm([np.array([np.inf, 1.0])], max_norm=1.0)

    # ---- errors ----

    @pytest.mark.parametrize(
        ("kwargs", "arg"),
        [
            ({"lr": 0.0}, "lr"),
            ({"lr": -0.1}, "lr"),
            ({"lr": 0.1, "momentum": 1.0}, "momentum"),
            ({"lr": 0.1, "momentum": -0.1}, "momentum"),
            ({"lr": 0.1, "nesterov": True}, "nesterov"),
            ({"lr": 0.1, "weight_decay": -1e-3}, "weight_decay"),
        ],
    )
    def test_invalid_hyperparameters_raise(self, kwargs, arg):
        with pytest.raises(ValueError, match=arg):
            optim.SGD([np.zeros(2)], **kwargs)

    def test_grads_mismatch_raises_before_any_mutation(self):
        params, clean = [np.ones(3), np.ones((2, 2))], [np.ones(3), np.ones((2, 2))]
        opt = optim.SGD(params, lr=0.1, momentum=0.9)
        ref = optim.SGD(clean, lr=0.1, momentum=0.9)
        for o in (opt, ref):
            o.step([np.ones(3), np.full((2, 2), 2.0)])
        snapshot = [p.copy() for p in params]
        with pytest.raises(ValueError, match="grads"):
            opt.step([np.ones(3)])
        with pytest.raises(ValueError, match="grads"):
            opt.step([np.ones(3), np.ones((2, 3))])
        for p, s in zip(params, snapshot):
            np.testing.assert_array_equal(p, s)
        # the velocity is untouched too: the next step matches an optimizer that never saw the bad calls
        for o in (opt, ref):
            o.step([np.ones(3), np.full((2, 2), 2.0)])
        for p, q in zip(params, clean):
            np.testing.assert_array_equal(p, q)


class TestAdam:
    pytestmark = pytest.mark.canon("optim/adam")

    @pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
    @pytest.mark.parametrize("name", ["Adam", "AdamW"])
    def test_matches_torch(self, name, weight_decay):
        torch = pytest.importorskip("torch")
        quad = _Quadratic(seed=5)
        kwargs = {"lr": 0.05, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": weight_decay}
        mine = _run_numpy(getattr(optim, name), quad, 50, **kwargs)
        ref = _run_torch(torch, name, quad, 50, **kwargs)
        _assert_trajectories_close(mine, ref, atol=1e-12, rtol=1e-10)

    def test_first_step_moves_each_coordinate_by_lr(self):
        p = np.zeros(2)
        opt = optim.Adam([p], lr=0.1)
        g = np.array([1.0, -2.0])
        opt.step([g])
        np.testing.assert_allclose(p, -0.1 * g / (np.abs(g) + 1e-8), atol=1e-15, rtol=0)
        np.testing.assert_allclose(np.abs(p), [0.1, 0.1], atol=1e-8, rtol=0)
        assert opt.t == 1

    def test_step_counter_and_moments(self):
        p = np.zeros(1)
        opt = optim.Adam([p], lr=0.1, betas=(0.5, 0.75))
        opt.step([np.array([2.0])])
        assert opt.t == 1
        np.testing.assert_allclose(p, [-0.1 * 2.0 / (2.0 + 1e-8)], atol=1e-15)
        p[0] = -0.1  # the parameter's value does not enter the update without weight decay
        opt.step([np.array([4.0])])
        assert opt.t == 2
        m = 0.5 * (0.5 * 2.0) + 0.5 * 4.0  # 2.5
        v = 0.75 * (0.25 * 4.0) + 0.25 * 16.0  # 4.75
        second = 0.1 * (m / 0.75) / (np.sqrt(v / (1 - 0.75**2)) + 1e-8)
        np.testing.assert_allclose(p, [-0.1 - second], atol=1e-12)

    def test_adam_and_adamw_agree_without_weight_decay(self):
        quad = _Quadratic(seed=6)
        a = _run_numpy(optim.Adam, quad, 30, lr=0.02)
        b = _run_numpy(optim.AdamW, quad, 30, lr=0.02, weight_decay=0.0)
        _assert_trajectories_close(a, b, atol=1e-15)

    def test_default_weight_decay(self):
        p, q = np.ones(1), np.ones(1)
        optim.AdamW([p]).step([np.zeros(1)])  # lr 1e-3, wd 1e-2
        optim.Adam([q]).step([np.zeros(1)])  # wd 0
        np.testing.assert_allclose(p, [1.0 - 1e-3 * 1e-2], rtol=1e-15, atol=0)
        np.testing.assert_array_equal(q, [1.0])

    def test_adamw_zero_gradient_shrinks_by_exactly_one_minus_lr_wd(self):
        g = rng(7)
        params = [g.normal(size=(3, 2)), g.normal(size=4)]
        opt = optim.AdamW(params, lr=0.1, weight_decay=0.05)
        for _ in range(5):
            before = [p.copy() for p in params]
            opt.step([np.zeros((3, 2)), np.zeros(4)])
            for p, b in zip(params, before):
                np.testing.assert_allclose(p, b * (1.0 - 0.1 * 0.05), rtol=1e-15, atol=0)

    def test_adam_coupled_decay_differs_from_adamw(self):
        p_adam, p_adamw = np.array([1.0]), np.array([1.0])
        optim.Adam([p_adam], lr=0.1, weight_decay=0.05).step([np.zeros(1)])
        optim.AdamW([p_adamw], lr=0.1, weight_decay=0.05).step([np.zeros(1)])
        # coupled: g = 0.05, normalised to a full lr step; decoupled: shrink by 0.5%
        np.testing.assert_allclose(p_adam, [1.0 - 0.1 * 0.05 / (0.05 + 1e-8)], atol=1e-12)
        np.testing.assert_allclose(p_adamw, [0.995], atol=1e-15)

    @pytest.mark.numerics_probe
    def test_gradient_scale_invariance(self):
        quad = _Quadratic(seed=8)
        base = _run_numpy(optim.Adam, quad, 20, lr=0.01)
        scaled_quad = _Quadratic(seed=8, scale=1000.0)
        scaled_quad.init = quad.init
        scaled = _run_numpy(optim.Adam, scaled_quad, 20, lr=0.01)
        for a, b in zip(base, scaled):
            for p, q in zip(a, b):
                assert np.max(np.abs(p - q)) <= 1e-5 * np.max(np.abs(p))

    @pytest.mark.edge_case
    def test_zero_gradients_leave_adam_params_unchanged(self):
        p = np.array([1.0, -1.0])
        opt = optim.Adam([p], lr=0.1)
        opt.step([np.zeros(2)])
        np.testing.assert_array_equal(p, [1.0, -1.0])
        opt.step([np.array([1.0, -2.0])])  # the zero step left finite moments behind
        assert np.all(np.isfinite(p)) and np.all(np.abs(p - [1.0, -1.0]) > 0.0)

    def test_lr_is_read_at_every_step(self):
        p1, p2 = np.zeros(1), np.zeros(1)
        a = optim.Adam([p1], lr=0.1)
        b = optim.Adam([p2], lr=0.1)
        a.step([np.ones(1)])
        b.step([np.ones(1)])
        after_one = float(p1[0])
        a.lr = 0.01
        a.step([np.ones(1)])
        b.step([np.ones(1)])
        assert abs((p1[0] - after_one) - 0.1 * (p2[0] - after_one)) <= 1e-15

    @pytest.mark.parametrize("cls", ["Adam", "AdamW"])
    @pytest.mark.parametrize(
        ("kwargs", "arg"),
        [
            ({"lr": 0.0}, "lr"),
            ({"lr": -1e-3}, "lr"),
            ({"betas": (1.0, 0.999)}, "betas"),
            ({"betas": (0.9, -0.1)}, "betas"),
            ({"eps": 0.0}, "eps"),
            ({"weight_decay": -0.1}, "weight_decay"),
        ],
    )
    def test_invalid_hyperparameters_raise(self, cls, kwargs, arg):
        with pytest.raises(ValueError, match=arg):
            getattr(optim, cls)([np.zeros(2)], **kwargs)

    @pytest.mark.parametrize("cls", ["Adam", "AdamW"])
    def test_grads_mismatch_raises_before_any_mutation(self, cls):
        params = [np.ones(3), np.ones((2, 2))]
        clean = [np.ones(3), np.ones((2, 2))]
        opt = getattr(optim, cls)(params, lr=0.1)
        ref = getattr(optim, cls)(clean, lr=0.1)
        for o in (opt, ref):
            o.step([np.ones(3), np.full((2, 2), -2.0)])
        snapshot = [p.copy() for p in params]
        with pytest.raises(ValueError, match="grads"):
            opt.step([np.ones(3), np.ones((2, 2)), np.ones(1)])
        with pytest.raises(ValueError, match="grads"):
            opt.step([np.ones(4), np.ones((2, 2))])
        assert opt.t == 1
        for p, s in zip(params, snapshot):
            np.testing.assert_array_equal(p, s)
        # moments and t untouched: the next step matches an optimizer that never saw the bad calls
        for o in (opt, ref):
            o.step([np.full(3, 0.5), np.ones((2, 2))])
        for p, q in zip(params, clean):
            np.testing.assert_array_equal(p, q)
