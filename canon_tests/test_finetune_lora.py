"""Reference tests for canon #38, the LoRA wrapper (docs/contract.md #38), including LoRA on the GPT of #31."""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch
from torch import nn

from canon_refs.finetune import lora
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("finetune/lora")

PERIOD_7 = torch.tensor([i % 7 for i in range(7 * 20)])


def _wrapped(d_in: int = 16, d_out: int = 12, seed: int = 0, randomise_b: bool = False, **kwargs) -> lora.LoRALinear:
    torch.manual_seed(seed)
    layer = lora.LoRALinear(nn.Linear(d_in, d_out), **kwargs)
    if randomise_b:
        with torch.no_grad():
            layer.lora_B.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(seed + 1))
    return layer


def _tiny_gpt(seed: int = 0, vocab_size: int = 7):
    from canon_refs.transformer import gpt  # imported here so a broken #31 only fails the GPT tests

    torch.manual_seed(seed)
    return gpt.GPT(gpt.GPTConfig(vocab_size=vocab_size, max_seq_len=16, d_model=32, n_heads=4, n_layers=2))


# ----------------------------------------------------------------------------- the wrapper


def test_output_equals_base_exactly_at_init():
    layer = _wrapped(seed=1)
    x = randn(3, 5, 16, seed=2)
    assert torch.equal(layer(x), layer.base(x))  # B = 0 makes the update exactly 0, in any implementation
    assert layer.lora_B.shape == (12, 8) and not layer.lora_B.detach().any()        # default r = 8


def test_first_gradient_reaches_b_only():
    layer = _wrapped(seed=3, r=4)
    layer(randn(6, 16, seed=4)).pow(2).sum().backward()
    assert layer.lora_A.grad is not None and torch.equal(layer.lora_A.grad, torch.zeros_like(layer.lora_A))
    assert layer.lora_B.grad is not None and float(layer.lora_B.grad.abs().sum()) > 0.0
    assert layer.base.weight.grad is None and layer.base.bias.grad is None


def test_trainable_parameter_count_and_shapes():
    layer = lora.LoRALinear(nn.Linear(64, 32), r=4)
    assert lora.count_trainable_parameters(layer) == 384                # 4 · (64 + 32)
    assert layer.lora_A.shape == (4, 64) and layer.lora_B.shape == (32, 4)
    assert not layer.base.weight.requires_grad and not layer.base.bias.requires_grad
    assert layer.scaling == 16.0 / 4 and layer.merged is False
    assert lora.LoRALinear(nn.Linear(64, 32), r=8, alpha=4.0).scaling == 0.5


def test_init_distribution_of_a():
    layer = lora.LoRALinear(nn.Linear(100, 50), r=16)
    bound = 1.0 / math.sqrt(100)                                         # kaiming_uniform(a=√5), fan_in = 100
    A = layer.lora_A.detach()
    assert float(A.abs().max()) <= bound and float(A.abs().max()) > 0.9 * bound
    # 1600 draws of U(-bound, bound): the sample std is within 2% of bound/sqrt(3) at one standard error,
    # so 0.1 * bound is more than 5 standard errors
    assert abs(float(A.std()) - bound / math.sqrt(3)) < 0.1 * bound
    assert not layer.lora_B.detach().any()


def test_forward_formula():
    layer = _wrapped(seed=5, randomise_b=True, r=2, alpha=8.0).double()
    x = randn(4, 3, 16, seed=6, dtype=torch.float64)
    W, b, A, B = layer.base.weight, layer.base.bias, layer.lora_A, layer.lora_B
    expected = x @ W.T + b + 4.0 * (x @ A.T @ B.T)                      # scaling = 8 / 2
    assert_close(layer(x), expected, cond=16.0, what="LoRALinear(r=2, alpha=8) in float64")


def test_merge_and_unmerge():
    layer = _wrapped(seed=7, randomise_b=True, r=4)
    x = randn(5, 16, seed=8)
    W0 = layer.base.weight.detach().clone()
    before = layer(x).detach()
    merged_weight = W0.double() + layer.scaling * layer.lora_B.detach().double() @ layer.lora_A.detach().double()
    layer.merge()
    assert layer.merged
    assert_close(layer.base.weight, merged_weight, dtype=torch.float32, cond=4.0, what="base.weight after merge()")
    assert_close(layer(x), before, cond=16.0, what="LoRALinear output after merge()")
    assert_close(layer(x), x @ merged_weight.float().T + layer.base.bias, cond=16.0,
                 what="merged LoRALinear (the adapter is skipped)")
    with pytest.raises(RuntimeError):
        layer.merge()
    layer.unmerge()
    assert not layer.merged
    assert_close(layer.base.weight, W0, magnitude=float(merged_weight.abs().max()), what="base.weight after unmerge()")
    assert_close(layer(x), before, cond=16.0, what="LoRALinear output after unmerge()")


def test_dropout_acts_on_the_adapter_only():
    layer = _wrapped(seed=9, dropout=0.5)
    x = randn(4, 16, seed=10)
    layer.train()
    assert torch.equal(layer(x), layer.base(x))                          # B = 0: dropout cannot show
    with torch.no_grad():
        layer.lora_B.normal_()
    layer.eval()
    eval_out = layer(x)
    assert_close(eval_out, layer.base(x) + layer.scaling * (x @ layer.lora_A.T @ layer.lora_B.T), cond=16.0,
                 what="LoRALinear(dropout=0.5) in eval mode")
    layer.train()
    assert not torch.allclose(layer(x), eval_out, atol=1e-4)


def test_gradcheck_float64():
    layer = _wrapped(4, 3, seed=11, randomise_b=True, r=2).double()
    x = randn(2, 4, seed=12, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))



def test_adapters_follow_the_base_dtype():
    # The stub: lora_A and lora_B are in the base weight's dtype, so a float64 base gives a float64 layer.
    torch.manual_seed(0)
    layer = lora.LoRALinear(nn.Linear(4, 3).double(), r=2)
    assert layer.lora_A.dtype == torch.float64 and layer.lora_B.dtype == torch.float64
    assert layer(randn(2, 4, seed=1, dtype=torch.float64)).dtype == torch.float64


def test_count_trainable_parameters_counts_a_tied_weight_once():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    assert lora.count_trainable_parameters(Tied()) == 40

@pytest.mark.numerics_probe
def test_fp16_probe():
    layer = _wrapped(seed=13, randomise_b=True, r=4)

    def run(inp: torch.Tensor) -> torch.Tensor:
        return copy.deepcopy(layer).to(inp.dtype)(inp)

    assert_low_precision_matches(run, randn(3, 16, seed=14))


@pytest.mark.numerics_probe
def test_merge_round_trip_with_large_weights():
    layer = _wrapped(seed=15, randomise_b=True, r=4)
    with torch.no_grad():
        layer.base.weight.mul_(1e4)
    W0 = layer.base.weight.detach().clone()
    layer.merge()
    layer.unmerge()
    assert torch.isfinite(layer.base.weight).all()
    assert_close(layer.base.weight, W0, what="base.weight of size 1e4 after merge() and unmerge()")


@pytest.mark.edge_case
def test_rank_one_and_any_leading_dims():
    layer = _wrapped(seed=16, randomise_b=True, r=1)
    x = randn(2, 3, 4, 16, seed=17)
    out = layer(x)
    assert out.shape == (2, 3, 4, 12)
    want = x @ layer.base.weight.T + layer.base.bias + layer.scaling * (x @ layer.lora_A.T @ layer.lora_B.T)
    assert_close(out, want, cond=16.0, what="LoRALinear(r=1) on (2, 3, 4, 16) inputs")
    assert_close(layer(x[0, 0, 0]), want[0, 0, 0], cond=16.0, what="LoRALinear(r=1) on one vector")
    assert lora.count_trainable_parameters(layer) == 16 + 12


# ----------------------------------------------------------------------------- on a model


def test_apply_lora_on_gpt_trains_only_the_adapters():
    from canon_refs.transformer import gpt

    # lr 3e-2, 20 steps: the last-5 mean loss was 0.30 to 0.35 below the first loss on seeds 0-4
    model = _tiny_gpt(seed=0)
    base_before = {k: v.clone() for k, v in model.state_dict().items()}
    returned = lora.apply_lora(model, r=4)
    assert returned is model
    wrapped = [m for m in model.modules() if isinstance(m, lora.LoRALinear)]
    assert len(wrapped) == 4                                             # q_proj and v_proj of 2 blocks
    assert all(isinstance(b.self_attn.q_proj, lora.LoRALinear) for b in model.blocks)
    assert all(isinstance(b.self_attn.k_proj, nn.Linear) for b in model.blocks)
    expected = sum(m.lora_A.shape[0] * (m.base.in_features + m.base.out_features) for m in wrapped)
    assert expected == 4 * 4 * (32 + 32)
    assert lora.count_trainable_parameters(model) == expected
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)

    losses = gpt.train_gpt(model, PERIOD_7, steps=20, batch_size=8, seq_len=16, lr=3e-2, seed=0)["losses"]
    assert sum(losses[-5:]) / 5 < losses[0] - 0.15
    after = model.state_dict()
    for key, value in base_before.items():
        wrapped_key = key
        if key not in after:                                             # q_proj.weight -> q_proj.base.weight
            head, _, leaf = key.rpartition(".")
            wrapped_key = f"{head}.base.{leaf}"
        assert torch.equal(after[wrapped_key], value), f"base weight {key} moved"


def test_apply_lora_custom_targets_and_state_dict():
    model = _tiny_gpt(seed=1, vocab_size=13)
    lora.apply_lora(model, target_modules=["fc1", "fc2", "out_proj"], r=2, alpha=4.0)
    wrapped = [m for m in model.modules() if isinstance(m, lora.LoRALinear)]
    assert len(wrapped) == 6
    assert lora.count_trainable_parameters(model) == 2 * 2 * ((32 + 128) + (128 + 32) + (32 + 32))
    state = lora.lora_state_dict(model)
    assert len(state) == 12 and all("lora_" in key for key in state)
    assert {tuple(v.shape) for k, v in state.items() if k.endswith("fc1.lora_A")} == {(2, 32)}
    logits = model(torch.tensor([[1, 2, 3]]))[0]
    assert logits.shape == (1, 3, 13)


def test_apply_lora_at_init_leaves_the_model_function_unchanged():
    model = _tiny_gpt(seed=2, vocab_size=13)
    idx = torch.randint(0, 13, (2, 6), generator=torch.Generator().manual_seed(3))
    before = model(idx)[0]
    lora.apply_lora(model, r=4, dropout=0.1)
    model.train()
    assert torch.equal(model(idx)[0], before)


def test_apply_lora_on_a_plain_module():
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(8, 8)
            self.v_proj = nn.Linear(8, 4)
            self.norm = nn.LayerNorm(8)

    model = nn.Sequential(Block(), Block())
    lora.apply_lora(model, r=2)
    n_trainable = 2 * (2 * (8 + 8) + 2 * (8 + 4))
    assert lora.count_trainable_parameters(model) == n_trainable
    assert not model[0].norm.weight.requires_grad
    # a second call finds only wrapped layers: they are not wrapped again (a ValueError is accepted too)
    with contextlib.suppress(ValueError):
        lora.apply_lora(model, r=2)
    assert sum(isinstance(m, lora.LoRALinear) for m in model.modules()) == 4
    assert not any(isinstance(m.base, lora.LoRALinear) for m in model.modules() if isinstance(m, lora.LoRALinear))


def test_inputs_are_not_modified():
    layer = _wrapped(seed=18, randomise_b=True, r=4, dropout=0.2)
    call_leaves_inputs_unchanged(layer, randn(3, 16, seed=19))


# ----------------------------------------------------------------------------- errors


@pytest.mark.contract
@pytest.mark.parametrize("kwargs", [{"r": 0}, {"alpha": 0.0}, {"alpha": -1.0}, {"dropout": 1.0}],
                         ids=["r", "alpha_zero", "alpha_negative", "dropout"])
def test_invalid_hyperparameters(kwargs):
    with pytest.raises(ValueError):
        lora.LoRALinear(nn.Linear(4, 4), **kwargs)
    model = nn.Sequential()
    model.add_module("q_proj", nn.Linear(4, 4))
    with pytest.raises(ValueError):
        lora.apply_lora(model, **kwargs)
    assert isinstance(model.q_proj, nn.Linear) and model.q_proj.weight.requires_grad


@pytest.mark.contract
def test_invalid_base_and_no_match_leave_the_model_untouched():
    with pytest.raises(ValueError):
        lora.LoRALinear(nn.Conv1d(4, 4, 1))
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(ValueError):
        lora.apply_lora(model, target_modules=("q_proj", "v_proj"))
    assert all(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError):
        _wrapped()(randn(2, 15))
