"""Reference tests for canon #37, the tiny mixture-of-experts layer with a top-k router (docs/contract.md #37).

The independent reference is a per-token Python loop over the router's own choices; the router itself is
checked against a softmax and a stable sort written here.
"""

from __future__ import annotations

import copy

import pytest
import torch

from canon_refs.llm import moe
from canon_refs.transformer import ffn
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("llm/moe")

D, D_FF, E = 8, 16, 4
#: float32 expert FFNs of hidden width 16 summed over k experts: 16 ulps times a condition of D_FF.
COND = float(D_FF)


def _moe(seed: int = 0, n_experts: int = E, k: int = 2, **kwargs) -> moe.MoE:
    torch.manual_seed(seed)
    return moe.MoE(D, D_FF, n_experts, k, **kwargs)


def _per_token_loop(m: moe.MoE, x: torch.Tensor) -> torch.Tensor:
    """``Σ_j w_j · expert_{idx_j}(x_n)`` token by token, from the router's own weights and indices."""
    flat = x.reshape(-1, x.shape[-1])
    weights, indices, _ = m.router(flat)
    rows = []
    for n in range(flat.shape[0]):
        total = torch.zeros(flat.shape[-1], dtype=flat.dtype)
        for j in range(indices.shape[1]):
            total = total + weights[n, j] * m.experts[int(indices[n, j])](flat[n:n + 1])[0]
        rows.append(total)
    return torch.stack(rows).reshape(x.shape)


def _identical_experts(m: moe.MoE) -> None:
    with torch.no_grad():
        for expert in m.experts[1:]:
            for p_dst, p_src in zip(expert.parameters(), m.experts[0].parameters(), strict=True):
                p_dst.copy_(p_src)


# ----------------------------------------------------------------------------- router


def test_router_outputs():
    torch.manual_seed(1)
    router = moe.TopKRouter(D, 6, k=3)
    assert router.gate.weight.shape == (6, D) and router.gate.bias is None
    x = randn(10, D, seed=2)
    weights, indices, probs = router(x)
    assert weights.shape == (10, 3) and indices.shape == (10, 3) and probs.shape == (10, 6)
    assert indices.dtype == torch.long
    logits = x.double() @ router.gate.weight.detach().double().T
    expected_probs = torch.softmax(logits, dim=-1)
    size = float(logits.abs().max())  # a softmax of logits of this size
    assert_close(probs, expected_probs, cond=size, what="TopKRouter probs")
    expected_idx = torch.sort(expected_probs, dim=-1, descending=True, stable=True).indices[:, :3]
    assert torch.equal(indices, expected_idx)
    top = expected_probs.gather(1, expected_idx)
    assert_close(weights, top / top.sum(-1, keepdim=True), cond=size, what="TopKRouter weights (renormalised)")
    assert_close(weights.sum(-1), torch.ones(10), cond=size, what="TopKRouter weights.sum(-1)")


def test_ties_go_to_the_lower_expert_index():
    torch.manual_seed(3)
    router = moe.TopKRouter(D, 5, k=2)
    x = torch.rand(7, D) + 0.1                                           # positive tokens
    with torch.no_grad():
        router.gate.weight.zero_()
    _, indices, probs = router(x)
    assert indices.tolist() == [[0, 1]] * 7                              # all five experts tie
    assert_close(probs, torch.full((7, 5), 0.2), what="TopKRouter probs with a zero gate")
    with torch.no_grad():
        router.gate.weight[1] = 1.0                                      # experts 1 and 3 tie for first,
        router.gate.weight[3] = 1.0                                      # experts 0 and 4 tie for third
        router.gate.weight[0] = 0.5
        router.gate.weight[4] = 0.5
    assert router(x)[1].tolist() == [[1, 3]] * 7
    router.k = 3
    assert router(x)[1].tolist() == [[1, 3, 0]] * 7


# ----------------------------------------------------------------------------- layer


@pytest.mark.parametrize("expert", ["gelu", "swiglu"])
def test_output_equals_per_token_loop(expert):
    m = _moe(seed=4, expert=expert)
    x = randn(3, 5, D, seed=5)
    out, aux = m(x)
    assert out.shape == (3, 5, D) and aux.shape == ()
    assert_close(out, _per_token_loop(m, x), cond=COND, what=f"MoE({expert}) vs the per-token loop")
    expert_type = ffn.FeedForward if expert == "gelu" else ffn.SwiGLU
    assert len(m.experts) == E and all(isinstance(e, expert_type) for e in m.experts)


@pytest.mark.parametrize("k", [1, 3])
def test_output_equals_per_token_loop_other_k(k):
    m = _moe(seed=6, n_experts=5, k=k)
    x = randn(2, 6, D, seed=7)
    assert_close(m(x)[0], _per_token_loop(m, x), cond=COND, what=f"MoE(k={k}) vs the per-token loop")


@pytest.mark.parametrize("k", [E, 2])
def test_identical_experts_equal_one_expert(k):
    m = _moe(seed=8, k=k)
    _identical_experts(m)
    x = randn(2, 5, D, seed=9)
    assert_close(m(x)[0], m.experts[0](x), cond=COND, what=f"MoE(k={k}) of identical experts vs one expert")


def test_aux_loss_uniform_router_is_one():
    m = _moe(seed=10)
    with torch.no_grad():
        m.router.gate.weight.zero_()
    _, aux = m(randn(2, 7, D, seed=11))
    assert_close(aux, torch.tensor(1.0), cond=float(E), what="load-balancing loss of a uniform router")
    uniform = torch.full((9, E), 1.0 / E)
    for seed in range(3):                                                # whatever the assignment
        indices = torch.randint(0, E, (9, 2), generator=torch.Generator().manual_seed(seed))
        assert_close(moe.load_balancing_loss(uniform, indices, E), torch.tensor(1.0), cond=float(E),
                     what="load_balancing_loss(uniform probs)")


def test_aux_loss_collapsed_router_is_n_experts():
    probs = torch.zeros(6, E)
    probs[:, 2] = 1.0
    indices = torch.full((6, 1), 2)
    assert_close(moe.load_balancing_loss(probs, indices, E), torch.tensor(float(E)), what="load_balancing_loss(collapsed)")


def test_aux_loss_closed_form_counts_every_slot():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]], dtype=torch.float64)
    # top-1: f = [1/2, 1/2, 0], P = [0.4, 0.4, 0.2] -> 3 · (0.2 + 0.2) = 1.2
    top1 = moe.load_balancing_loss(probs, torch.tensor([[0], [1]]), 3)
    assert_close(top1, torch.tensor(1.2, dtype=torch.float64), what="load_balancing_loss(top-1)")
    # top-2: f = [1/4, 1/2, 1/4] over the N·k = 4 assignments -> 3 · (0.1 + 0.2 + 0.05) = 1.05
    top2 = moe.load_balancing_loss(probs, torch.tensor([[0, 1], [1, 2]]), 3)
    assert_close(top2, torch.tensor(1.05, dtype=torch.float64), what="load_balancing_loss(top-2)")


def test_aux_loss_gradient_flows_through_router_probs_only():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]], dtype=torch.float64, requires_grad=True)
    moe.load_balancing_loss(probs, torch.tensor([[0, 1], [1, 2]]), 3).backward()
    # d/dP[n, e] of E · Σ f_e · mean_n P[n, e] = E · f_e / N
    expected = torch.tensor([[0.25, 0.5, 0.25]] * 2, dtype=torch.float64) * 3 / 2
    assert_close(probs.grad, expected, what="grad of load_balancing_loss w.r.t. router_probs")


def test_router_gets_gradient_and_an_unused_expert_raises_nothing():
    m = _moe(seed=12)
    x = torch.rand(2, 5, D) + 0.1                                        # positive tokens
    with torch.no_grad():
        m.router.gate.weight.copy_(torch.tensor([1.0, 0.6, 0.3, -1.0])[:, None].expand(E, D))
    out, _ = m(x)
    assert int((m.router(x.reshape(-1, D))[1] == 3).sum()) == 0          # expert 3 is never chosen
    out.pow(2).sum().backward()
    gate_grad = m.router.gate.weight.grad
    assert gate_grad is not None and float(gate_grad.abs().sum()) > 0.0
    for p in m.experts[3].parameters():
        assert p.grad is None or not p.grad.any()
    for p in m.experts[0].parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0.0
    m.zero_grad()
    m(x)[1].backward()
    assert float(m.router.gate.weight.grad.abs().sum()) > 0.0


def test_token_permutation_equivariance():
    m = _moe(seed=13)
    x = randn(2, 6, D, seed=14)
    perm = torch.tensor([4, 1, 5, 0, 3, 2])
    out, aux = m(x)
    out_p, aux_p = m(x[:, perm])
    assert_close(out_p, out[:, perm], cond=COND, what="MoE on permuted tokens")
    assert_close(aux_p, aux, cond=COND, what="load-balancing loss on permuted tokens")


def test_gradcheck_float64():
    m = _moe(seed=15, n_experts=3).double()
    x = randn(1, 3, D, seed=16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda inp: m(inp)[0], (x,))


# ----------------------------------------------------------------------------- numerics and edges


@pytest.mark.numerics_probe
def test_extreme_router_logits():
    m = _moe(seed=17)
    x = randn(2, 4, D, seed=18)
    with torch.no_grad():
        m.router.gate.weight.mul_(1e4 / m.router.gate.weight.abs().max())  # logits of order ±1e4
    weights, indices, probs = m.router(x.reshape(-1, D))
    assert torch.isfinite(weights).all() and torch.isfinite(probs).all()
    # logits of size 1e4: a stable softmax is off by about eps * 1e4
    assert_close(probs.sum(-1), torch.ones(8), magnitude=1e4, what="router probs.sum(-1) at logits of 1e4")
    assert_close(weights.sum(-1), torch.ones(8), magnitude=1e4, what="router weights.sum(-1) at logits of 1e4")
    out, aux = m(x)
    assert torch.isfinite(out).all() and torch.isfinite(aux)
    assert_close(out, _per_token_loop(m, x), cond=COND, what="MoE at extreme router logits vs the per-token loop")


@pytest.mark.numerics_probe
def test_fp16_probe():
    m = _moe(seed=19)

    def run(inp: torch.Tensor) -> torch.Tensor:
        return copy.deepcopy(m).to(inp.dtype)(inp)[0]

    assert_low_precision_matches(run, randn(2, 5, D, seed=20))


@pytest.mark.edge_case
def test_single_token():
    m = _moe(seed=21)
    x = randn(1, 1, D, seed=22)
    out, aux = m(x)
    assert out.shape == (1, 1, D)
    assert_close(out, _per_token_loop(m, x), cond=COND, what="MoE on one token")
    assert torch.isfinite(aux)


@pytest.mark.edge_case
def test_one_expert_is_a_dense_ffn():
    m = _moe(seed=23, n_experts=1, k=1)
    x = randn(2, 3, D, seed=24)
    out, aux = m(x)
    assert_close(out, m.experts[0](x), cond=COND, what="MoE(one expert) vs the dense FFN")
    assert_close(aux, torch.tensor(1.0), what="load-balancing loss with one expert")


def test_inputs_are_not_modified():
    m = _moe(seed=26)
    call_leaves_inputs_unchanged(m, randn(2, 5, D, seed=27))
    probs = torch.softmax(randn(6, E, seed=28), dim=-1)
    call_leaves_inputs_unchanged(moe.load_balancing_loss, probs, torch.tensor([[0, 1], [1, 2]] * 3), E)


@pytest.mark.contract
@pytest.mark.parametrize(("n_experts", "k"), [(4, 0), (4, 5), (0, 1)])
def test_invalid_counts(n_experts, k):
    with pytest.raises(ValueError):
        moe.MoE(D, D_FF, n_experts, k)
    with pytest.raises(ValueError):
        moe.TopKRouter(D, n_experts, k)


@pytest.mark.contract
def test_invalid_inputs():
    m = _moe(seed=25)
    with pytest.raises(ValueError):
        m(randn(2, 3, D + 1))
    with pytest.raises(ValueError):
        m.router(randn(2, 3, D))
    with pytest.raises(ValueError):
        moe.MoE(D, D_FF, E, expert="relu")
    probs = torch.full((3, E), 0.25)
    with pytest.raises(ValueError):
        moe.load_balancing_loss(probs, torch.zeros(3, 1, dtype=torch.long), E + 1)
    with pytest.raises(ValueError):
        moe.load_balancing_loss(probs, torch.zeros(2, 1, dtype=torch.long), E)
    with pytest.raises(ValueError):
        moe.load_balancing_loss(probs, torch.full((3, 1), E), E)
