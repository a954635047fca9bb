"""Reference tests for #54, the reward model with a pairwise head (docs/contract.md #54; numbers from seed 001,
pair layout from seed 002). The backbone is the tiny GPT of #31."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from canon_refs.posttrain import reward_model
from canon_refs.transformer import gpt
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("posttrain/reward_model")

# Seed 001, "bt": P(chosen > rejected) for reward gaps 0.5, 1, 2, 4; the 75% win rate inverts to ln 3.
BT_DELTAS = [0.5, 1.0, 2.0, 4.0]
BT_PROBS = [0.6224593312018546, 0.7310585786300049, 0.8807970779778824, 0.9820137900379085]
LN3 = 1.0986122886681098
LN2 = 0.6931471805599453

VOCAB = 16
PAD_ID = 0
MARK = 7  # the fixture's chosen side contains token 7, the rejected side never does
TRAIN_SEED = 0
TRAIN_STEPS = 200
MIN_HELD_OUT_ACCURACY = 0.9  # the reference reaches 1.000 on seeds 0-4 (untrained: 0.45-0.57); 1.2-2.0 s CPU


def _close(value, expected, what: str, magnitude: float | None = None) -> None:
    """``value`` matches the trusted ``expected`` to a few ulps (of ``magnitude`` where a difference cancels)."""
    assert_close(torch.as_tensor(value).detach(), torch.as_tensor(expected, dtype=torch.float64), magnitude=magnitude,
                 what=what)


def _tiny_gpt(seed: int = 0, n_layers: int = 1) -> gpt.GPT:
    torch.manual_seed(seed)
    return gpt.GPT(gpt.GPTConfig(vocab_size=VOCAB, max_seq_len=16, d_model=16, n_heads=2, n_layers=n_layers))


def _tiny_reward_model(seed: int = 0) -> reward_model.RewardModel:
    rm = reward_model.RewardModel.from_gpt(_tiny_gpt(seed))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a fixed head, whatever the learner's initialisation; a non-zero bias so that
        rm.head.weight.copy_(0.02 * torch.randn(rm.head.weight.shape, generator=gen))  # "bias gets no
        rm.head.bias.fill_(0.3)  # gradient" is not trivially true
    return rm


def _reward_scale(rm: reward_model.RewardModel, ids: torch.Tensor, mask: torch.Tensor) -> float:
    """The size of the terms of a reward, sum_i |w_i h_i| + |b|: rounding in the backbone shows at that size."""
    with torch.no_grad():
        hidden = rm.backbone.hidden_states(ids, attention_mask=mask)
        return float(rm.head.weight.abs().sum() * hidden.abs().max() + rm.head.bias.abs().max())


def _preference_pairs(n: int, gen: torch.Generator) -> tuple[list[list[int]], list[list[int]]]:
    """``n`` pairs of random sequences of length 3-10 over ids 1..15 without 7; token 7 is then written
    at a random position of each chosen sequence. Lengths of the two sides are drawn independently."""
    allowed = torch.tensor([t for t in range(1, VOCAB) if t != MARK])
    chosen, rejected = [], []
    for _ in range(n):
        len_c = int(torch.randint(3, 11, (1,), generator=gen))
        len_r = int(torch.randint(3, 11, (1,), generator=gen))
        c = allowed[torch.randint(0, len(allowed), (len_c,), generator=gen)]
        c[int(torch.randint(0, len_c, (1,), generator=gen))] = MARK
        r = allowed[torch.randint(0, len(allowed), (len_r,), generator=gen)]
        chosen.append(c.tolist())
        rejected.append(r.tolist())
    return chosen, rejected


# --- Bradley-Terry probability and its inverse ---------------------------------------------------------


def test_bradley_terry_table_from_seed():
    probs = reward_model.bradley_terry_prob(torch.tensor(BT_DELTAS, dtype=torch.float64), 0.0)
    assert probs.shape == (4,) and probs.dtype == torch.float64
    _close(probs, BT_PROBS, "bradley_terry_prob(seed 001 gaps, 0)")
    for delta, expected in zip(BT_DELTAS, BT_PROBS):
        scalar = reward_model.bradley_terry_prob(delta, 0.0)
        assert scalar.dtype == torch.float64, "Python numbers are computed in float64"
        _close(scalar, expected, f"bradley_terry_prob({delta}, 0.0)")


def test_bradley_terry_depends_on_the_gap_only():
    chosen = torch.tensor([2.5, -3.0, 10.0, 0.25], dtype=torch.float64)
    rejected = chosen - torch.tensor(BT_DELTAS, dtype=torch.float64)
    # rewards up to 10 in size: their difference is exact to a few ulps of 10
    _close(reward_model.bradley_terry_prob(chosen, rejected), BT_PROBS, "bradley_terry_prob(shifted pairs)",
           magnitude=10.0)
    # the two orderings are complementary
    _close(reward_model.bradley_terry_prob(rejected, chosen), [1.0 - p for p in BT_PROBS],
           "bradley_terry_prob(rejected, chosen)", magnitude=10.0)


def test_bradley_terry_keeps_float32_and_broadcasts():
    chosen = randn(3, 1, seed=1)
    rejected = randn(1, 4, seed=2)
    want = torch.sigmoid(chosen.double() - rejected.double())
    probs = reward_model.bradley_terry_prob(chosen.clone(), rejected.clone())
    assert probs.shape == (3, 4) and probs.dtype == torch.float32
    _close(probs, want, "bradley_terry_prob(float32 (3, 1), float32 (1, 4))", magnitude=4.0)


def test_logit_of_three_to_one_is_ln3():
    _close(reward_model.logit(0.75), LN3, "logit(0.75)")
    # logit(p) near p = 0.98 amplifies the rounding of p by 1 / (p (1 - p)) = 57
    round_trip = reward_model.logit(torch.tensor(BT_PROBS, dtype=torch.float64))
    _close(round_trip, BT_DELTAS, "logit(bradley_terry probabilities)", magnitude=4.0 * 57)
    _close(reward_model.logit(0.5), 0.0, "logit(0.5)", magnitude=1.0)


@pytest.mark.contract
@pytest.mark.parametrize("p", [0.0, 1.0, float("nan"), float("inf"), -0.25, 1.5])
def test_logit_rejects_values_outside_the_open_interval(p):
    with pytest.raises(ValueError):
        reward_model.logit(p)
    with pytest.raises(ValueError):
        reward_model.logit(torch.tensor([0.5, p], dtype=torch.float64))


@pytest.mark.numerics_probe
def test_sigmoid_saturates_exactly_without_overflow():
    up = reward_model.bradley_terry_prob(1000.0, 0.0)
    down = reward_model.bradley_terry_prob(-1000.0, 0.0)
    assert up.item() == 1.0 and down.item() == 0.0
    wide = reward_model.bradley_terry_prob(torch.tensor([1e4, -1e4, 0.0]), torch.zeros(3))
    assert torch.isfinite(wide).all()
    assert wide.tolist() == [1.0, 0.0, 0.5]


# --- pairwise loss ----------------------------------------------------------------------------------------


def test_equal_rewards_give_ln2_and_a_shared_constant_changes_nothing():
    rewards = randn(6, seed=3, dtype=torch.float64)
    _close(reward_model.pairwise_loss(rewards, rewards.clone()), LN2, "pairwise_loss(r, r)")
    chosen = randn(6, seed=4, dtype=torch.float64)
    delta = chosen - rewards
    for shift in (-7.5, 3.0, 100.0):
        # a shift of size s costs a few ulps of s in the gap
        _close(reward_model.pairwise_loss(chosen + shift, rewards + shift), F.softplus(-delta).mean(),
               f"pairwise_loss(chosen + {shift}, rejected + {shift})", magnitude=abs(shift) + 3.0)


def test_pairwise_loss_is_mean_negative_log_sigmoid_with_its_gradient():
    chosen = randn(5, seed=5, dtype=torch.float64, requires_grad=True)
    rejected = randn(5, seed=6, dtype=torch.float64, requires_grad=True)
    loss = call_leaves_inputs_unchanged(reward_model.pairwise_loss, chosen, rejected)
    assert loss.shape == () and loss.dtype == torch.float64
    delta = (chosen - rejected).detach()
    _close(loss, (-F.logsigmoid(delta)).mean(), "pairwise_loss", magnitude=4.0)
    loss.backward()
    _close(chosen.grad, -torch.sigmoid(-delta) / 5, "d pairwise_loss / d reward_chosen", magnitude=4.0)
    _close(rejected.grad, torch.sigmoid(-delta) / 5, "d pairwise_loss / d reward_rejected", magnitude=4.0)


def test_pairwise_loss_on_the_seed_gaps():
    chosen = torch.tensor(BT_DELTAS, dtype=torch.float64)
    loss = reward_model.pairwise_loss(chosen, torch.zeros(4, dtype=torch.float64))
    _close(loss, sum(-math.log(p) for p in BT_PROBS) / 4, "pairwise_loss(seed 001 gaps, 0)", magnitude=4.0)


def test_margin_is_subtracted_from_the_gap():
    chosen = randn(4, seed=7, dtype=torch.float64)
    rejected = randn(4, seed=8, dtype=torch.float64)
    margin = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=torch.float64)
    want = (-F.logsigmoid(chosen - rejected - margin)).mean()
    got = call_leaves_inputs_unchanged(reward_model.pairwise_loss, chosen, rejected, margin)
    _close(got, want, "pairwise_loss(..., margin)", magnitude=5.0)
    assert float(got) > float((-F.logsigmoid(chosen - rejected)).mean())  # a margin only makes it harder


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pairwise_loss_at_extreme_gaps_is_finite(dtype):
    zeros = torch.zeros(1, dtype=dtype)
    right = torch.tensor([1e4], dtype=dtype, requires_grad=True)
    wrong = torch.tensor([-1e4], dtype=dtype, requires_grad=True)
    easy = reward_model.pairwise_loss(right, zeros)
    hard = reward_model.pairwise_loss(wrong, zeros)
    assert torch.isfinite(easy) and torch.isfinite(hard)
    assert_close(easy, 0.0, what=f"pairwise_loss at a gap of 1e4 ({dtype})")
    assert_close(hard, 1e4, what=f"pairwise_loss at a gap of -1e4 ({dtype})")
    (easy + hard).backward()
    assert torch.isfinite(right.grad).all() and torch.isfinite(wrong.grad).all()
    assert_close(wrong.grad, [-1.0], what="gradient of a saturated wrong pair (slope -1)")
    assert_close(right.grad, [0.0], what="gradient of a saturated right pair")


@pytest.mark.numerics_probe
def test_low_precision_probe():
    chosen = randn(8, seed=9) * 3
    rejected = randn(8, seed=10) * 3
    assert_low_precision_matches(reward_model.pairwise_loss, chosen, rejected)
    assert_low_precision_matches(reward_model.bradley_terry_prob, chosen, rejected)
    half = reward_model.pairwise_loss(chosen.half(), rejected.half())
    assert half.dtype == torch.float16


@pytest.mark.contract
def test_pairwise_loss_errors():
    good = torch.zeros(3)
    with pytest.raises(ValueError):
        reward_model.pairwise_loss(torch.zeros(4), good)
    with pytest.raises(ValueError):
        reward_model.pairwise_loss(torch.zeros(3, 1), torch.zeros(3, 1))
    with pytest.raises(ValueError):
        reward_model.pairwise_loss(good, torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(ValueError):
        reward_model.pairwise_loss(torch.tensor([0.0, float("inf"), 1.0]), good)
    with pytest.raises(ValueError):
        reward_model.pairwise_loss(good, good, margin=torch.zeros(2))
    with pytest.raises(ValueError):
        reward_model.pairwise_loss(good, good, margin=torch.zeros(3, 1))


def test_pair_accuracy_counts_ties_as_wrong():
    chosen = torch.tensor([1.0, 2.0, 3.0, 0.5])
    rejected = torch.tensor([0.0, 2.0, 4.0, -0.5])
    acc = reward_model.pair_accuracy(chosen, rejected)
    assert isinstance(acc, float) and acc == 0.5
    assert reward_model.pair_accuracy(chosen, chosen) == 0.0


@pytest.mark.contract
def test_pair_accuracy_errors():
    with pytest.raises(ValueError):
        reward_model.pair_accuracy(torch.zeros(2), torch.zeros(3))


# --- pooling index and collation -------------------------------------------------------------------------


def test_last_token_index_of_right_padded_rows():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    idx = reward_model.last_token_index(mask)
    assert idx.shape == (3,) and idx.dtype == torch.long
    assert idx.tolist() == [2, 0, 3]
    assert torch.equal(reward_model.last_token_index(mask.bool()), idx)



def test_last_token_index_of_left_padded_rows():
    # The stub: the largest position whose mask is set, so it holds for any padding side (a count of real
    # tokens minus one would point into the row's padding-free prefix instead).
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 0, 0]])
    assert reward_model.last_token_index(mask).tolist() == [3, 3, 1]

@pytest.mark.contract
def test_last_token_index_rejects_an_empty_row():
    with pytest.raises(ValueError):
        reward_model.last_token_index(torch.tensor([[1, 1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError):
        reward_model.last_token_index(torch.ones(3, dtype=torch.long))


def test_collate_pairs_pads_each_side_to_its_own_longest_row():
    chosen, rejected = [[1, 2, 3], [4, 5]], [[6], [7, 8, 9, 10]]
    batch = reward_model.collate_pairs(chosen, rejected, pad_id=0)
    assert chosen == [[1, 2, 3], [4, 5]] and rejected == [[6], [7, 8, 9, 10]], "collate_pairs modified its input lists"
    assert set(batch) == {"chosen_ids", "chosen_mask", "rejected_ids", "rejected_mask"}
    assert batch["chosen_ids"].shape == (2, 3) and batch["chosen_mask"].shape == (2, 3)
    assert batch["rejected_ids"].shape == (2, 4) and batch["rejected_mask"].shape == (2, 4)
    assert batch["chosen_ids"].dtype == torch.long and batch["rejected_ids"].dtype == torch.long
    assert batch["chosen_ids"].tolist() == [[1, 2, 3], [4, 5, 0]]
    assert batch["chosen_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["rejected_ids"].tolist() == [[6, 0, 0, 0], [7, 8, 9, 10]]
    assert batch["rejected_mask"].tolist() == [[1, 0, 0, 0], [1, 1, 1, 1]]
    assert reward_model.last_token_index(batch["rejected_mask"]).tolist() == [0, 3]
    other_pad = reward_model.collate_pairs([[1, 2, 3], [4, 5]], [[6], [7, 8, 9, 10]], pad_id=15)
    assert other_pad["chosen_ids"].tolist() == [[1, 2, 3], [4, 5, 15]]


@pytest.mark.contract
def test_collate_pairs_errors():
    with pytest.raises(ValueError):
        reward_model.collate_pairs([[1, 2], [3]], [[4]], pad_id=0)
    with pytest.raises(ValueError):
        reward_model.collate_pairs([[1, 2]], [[]], pad_id=0)


# --- the reward model on the GPT of #31 --------------------------------------------------------------


def test_forward_shape_and_last_token_pooling():
    rm = _tiny_reward_model()
    batch = reward_model.collate_pairs([[1, 2, 3, 4], [5, 6]], [[9], [3, 3, 3]], pad_id=PAD_ID)
    with torch.no_grad():
        hidden = rm.backbone.hidden_states(batch["chosen_ids"], attention_mask=batch["chosen_mask"])
        manual = rm.head(torch.stack([hidden[0, 3], hidden[1, 1]])).squeeze(-1)
    rewards = call_leaves_inputs_unchanged(rm, batch["chosen_ids"], batch["chosen_mask"])
    assert rewards.shape == (2,) and rewards.dtype == torch.float32
    _close(rewards, manual, "RewardModel(...) vs the head at the last real token",
           magnitude=_reward_scale(rm, batch["chosen_ids"], batch["chosen_mask"]))
    assert isinstance(rm.head, torch.nn.Linear) and rm.head.weight.shape == (1, 16)


def test_from_gpt_copies_the_backbone():
    policy = _tiny_gpt()
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    rm = reward_model.RewardModel.from_gpt(policy)
    assert rm.backbone is not policy
    policy_ptrs = {p.data_ptr() for p in policy.parameters()}
    assert not any(p.data_ptr() in policy_ptrs for p in rm.parameters())
    ids = torch.tensor([[1, 2, 3]])
    reward_model.pairwise_loss(rm(ids, torch.ones_like(ids)), rm(ids.flip(1), torch.ones_like(ids))).backward()
    with torch.no_grad():
        for p in rm.parameters():
            p.add_(1.0)
    for key, value in policy.state_dict().items():
        assert torch.equal(value, before[key]), f"from_gpt shares {key} with the policy"


@pytest.mark.edge_case
def test_padding_and_pad_contents_do_not_change_the_reward():
    rm = _tiny_reward_model()
    row = [3, 9, 7, 1, 12]
    ones = torch.ones(1, 5, dtype=torch.long)
    alone = rm(torch.tensor([row]), ones).detach()
    scale = _reward_scale(rm, torch.tensor([row]), ones)  # a padded forward rounds differently at this size
    gen = torch.Generator().manual_seed(11)
    for pad_len in (1, 4):
        for pad in (PAD_ID, 5):
            ids = torch.tensor([row + [pad] * pad_len])
            mask = torch.tensor([[1] * 5 + [0] * pad_len])
            _close(rm(ids, mask), alone, f"reward of the row right-padded by {pad_len} x {pad}", magnitude=scale)
        ids = torch.cat([torch.tensor([row]), torch.randint(0, VOCAB, (1, pad_len), generator=gen)], dim=1)
        _close(rm(ids, mask), alone, f"reward of the row right-padded by {pad_len} random ids", magnitude=scale)
    # inside a batch next to a longer row
    batch = reward_model.collate_pairs([row, [4, 4, 4, 4, 4, 4, 4, 4]], [[1], [2]], pad_id=PAD_ID)
    rewards = rm(batch["chosen_ids"], batch["chosen_mask"])
    _close(rewards[:1], alone, "reward of the row batched next to a longer row", magnitude=scale)


def test_token_identical_pairs_carry_no_signal():
    rm = _tiny_reward_model()
    seqs = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    batch = reward_model.collate_pairs(seqs, [list(s) for s in seqs], pad_id=PAD_ID)
    loss = reward_model.pairwise_loss(rm(batch["chosen_ids"], batch["chosen_mask"]),
                                      rm(batch["rejected_ids"], batch["rejected_mask"]))
    _close(loss, LN2, "pairwise_loss of token-identical pairs")
    loss.backward()
    # each gradient is a difference of two equal sums of terms of size <= 1 (sigmoid(0) / B times the
    # derivatives of a unit-scale network): zero up to float32 rounding at size 1
    for name, p in rm.named_parameters():
        assert p.grad is not None, f"{name} received no gradient"
        _close(p.grad, torch.zeros_like(p.grad), f"gradient of {name} from token-identical pairs", magnitude=1.0)


def test_head_bias_gets_no_gradient_from_pairs():
    rm = _tiny_reward_model()
    batch = reward_model.collate_pairs([[1, 7, 3], [7, 2]], [[4, 5, 6, 8], [2]], pad_id=PAD_ID)
    loss = reward_model.pairwise_loss(rm(batch["chosen_ids"], batch["chosen_mask"]),
                                      rm(batch["rejected_ids"], batch["rejected_mask"]))
    loss.backward()
    assert float(rm.head.weight.grad.abs().max()) > 0
    # the bias enters both sides of every pair: its gradient is -mean(sigmoid(-delta)) + the same, so 0
    _close(rm.head.bias.grad, torch.zeros_like(rm.head.bias.grad), "gradient of head.bias", magnitude=1.0)


@pytest.mark.edge_case
def test_batch_of_one_and_single_token_rows():
    rm = _tiny_reward_model()
    reward = rm(torch.tensor([[5]]), torch.tensor([[1]]))
    assert reward.shape == (1,) and torch.isfinite(reward).all()


@pytest.mark.contract
def test_forward_errors():
    rm = _tiny_reward_model()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError):
        rm(ids, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError):
        rm(ids, torch.tensor([[1, 1, 1], [0, 0, 0]]))


@pytest.mark.contract
def test_train_reward_model_validates_before_training():
    rm = _tiny_reward_model()
    batch = reward_model.collate_pairs([[1, 7]], [[2, 3]], pad_id=PAD_ID)
    before = [p.clone() for p in rm.parameters()]
    with pytest.raises(ValueError):
        reward_model.train_reward_model(rm, [batch], steps=0)
    with pytest.raises(ValueError):
        reward_model.train_reward_model(rm, [batch], lr=-1.0)
    with pytest.raises(ValueError):
        reward_model.train_reward_model(rm, [])
    with pytest.raises(ValueError):
        reward_model.train_reward_model(rm, [batch, {"chosen_ids": batch["chosen_ids"]}], steps=3)
    assert all(torch.equal(a, b) for a, b in zip(before, rm.parameters()))



def test_train_on_one_batch_follows_a_manual_adamw_loop():
    # One batch leaves nothing to the shuffle, so the stated loop fixes the losses: rewards at the last
    # real token, pairwise_loss, AdamW(lr, weight_decay=0), gradients cleared every step. Float64 keeps three
    # steps exact to far below the floor; a forgotten zero_grad or AdamW's default decay moves them by more.
    rm = _tiny_reward_model(seed=3).double()
    manual = copy.deepcopy(rm)
    batch = reward_model.collate_pairs(*_preference_pairs(6, torch.Generator().manual_seed(3)), pad_id=PAD_ID)
    history = reward_model.train_reward_model(rm, [batch], steps=3, lr=0.05, seed=0)

    def rewards(ids, mask):
        hidden = manual.backbone.hidden_states(ids, attention_mask=mask)
        last = mask.sum(dim=1) - 1  # collate_pairs pads on the right
        return manual.head(hidden[torch.arange(ids.shape[0]), last]).squeeze(-1)

    optimizer = torch.optim.AdamW(manual.parameters(), lr=0.05, weight_decay=0.0)
    want = []
    for _ in range(3):
        gap = rewards(batch["chosen_ids"], batch["chosen_mask"]) - rewards(batch["rejected_ids"], batch["rejected_mask"])
        loss = F.softplus(-gap).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        want.append(float(loss.detach()))
    assert_close(torch.tensor(history["losses"][:3], dtype=torch.float64), torch.tensor(want),
                 what="train_reward_model(one batch, steps=3, lr=0.05) vs a manual AdamW(weight_decay=0) loop")

def test_trained_reward_model_prefers_token_7_on_held_out_pairs():
    rm = reward_model.RewardModel.from_gpt(_tiny_gpt(TRAIN_SEED))
    gen = torch.Generator().manual_seed(1000 + TRAIN_SEED)
    batches = [reward_model.collate_pairs(*_preference_pairs(16, gen), pad_id=PAD_ID) for _ in range(8)]
    held_out = reward_model.collate_pairs(*_preference_pairs(256, torch.Generator().manual_seed(5000)), PAD_ID)

    def held_out_accuracy() -> float:
        with torch.no_grad():
            return reward_model.pair_accuracy(rm(held_out["chosen_ids"], held_out["chosen_mask"]),
                                              rm(held_out["rejected_ids"], held_out["rejected_mask"]))

    before = held_out_accuracy()
    history = reward_model.train_reward_model(rm, batches, steps=TRAIN_STEPS, lr=1e-3, seed=TRAIN_SEED)
    assert set(history) >= {"losses", "accuracies"}
    assert len(history["losses"]) == TRAIN_STEPS and len(history["accuracies"]) == TRAIN_STEPS
    assert all(math.isfinite(x) for x in history["losses"])
    assert all(0.0 <= a <= 1.0 for a in history["accuracies"])
    assert sum(history["losses"][-10:]) / 10 < 0.1
    rm.eval()
    after = held_out_accuracy()
    assert before < 0.75
    assert after >= MIN_HELD_OUT_ACCURACY, f"held-out pair accuracy {after:.3f} < {MIN_HELD_OUT_ACCURACY}"
