"""Component tests for #60, the capstone: task, encoder, projector, LM, VLM splice, SFT batch, reward
side, DPO/GRPO pieces and the tool loop (docs/contract.md #60, "Component checks"; numbers from seeds 000/001).

Everything runs on untrained or rigged ``TinyVLM``s at the default widths, so the file needs no training
beyond a few short loops; the trained behaviour is checked in ``test_capstone_pipeline.py``.

Learner mode: a learner may replace any one capstone module, so these tests touch only the names the
spec lists (no colour list, digit list or private helper of the reference): colours and kinds are read
off the generated scenes, digit tokens off ``ITOS``.
"""

from __future__ import annotations

import math

import pytest
import torch

from canon_refs.capstone import (
    multimodal_model,
    optimizer,
    preference_stage,
    projector,
    reward_stage,
    sft_stage,
    synthetic_task,
    tiny_lm,
    tiny_vision_encoder,
    tool_loop,
)
from pytest_mlcanon.testing import TOL, assert_close

pytestmark = pytest.mark.canon("capstone/agent")

task = synthetic_task
N_Q = 8
# #56's advantages of the seed-001 group [1, 0, 0, 1, 0, 0, 1, 0] (exact, eps = 0)
SEED_REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
A_POS, A_NEG = 1.2909944487358056, -0.7745966692414834


def _model(seed: int = 0) -> multimodal_model.TinyVLM:
    torch.manual_seed(seed)
    return multimodal_model.TinyVLM(task.VOCAB_SIZE, max_text_len=task.MAX_TEXT_LEN)


def _colours(examples) -> list[str]:
    return sorted({s.colour for ex in examples for s in ex.scene.shapes})


def _kinds(examples) -> list[str]:
    return sorted({s.kind for ex in examples for s in ex.scene.shapes})


DIGITS = [t for t in task.ITOS if t.isdigit()]


def _rigged(token: str, extra: tuple[str, ...] = (), seed: int = 0) -> multimodal_model.TinyVLM:
    """A VLM whose answer distribution is fixed by the LM head: ``token`` (and ``extra``) at logit 0,
    every other token at -1e4 (zero head weights, so the image and the prompt do not matter)."""
    model = _model(seed)
    with torch.no_grad():
        model.lm.lm_head.weight.zero_()
        model.lm.lm_head.bias.fill_(-1e4)
        for t in (token, *extra):
            model.lm.lm_head.bias[task.STOI[t]] = 0.0
    return model


@pytest.fixture(scope="module")
def examples() -> list[synthetic_task.Example]:
    return task.make_dataset(48, seed=0)


@pytest.fixture(scope="module")
def model() -> multimodal_model.TinyVLM:
    return _model(0)


def _by_family(examples, count: bool) -> list[synthetic_task.Example]:
    return [ex for ex in examples if (ex.tool_query is not None) == count]


# --- the task -------------------------------------------------------------------------------------


def test_vocabulary():
    assert task.VOCAB_SIZE == len(task.ITOS) == len(set(task.ITOS))
    assert task.STOI == {t: i for i, t in enumerate(task.ITOS)}
    assert task.PAD_ID == 0 and 0 <= task.EOS_ID < task.VOCAB_SIZE and task.EOS_ID != task.PAD_ID
    assert task.IMAGE_SIZE == 16 and task.CELL == 4
    assert DIGITS == [str(i) for i in range(10)]  # counts 0..9 are single tokens


def test_make_dataset_is_deterministic_per_seed():
    a, b, c = task.make_dataset(20, seed=3), task.make_dataset(20, seed=3), task.make_dataset(20, seed=4)
    assert a == b  # questions, answers, scenes, tool queries
    assert all(torch.equal(x.image, y.image) for x, y in zip(a, b))
    assert a != c


def test_images_answers_and_scenes(examples):
    for ex in examples:
        assert ex.image.shape == (3, 16, 16) and ex.image.dtype == torch.float32
        assert float(ex.image.min()) >= 0.0 and float(ex.image.max()) <= 1.0
        assert ex.answer in task.ITOS
        assert 1 <= len(ex.scene.shapes) <= 9
        assert len({(s.row, s.col) for s in ex.scene.shapes}) == len(ex.scene.shapes)
        assert torch.equal(ex.image, task.render(ex.scene))
    assert {ex.tool_query is None for ex in examples} == {True, False}


def test_render_draws_each_shape_inside_its_cell(examples):
    assert torch.equal(task.render(task.Scene(())), torch.zeros(3, 16, 16))
    colours, kinds = _colours(examples), _kinds(examples)
    assert len(colours) >= 2 and len(kinds) == 2
    images = {}
    for colour in colours[:2]:
        for kind in kinds:
            for size in (1, 3):
                image = task.render(task.Scene((task.Shape(2, 1, colour, kind, size),)))
                assert image.shape == (3, 16, 16) and float(image.max()) > 0.0
                outside = image.clone()
                outside[:, 8:12, 4:8] = 0.0
                assert float(outside.abs().sum()) == 0.0, "a shape may only light pixels of its own cell"
                images[(colour, kind, size)] = image
    keys = list(images)
    assert all(not torch.equal(images[a], images[b]) for i, a in enumerate(keys) for b in keys[i + 1:]), \
        "colour, kind and size must each change the rendering"


def test_count_shapes_agrees_with_the_scene(examples):
    for ex in examples:
        for colour in (None, *_colours(examples)):
            for kind in (None, *_kinds(examples)):
                direct = sum(1 for s in ex.scene.shapes
                             if (colour is None or s.colour == colour) and (kind is None or s.kind == kind))
                assert task.count_shapes(ex.scene, colour, kind) == direct
    assert task.count_shapes(examples[0].scene) == len(examples[0].scene.shapes)


def test_answers_come_from_the_scene_graph(examples):
    for ex in examples:
        if ex.tool_query is None:
            assert ex.question == "what colour is the largest shape"
            largest = [s for s in ex.scene.shapes if s.size == max(t.size for t in ex.scene.shapes)]
            assert len(largest) == 1 and ex.answer == largest[0].colour
        else:
            assert ex.question.startswith("how many")
            assert tool_loop.count_shapes_tool(ex.scene, *ex.tool_query) == ex.answer


def test_text_round_trip(examples):
    for ex in examples[:6]:
        text = f"{ex.question} observation : {ex.answer} :"
        ids = task.encode_text(text)
        assert ids == [task.STOI[w] for w in text.split()]
        assert task.decode_text(ids) == text


@pytest.mark.edge_case
def test_task_errors():
    with pytest.raises(ValueError):
        task.make_dataset(0, seed=0)
    with pytest.raises(ValueError):
        task.encode_text("how many purple squares")
    with pytest.raises(ValueError):
        task.decode_text([task.VOCAB_SIZE])
    with pytest.raises(ValueError):
        task.count_shapes(task.Scene(()), colour="purple")
    with pytest.raises(ValueError):
        task.count_shapes(task.Scene(()), kind="triangle")


# --- vision encoder, projector, LM ----------------------------------------------------------------


def test_encoder_and_projector_shapes(examples):
    torch.manual_seed(0)
    encoder = tiny_vision_encoder.TinyVisionEncoder(16, 4, 3, 32, 2, 2)
    proj = projector.Projector(32, 48, 16, 8)
    images = torch.stack([ex.image for ex in examples[:5]])
    tokens = encoder(images)
    assert encoder.n_tokens == 16 and tokens.shape == (5, 16, 32)
    out = proj(tokens)
    assert out.shape == (5, 8, 48) and bool(torch.isfinite(out).all())
    # a batch of one gives the same rows (no cross-talk between images)
    torch.testing.assert_close(proj(encoder(images[2:3]))[0], out[2], **TOL.COMPOSITE.kw())


@pytest.mark.edge_case
def test_component_shape_errors():
    torch.manual_seed(0)
    with pytest.raises(ValueError):
        tiny_vision_encoder.TinyVisionEncoder(16, 5, 3, 32, 2, 2)
    with pytest.raises(ValueError):
        tiny_lm.TinyCausalLM(28, 48, 5, 2, 20)
    proj = projector.Projector(32, 48, 16, 8)
    with pytest.raises(ValueError):
        proj(torch.zeros(2, 15, 32))
    with pytest.raises(ValueError):
        tiny_vision_encoder.TinyVisionEncoder(16, 4, 3, 32, 2, 2)(torch.zeros(2, 3, 8, 8))


def test_causal_padding_bias_pattern_and_value():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    bias = tiny_lm.causal_padding_bias(mask)
    assert bias.shape == (2, 1, 4, 4) and bias.dtype == torch.float32
    assert bool(torch.isfinite(bias).all()), "the mask value must be finite, never -inf"
    assert set(bias.unique().tolist()) == {0.0, -1e9}
    allowed = torch.zeros(2, 4, 4, dtype=torch.bool)
    for b, length in enumerate((3, 2)):
        for i in range(length):
            allowed[b, i, :i + 1] = True  # causal, real query, real key
    torch.testing.assert_close(bias[:, 0], torch.where(allowed, 0.0, -1e9), atol=0.0, rtol=0.0)
    assert tiny_lm.causal_padding_bias(mask.bool(), torch.float64).dtype == torch.float64


@pytest.mark.numerics_probe
def test_right_padded_batch_gives_finite_logits_loss_and_gradients(examples):
    model = _model(1)
    chunk = examples[:8]
    observations = ["1" if ex.tool_query is not None and i % 2 else None for i, ex in enumerate(chunk)]
    batch = sft_stage.encode_batch(chunk, observations=observations)
    assert bool((batch.attention_mask == 0).any()), "the batch must contain right padding"
    logits = model(batch.images, batch.input_ids, batch.attention_mask)
    assert bool(torch.isfinite(logits).all()), "padding rows produced non-finite logits (an -inf mask?)"
    text = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)
    token_logp = torch.log_softmax(text, dim=-1).gather(-1, batch.input_ids[:, :, None])[:, :, 0]
    loss = -token_logp[batch.loss_mask == 1].mean()
    loss.backward()
    assert math.isfinite(float(loss.detach()))
    for name, p in model.named_parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all()), f"non-finite gradient in {name}"


@pytest.mark.numerics_probe
def test_fully_padded_row_is_finite_in_the_lm():
    torch.manual_seed(0)
    lm = tiny_lm.TinyCausalLM(28, 48, 4, 2, 20)
    embeds = torch.randn(2, 6, 48)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    positions = torch.arange(6).expand(2, 6)
    hidden = lm.encode(embeds, mask, positions)
    assert bool(torch.isfinite(hidden).all())


def test_real_tokens_do_not_see_the_padding_after_them(model, examples):
    alone = sft_stage.encode_batch([examples[0]])
    ids = torch.cat([alone.input_ids, torch.full((1, 3), task.STOI["1"])], dim=1)  # junk behind a 0 mask
    mask = torch.cat([alone.attention_mask, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        h_alone = model.hidden_states(alone.images, alone.input_ids, alone.attention_mask)
        h_padded = model.hidden_states(alone.images, ids, mask)
    S = h_alone.shape[1]
    torch.testing.assert_close(h_padded[:, :S], h_alone, **TOL.COMPOSITE.kw())


def test_sample_next_token():
    logits = torch.tensor([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 2.9]])
    assert tiny_lm.sample_next_token(logits, greedy=True).tolist() == [1, 0]
    assert tiny_lm.sample_next_token(logits, False, 1.0, 1).tolist() == [1, 0]  # top_k = 1 is greedy
    draws = [tiny_lm.sample_next_token(logits, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1]) and draws[0].dtype == torch.long
    many = tiny_lm.sample_next_token(logits[:1].expand(4000, 4), False, 1.0, 2, torch.Generator().manual_seed(0))
    assert set(many.tolist()) == {1, 3}  # top_k = 2 keeps tokens 1 and 3 only
    share = float((many == 1).float().mean())
    expected = 1.0 / (1.0 + math.exp(0.5 - 2.0))
    assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / 4000)
    with pytest.raises(ValueError):
        tiny_lm.sample_next_token(logits, temperature=0.0)
    with pytest.raises(ValueError):
        tiny_lm.sample_next_token(logits, top_k=0)


# --- the VLM splice ---------------------------------------------------------------------------------


def test_build_inputs_shapes_mask_and_positions(model, examples):
    batch = sft_stage.encode_batch(examples[:4])
    B, T = batch.input_ids.shape
    embeds, mask, positions = model.build_inputs(batch.images, batch.input_ids, batch.attention_mask)
    S = N_Q + T
    assert model.n_query_tokens == N_Q
    assert embeds.shape == (B, S, 48) and mask.shape == (B, S) and positions.shape == (B, S)
    assert bool((mask[:, :N_Q] == 1).all())
    assert torch.equal(mask[:, N_Q:], batch.attention_mask)
    assert torch.equal(positions, torch.arange(S).expand(B, S))
    torch.testing.assert_close(embeds[:, :N_Q], model.visual_embeds(batch.images), atol=0.0, rtol=0.0)
    torch.testing.assert_close(embeds[:, N_Q:], model.lm.embed_tokens(batch.input_ids), atol=0.0, rtol=0.0)
    _, default_mask, _ = model.build_inputs(batch.images, batch.input_ids)
    assert bool((default_mask == 1).all())


def test_text_logits_undo_the_visual_offset_and_the_shift(model, examples):
    batch = sft_stage.encode_batch(examples[:6])
    T = batch.input_ids.shape[1]
    with torch.no_grad():
        full = model(batch.images, batch.input_ids, batch.attention_mask)
        text = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)
    assert full.shape == (6, N_Q + T, task.VOCAB_SIZE)
    start = N_Q - 1
    if text.shape == (6, T, task.VOCAB_SIZE) and torch.allclose(text, full[:, start:start + T], atol=1e-6, rtol=0):
        return
    found = [k for k in range(-start, full.shape[1] - start - T + 1)
             if text.shape == full[:, start + k:start + k + T].shape
             and torch.allclose(text, full[:, start + k:start + k + T], atol=1e-6, rtol=0)]
    where = (f"it equals logits[:, {start + found[0]} : {start + found[0] + T}], offset {found[0]:+d}"
             if found else f"it has shape {tuple(text.shape)} and matches no slice of the logits")
    pytest.fail(f"text_logits must be logits[:, N_q - 1 : N_q - 1 + T] = logits[:, {start} : {start + T}] "
                f"(entry t scores text token t); {where}")


def test_generate_shapes_greedy_and_sticky_eos(examples):
    model = _model(2)
    prompt = torch.tensor([task.encode_text(examples[0].question + " :")] * 64)
    images = torch.stack([examples[i % len(examples)].image for i in range(64)])
    with torch.no_grad():
        model.lm.lm_head.bias[task.EOS_ID] += 2.5
        greedy = model.generate(images, prompt, max_new_tokens=2)
        first = model(images, prompt)[:, -1].argmax(dim=-1)
    assert greedy.shape == (64, 2) and greedy.dtype == torch.long
    assert torch.equal(greedy[:, 0], first)
    n_new = task.MAX_TEXT_LEN - prompt.shape[1]
    assert n_new >= 4
    new = model.generate(images, prompt, max_new_tokens=n_new, greedy=False, temperature=1.5, eos_id=task.EOS_ID,
                         generator=torch.Generator().manual_seed(0))
    assert new.shape == (64, n_new)
    is_eos = new == task.EOS_ID
    stopped_early = 0
    for row in is_eos:
        if bool(row.any()):
            first_eos = int(row.int().argmax())
            assert bool(row[first_eos:].all()), "a finished row must keep emitting eos_id"
            stopped_early += first_eos < n_new - 1
    assert stopped_early > 0 and not bool(is_eos.all()), "the probe must see rows finish mid-way"


@pytest.mark.edge_case
def test_vlm_input_errors(model, examples):
    images = torch.stack([ex.image for ex in examples[:2]])
    with pytest.raises(ValueError):
        model.build_inputs(images, torch.zeros(2, task.MAX_TEXT_LEN + 1, dtype=torch.long))
    with pytest.raises(ValueError):
        model.build_inputs(images, torch.zeros(2, 3))
    with pytest.raises(ValueError):
        model.build_inputs(images, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4))
    with pytest.raises(ValueError):
        model.generate(images, torch.zeros(2, 3, dtype=torch.long), max_new_tokens=0)
    assert multimodal_model.count_parameters(model) == sum(p.numel() for p in model.parameters())


# --- SFT batch and loop -----------------------------------------------------------------------------


def test_encode_batch_masks(examples):
    chunk = examples[:6]
    observations = [ex.answer if ex.tool_query is not None else None for ex in chunk]
    for include_eos in (True, False):
        for obs in (None, observations):
            batch = sft_stage.encode_batch(chunk, include_eos=include_eos, observations=obs)
            assert batch.input_ids.dtype == torch.long and batch.loss_mask.dtype == torch.float32
            assert batch.images.shape == (6, 3, 16, 16)
            for b, ex in enumerate(chunk):
                text = ex.question if obs is None or obs[b] is None else f"{ex.question} observation : {obs[b]}"
                row = task.encode_text(text + " :") + [task.STOI[ex.answer]] + ([task.EOS_ID] if include_eos else [])
                n = len(row)
                assert batch.input_ids[b, :n].tolist() == row
                assert bool((batch.input_ids[b, n:] == task.PAD_ID).all())
                assert batch.attention_mask[b].tolist() == [1] * n + [0] * (batch.input_ids.shape[1] - n)
                supervised = (batch.loss_mask[b] == 1).nonzero()[:, 0].tolist()
                answer_at = n - 2 if include_eos else n - 1
                assert supervised == list(range(answer_at, n)), "loss_mask must cover the answer (and EOS) only"
                assert float(batch.loss_mask[b].sum()) == len(supervised)


def test_encode_batch_custom_answers_and_errors(examples):
    chunk = examples[:3]
    colour = _colours(examples)[0]
    eos = task.ITOS[task.EOS_ID]
    batch = sft_stage.encode_batch(chunk, answers=[colour, "7", eos], include_eos=False)
    answer_ids = batch.input_ids[batch.loss_mask == 1].tolist()
    assert answer_ids == [task.STOI[colour], task.STOI["7"], task.EOS_ID]
    with pytest.raises(ValueError):
        sft_stage.encode_batch(chunk, answers=[colour])
    with pytest.raises(ValueError):
        sft_stage.encode_batch(chunk, answers=[colour, "7 7", "1"])
    with pytest.raises(ValueError):
        sft_stage.encode_batch(chunk, observations=["1"])
    with pytest.raises(ValueError):
        sft_stage.encode_batch([])


def test_next_token_logits_is_the_answer_slot(model, examples):
    chunk = examples[:8]
    batch = sft_stage.encode_batch(chunk)
    with torch.no_grad():
        slot = sft_stage.next_token_logits(model, chunk)
        text = model.text_logits(batch.images, batch.input_ids, batch.attention_mask)
    answer_at = batch.loss_mask.argmax(dim=1)
    assert slot.shape == (8, task.VOCAB_SIZE)
    torch.testing.assert_close(slot, text[torch.arange(8), answer_at], **TOL.COMPOSITE.kw())


def test_short_sft_lowers_the_loss(examples):
    model = _model(3)
    report = sft_stage.run_sft(model, examples, steps=25, batch_size=16, lr=3e-3, tool_fraction=0.5, seed=0)
    losses = report["losses"]
    assert len(losses) == 25 and all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    assert report["supervised_tokens"] == 25 * 16 * 2  # answer and EOS of every row


def test_accuracy_is_greedy_exact_match_and_restores_mode(model, examples):
    model.train()
    acc = sft_stage.accuracy(model, examples)
    assert model.training
    with torch.no_grad():
        predicted = sft_stage.next_token_logits(model, examples).argmax(dim=-1)
    manual = sum(task.ITOS[int(p)] == ex.answer for p, ex in zip(predicted, examples)) / len(examples)
    assert acc == manual
    colour = _colours(examples)[0]
    rigged = _rigged(colour).eval()
    colour_questions = _by_family(examples, count=False)
    assert sft_stage.accuracy(rigged, colour_questions) == sum(ex.answer == colour for ex in colour_questions) / len(
        colour_questions)
    assert not rigged.training


@pytest.mark.edge_case
def test_sft_errors(examples):
    model = _model(0)
    with pytest.raises(ValueError):
        sft_stage.run_sft(model, examples, steps=0, batch_size=4, lr=1e-3, tool_fraction=0.3, seed=0)
    with pytest.raises(ValueError):
        sft_stage.run_sft(model, examples, steps=1, batch_size=4, lr=-1.0, tool_fraction=0.3, seed=0)
    with pytest.raises(ValueError):
        sft_stage.run_sft(model, examples, steps=1, batch_size=4, lr=1e-3, tool_fraction=1.5, seed=0)
    with pytest.raises(ValueError):
        sft_stage.accuracy(model, [])


# --- the optimizer every training stage shares -----------------------------------------------------


def _small_net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def test_clipped_adam_first_step_moves_each_weight_by_lr_against_its_gradient():
    # Adam's first step is m_hat / sqrt(v_hat) = g / |g|: every coordinate moves by lr (minus eps's share)
    net = _small_net(0)
    before = [p.detach().clone() for p in net.parameters()]
    opt = optimizer.ClippedAdam(net.parameters(), lr=0.01, max_grad_norm=1e6)
    net(torch.randn(16, 5)).pow(2).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    opt.step()
    for old, new, g in zip(before, net.parameters(), grads):
        expected = old - 0.01 * g / (g.abs() + 1e-8)
        torch.testing.assert_close(new.detach(), expected, rtol=0, atol=1e-6)  # a wrong step is off by ~lr


def test_clipped_adam_equals_clip_grad_norm_then_torch_adamw():
    # batches alternately far above and far below the clip norm, and a changing learning rate
    ours, theirs = _small_net(1), _small_net(1)
    opt = optimizer.ClippedAdam(ours.parameters(), lr=0.01, max_grad_norm=1.0)
    ref = torch.optim.AdamW(theirs.parameters(), lr=0.01, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    for step in range(10):
        x = torch.randn(16, 5, generator=gen)
        scale = 50.0 if step % 2 == 0 else 1e-3
        lr = 0.01 * (1.0 - step / 20)
        opt.lr = lr
        for group in ref.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        (scale * ours(x).pow(2).sum()).backward()
        norm = opt.step()
        ref.zero_grad()
        (scale * theirs(x).pow(2).sum()).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        ref.step()
        assert norm == pytest.approx(float(ref_norm), rel=1e-5)
        for a, b in zip(ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=1e-6)


def test_clipped_adam_leaves_a_parameter_without_gradient_and_zero_grad_clears():
    # behaviour only: the parameters that get gradients move as clip_grad_norm_ + AdamW moves them, a
    # parameter that never gets a gradient (and a frozen one) stays put and adds nothing to the norm
    net, twin = _small_net(2), _small_net(2)
    unused = torch.nn.Parameter(torch.ones(4))
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    opt = optimizer.ClippedAdam([*net.parameters(), unused, frozen], lr=0.1)
    ref = torch.optim.AdamW(twin.parameters(), lr=0.1, weight_decay=0.0)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        x = 10.0 * torch.randn(4, 5, generator=gen)  # above the clip norm 1.0: the norm matters
        opt.zero_grad()
        net(x).sum().backward()
        opt.step()
        ref.zero_grad()
        twin(x).sum().backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
        ref.step()
    assert torch.equal(unused.detach(), torch.ones(4)) and unused.grad is None
    assert torch.equal(frozen, torch.ones(2))
    for a, b in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=1e-6)
    opt.zero_grad()
    assert all(p.grad is None for p in net.parameters())


@pytest.mark.edge_case
def test_clipped_adam_errors():
    net = _small_net(0)
    with pytest.raises(ValueError):
        optimizer.ClippedAdam([], lr=0.1)
    bad = ({"lr": 0.0}, {"lr": float("nan")}, {"lr": 0.1, "max_grad_norm": -1.0}, {"lr": 0.1, "eps": 0.0},
           {"lr": 0.1, "betas": (0.9, 1.0)})
    for kwargs in bad:
        with pytest.raises(ValueError):
            optimizer.ClippedAdam(net.parameters(), **kwargs)
    opt = optimizer.ClippedAdam(net.parameters(), lr=0.1)
    with pytest.raises(ValueError):
        opt.lr = -1.0
    assert opt.lr == 0.1


# --- verifier, preference pairs, reward model -------------------------------------------------------


def test_verifier(examples):
    ex = examples[0]
    wrong = "0" if ex.answer != "0" else "1"
    assert reward_stage.verifier_reward(ex.answer, ex) == 1.0 and reward_stage.verifier_reward(wrong, ex) == 0.0
    rewards = reward_stage.verifier_rewards([ex.answer, wrong], [ex, ex])
    assert rewards.dtype == torch.float32 and rewards.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError):
        reward_stage.verifier_rewards([ex.answer], [ex, ex])


def test_random_preference_pairs(examples):
    pairs = reward_stage.make_preference_pairs(examples, seed=0)
    assert len(pairs) == len(examples)
    for pair, ex in zip(pairs, examples):
        assert pair.example is ex and pair.chosen == ex.answer and pair.rejected != ex.answer
        assert pair.rejected in task.STOI
    again = reward_stage.make_preference_pairs(examples, seed=0)
    assert [p.rejected for p in again] == [p.rejected for p in pairs]
    # a random wrong *token*, drawn from the whole vocabulary: 48 draws from the 27 wrong tokens all
    # landing among the 12 possible answers (digits, colours) has probability below 1e-14
    answers = set(DIGITS) | set(_colours(examples))
    assert {p.rejected for p in pairs} - answers, "the rejected tokens never left the answer vocabulary"


def test_on_policy_pairs_use_the_policys_wrong_samples(examples):
    colour = next(ex.answer for ex in examples if ex.tool_query is None)
    policy = _rigged(colour)
    before = [p.detach().clone() for p in policy.parameters()]
    pairs = reward_stage.make_preference_pairs(examples, seed=0, policy=policy)
    assert policy.training  # the sampling restored the mode
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    for pair, ex in zip(pairs, examples):
        assert pair.chosen == ex.answer
        if ex.answer != colour:
            assert pair.rejected == colour, "a wrong policy sample must become the rejected answer"
        else:
            assert pair.rejected in task.STOI and pair.rejected != colour  # the random-token fallback
    assert any(ex.answer != colour for ex in examples)


def test_reward_model_reads_the_answer_position(examples):
    policy = _model(4)
    rm = reward_stage.TinyRewardModel.from_policy(policy)
    assert not {p.data_ptr() for p in rm.parameters()} & {p.data_ptr() for p in policy.parameters()}
    assert all(p.requires_grad for p in rm.parameters())
    chunk = examples[:5]
    with torch.no_grad():
        with_eos = rm(sft_stage.encode_batch(chunk))
        without_eos = rm(sft_stage.encode_batch(chunk, include_eos=False))
        other = rm(sft_stage.encode_batch(chunk, answers=["9"] * 5))
    assert with_eos.shape == (5,)
    torch.testing.assert_close(with_eos, without_eos, **TOL.COMPOSITE.kw())  # later tokens are not read
    assert not torch.allclose(with_eos, other)  # the answer token is
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
        torch.testing.assert_close(rm(sft_stage.encode_batch(chunk)), with_eos, atol=0.0, rtol=0.0)


def test_bradley_terry_reward_training(examples, monkeypatch):
    rm = reward_stage.TinyRewardModel.from_policy(_model(5))
    pairs = reward_stage.make_preference_pairs(examples[:24], seed=1)
    report = reward_stage.train_reward_model(rm, pairs, steps=30, batch_size=12, lr=2e-3, seed=0)
    losses = report["losses"]
    assert len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5])
    assert abs(losses[0] - math.log(2.0)) < 0.35  # -log sigmoid(r_c - r_r) starts near log 2
    assert reward_stage.reward_pair_accuracy(rm, pairs) > 0.5
    monkeypatch.setattr(rm, "forward", lambda batch: torch.zeros(batch.input_ids.shape[0]))
    assert reward_stage.reward_pair_accuracy(rm, pairs) == 0.0  # ties are not wins


@pytest.mark.edge_case
def test_reward_errors(examples):
    with pytest.raises(ValueError):
        reward_stage.make_preference_pairs([], seed=0)
    rm = reward_stage.TinyRewardModel.from_policy(_model(0))
    with pytest.raises(ValueError):
        reward_stage.train_reward_model(rm, [], steps=1, batch_size=1, lr=1e-3, seed=0)
    pairs = reward_stage.make_preference_pairs(examples[:4], seed=0)
    with pytest.raises(ValueError):
        reward_stage.train_reward_model(rm, pairs, steps=0, batch_size=1, lr=1e-3, seed=0)
    batch = sft_stage.encode_batch(examples[:2])
    batch.loss_mask[1] = 0.0
    with pytest.raises(ValueError):
        rm(batch)


# --- DPO ------------------------------------------------------------------------------------------


def test_dpo_loss_closed_form():
    # Python floats: the stub fixes no dtype, so a float32 computation is as right as a float64 one
    loss, margin = preference_stage.dpo_loss(-12.0, -11.5, -13.0, -10.8, 0.1)
    assert_close(float(loss), 0.6117553388706229, dtype=torch.float32, what="loss")
    assert_close(float(margin), 1.7, dtype=torch.float32, what="margin")  # unscaled; #55's beta-scaled one is 0.17
    assert_close(float(loss), math.log1p(math.exp(-0.1 * float(margin))), dtype=torch.float32, what="loss")
    batch = [torch.tensor([-12.0, -3.0]), torch.tensor([-11.5, -4.0]), torch.tensor([-13.0, -3.0]),
             torch.tensor([-10.8, -4.0])]
    loss2, margin2 = preference_stage.dpo_loss(*batch, beta=0.1)
    torch.testing.assert_close(margin2, torch.tensor([1.7, 0.0]))
    assert abs(float(loss2) - (0.6117553388706229 + math.log(2.0)) / 2) < 1e-6


@pytest.mark.numerics_probe
def test_dpo_loss_extreme_margins_are_finite():
    loss, margin = preference_stage.dpo_loss(torch.tensor([0.0, -1e4]), torch.tensor([-1e4, 0.0]),
                                             torch.zeros(2), torch.zeros(2), beta=1.0)
    assert bool(torch.isfinite(loss)) and margin.tolist() == [1e4, -1e4]
    assert abs(float(loss) - 1e4 / 2) < 1e-3


@pytest.mark.edge_case
def test_dpo_errors():
    with pytest.raises(ValueError):
        preference_stage.dpo_loss(-1.0, -1.0, -1.0, -1.0, beta=0.0)
    with pytest.raises(ValueError):
        preference_stage.dpo_loss(torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError):
        preference_stage.sample_group(_model(0), task.make_dataset(2, seed=0), group_size=0)


def test_freeze_reference_is_frozen_and_independent():
    policy = _model(6)
    reference = preference_stage.freeze_reference(policy)
    assert not reference.training and all(not p.requires_grad for p in reference.parameters())
    assert all(p.requires_grad for p in policy.parameters())
    snapshot = [p.clone() for p in reference.parameters()]
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    assert all(torch.equal(a, b) for a, b in zip(snapshot, reference.parameters()))


def test_sequence_logprob_and_mean_margin(model, examples):
    batch = sft_stage.encode_batch(examples[:4])
    with torch.no_grad():
        logp = preference_stage.sequence_logprob(model, batch)
        text = torch.log_softmax(model.text_logits(batch.images, batch.input_ids, batch.attention_mask), dim=-1)
    manual = [sum(float(text[b, t, batch.input_ids[b, t]]) for t in range(batch.input_ids.shape[1])
                  if batch.loss_mask[b, t] == 1) for b in range(4)]
    torch.testing.assert_close(logp, torch.tensor(manual), **TOL.COMPOSITE.kw())
    pairs = reward_stage.make_preference_pairs(examples[:6], seed=0)
    assert abs(preference_stage.mean_dpo_margin(model, preference_stage.freeze_reference(model), pairs)) < 1e-6


def test_run_dpo_raises_the_margin_and_keeps_the_reference(examples):
    policy = _model(7)
    reference = preference_stage.freeze_reference(policy)
    snapshot = [p.clone() for p in reference.parameters()]
    pairs = reward_stage.make_preference_pairs(examples, seed=0)
    report = preference_stage.run_dpo(policy, reference, pairs, steps=12, batch_size=12, lr=1e-3, beta=0.1, seed=0)
    assert {"losses", "margins", "margin_before", "margin_after", "loss_first", "loss_last"} <= set(report)
    assert abs(report["margin_before"]) < 1e-6
    assert report["margin_after"] > report["margin_before"] + 0.5
    assert len(report["losses"]) == 12
    assert all(torch.equal(a, b) for a, b in zip(snapshot, reference.parameters()))


# --- GRPO -----------------------------------------------------------------------------------------


def test_group_advantages_match_56_and_sum_to_zero():
    rewards = torch.tensor([SEED_REWARDS, [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    adv = preference_stage.group_advantages(rewards)
    assert adv.shape == (2, 8)
    torch.testing.assert_close(adv.sum(dim=1), torch.zeros(2, dtype=torch.float64), atol=1e-12, rtol=0.0)
    exact = torch.tensor([A_POS if r else A_NEG for r in SEED_REWARDS], dtype=torch.float64)
    assert float((adv[0] - exact).abs().max()) < 1e-5
    assert float((adv[0] - exact).abs().max()) > 0.0  # eps = 1e-6 sits in the denominator
    centred = preference_stage.group_advantages(rewards, normalize_std=False)
    torch.testing.assert_close(centred, rewards - rewards.mean(dim=1, keepdim=True), atol=1e-12, rtol=0.0)


@pytest.mark.edge_case
def test_degenerate_groups_have_zero_advantage_and_are_not_informative():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    adv = preference_stage.group_advantages(rewards)
    assert bool(torch.isfinite(adv).all())
    assert torch.equal(adv[:2], torch.zeros(2, 4))
    assert preference_stage.informative_groups(rewards).tolist() == [False, False, True, True]
    assert preference_stage.informative_groups(torch.zeros(3, 1)).tolist() == [False] * 3  # a group of one
    with pytest.raises(ValueError):
        preference_stage.informative_groups(torch.zeros(4))


def test_k3_kl_and_grpo_loss_at_ratio_one():
    torch.manual_seed(0)
    logp, logp_ref = -torch.rand(64, dtype=torch.float64) * 5, -torch.rand(64, dtype=torch.float64) * 5
    kl = preference_stage.k3_kl(logp, logp_ref)
    assert bool((kl >= 0).all())
    torch.testing.assert_close(kl, torch.exp(logp_ref - logp) - (logp_ref - logp) - 1, atol=1e-12, rtol=0.0)
    assert torch.equal(preference_stage.k3_kl(logp, logp), torch.zeros(64, dtype=torch.float64))
    adv = torch.randn(64, dtype=torch.float64)
    loss = preference_stage.grpo_loss(logp, logp, adv, logp_ref, clip_eps=0.2, kl_coef=0.02)
    assert abs(float(loss) - float(-adv.mean() + 0.02 * kl.mean())) < 1e-12
    # the clip: ratio 2 with A > 0 counts as 1.2, ratio 0.5 with A < 0 counts as 0.8
    clipped = preference_stage.grpo_loss(torch.log(torch.tensor([2.0, 0.5], dtype=torch.float64)),
                                         torch.zeros(2, dtype=torch.float64),
                                         torch.tensor([1.0, -1.0], dtype=torch.float64),
                                         torch.log(torch.tensor([2.0, 0.5], dtype=torch.float64)), 0.2, 0.02)
    assert abs(float(clipped) - (-(1.2 * 1.0 + 0.8 * -1.0) / 2)) < 1e-12


@pytest.mark.numerics_probe
def test_k3_kl_is_non_negative_near_zero_in_float32():
    logp = torch.full((1000,), -3.0)
    logp_ref = logp + torch.linspace(-1e-4, 1e-4, 1000)
    assert bool((preference_stage.k3_kl(logp, logp_ref) >= 0).all())


def test_sample_group_is_prompt_major(examples):
    model = _model(8)
    prompts = examples[:5]
    repeated, answers, rewards = preference_stage.sample_group(model, prompts, 4, 1.0,
                                                               torch.Generator().manual_seed(0))
    assert len(repeated) == len(answers) == 20 and rewards.shape == (5, 4) and rewards.dtype == torch.float32
    assert all(repeated[p * 4 + g] is prompts[p] for p in range(5) for g in range(4))
    expected = [[reward_stage.verifier_reward(answers[p * 4 + g], prompts[p]) for g in range(4)] for p in range(5)]
    assert rewards.tolist() == expected
    again = preference_stage.sample_group(model, prompts, 4, 1.0, torch.Generator().manual_seed(0))
    assert again[1] == answers


def test_grpo_certain_policy_has_no_informative_group_and_makes_no_update(examples):
    policy = _rigged(_colours(examples)[0])
    before = [p.detach().clone() for p in policy.parameters()]
    report = preference_stage.run_grpo(policy, preference_stage.freeze_reference(policy), examples, steps=3,
                                       prompts_per_step=4, group_size=4, oversample=2, seed=0)
    assert report["informative_group_rate"] == 0.0
    assert report["groups_used"] == 0, "degenerate groups carry no gradient and must be dropped"
    assert report["losses"] == []
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_grpo_informative_group_accounting(examples):
    coin = [ex for ex in examples if ex.answer in ("0", "1")]
    hopeless = [ex for ex in examples if ex.answer not in ("0", "1")]
    assert len(coin) >= 4 and len(hopeless) >= 4
    policy = _rigged("0", extra=("1",))  # answers 0 or 1 with probability 1/2 each
    report = preference_stage.run_grpo(policy, preference_stage.freeze_reference(policy), coin, steps=3,
                                       prompts_per_step=4, group_size=8, oversample=3, lr=1e-5, seed=0)
    # a group of 8 fair coins is constant with probability 2/256: nearly every group informative
    assert report["informative_group_rate"] >= 0.9
    assert report["groups_used"] == 3 * 4
    assert len(report["losses"]) == 3 * 2 and len(report["mean_rewards"]) == 3
    mixed = coin[:4] + hopeless[:12]
    report = preference_stage.run_grpo(_rigged("0", extra=("1",)), preference_stage.freeze_reference(policy), mixed,
                                       steps=4, prompts_per_step=2, group_size=8, oversample=4, lr=1e-5, seed=1)
    assert 0.0 < report["informative_group_rate"] <= 0.5
    assert 1 <= report["groups_used"] <= 4 * 2
    assert report["groups_used"] <= round(report["informative_group_rate"] * 4 * 2 * 4)


@pytest.mark.edge_case
def test_grpo_errors(examples):
    policy = _model(0)
    reference = preference_stage.freeze_reference(policy)
    with pytest.raises(ValueError):
        preference_stage.run_grpo(policy, reference, examples, steps=0)
    with pytest.raises(ValueError):
        preference_stage.run_grpo(policy, reference, examples, temperature=0.0)
    with pytest.raises(ValueError):
        preference_stage.run_grpo(policy, reference, [])


# --- the tool loop ----------------------------------------------------------------------------------


def _step(index: int, action: str) -> tool_loop.ToolStep:
    return tool_loop.ToolStep(index, "ctx", "thought", action, "x", "")


@pytest.mark.parametrize(
    ("steps", "ok"),
    [
        ([], False),
        ([_step(0, "answer")], True),
        ([_step(0, "call_tool"), _step(1, "answer")], True),
        ([_step(1, "answer")], False),
        ([_step(0, "call_tool"), _step(2, "answer")], False),
        ([_step(0, "search"), _step(1, "answer")], False),
        ([_step(0, "answer"), _step(1, "answer")], False),
        ([_step(0, "answer"), _step(1, "call_tool")], False),
        ([_step(0, "call_tool")], False),
    ],
    ids=["empty", "one_answer", "tool_then_answer", "bad_start", "gap", "unknown_action", "two_answers",
         "answer_not_last", "no_answer"],
)
def test_trajectory_is_well_formed(steps, ok):
    assert tool_loop.Trajectory("q", "a", steps=list(steps)).is_well_formed() is ok


def _counting_forward(model, monkeypatch) -> list[int]:
    calls: list[int] = []
    original = model.forward

    def forward(*args, **kwargs):
        calls.append(args[1].shape[0] if len(args) > 1 else 0)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", forward)
    return calls


def test_threshold_zero_never_calls_the_tool(model, examples, monkeypatch):
    calls = _counting_forward(model, monkeypatch)
    trajectories = tool_loop.run_episodes(model, examples, confidence_threshold=0.0)
    assert len(calls) == 1
    assert all(not t.used_tool and len(t.steps) == 1 and t.steps[0].action == "answer" for t in trajectories)
    report = tool_loop.trajectory_report(trajectories)
    assert report["tool_call_rate"] == 0.0 and report["mean_steps"] == 1.0 and report["well_formed_rate"] == 1.0


def test_threshold_above_one_calls_the_tool_on_count_questions_only(model, examples, monkeypatch):
    model.train()
    calls = _counting_forward(model, monkeypatch)
    trajectories = tool_loop.run_episodes(model, examples, confidence_threshold=1.01)
    assert model.training, "run_episodes must restore model.training"
    count_questions = sum(ex.tool_query is not None for ex in examples)
    assert calls == [len(examples), count_questions], "at most two batched forward passes"
    for traj, ex in zip(trajectories, examples):
        assert traj.is_well_formed()
        assert traj.used_tool is (ex.tool_query is not None)
        if traj.used_tool:
            assert [s.action for s in traj.steps] == ["call_tool", "answer"]
            assert traj.steps[0].result == ex.answer  # the tool is exact on its domain
            assert traj.steps[0].action_input.startswith(tool_loop.TOOL_NAME)
        assert traj.reward == reward_stage.verifier_reward(traj.final_answer, ex)
    report = tool_loop.trajectory_report(trajectories)
    assert report["tool_call_rate"] == pytest.approx(count_questions / len(examples), abs=1e-12)
    assert report["mean_steps"] == pytest.approx(1.0 + count_questions / len(examples), abs=1e-12)
    model.eval()
    tool_loop.run_episodes(model, examples[:3])
    assert not model.training


def test_tool_loop_answers_with_the_observation_in_context(examples, monkeypatch):
    model = _model(0)
    seen: list[torch.Tensor] = []
    original = model.forward

    def forward(images, input_ids, attention_mask=None):
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        seen.append([row[m != 0].tolist() for row, m in zip(input_ids, mask)])
        return original(images, input_ids, attention_mask)

    monkeypatch.setattr(model, "forward", forward)
    counts = _by_family(examples, count=True)[:4]
    tool_loop.run_episodes(model, counts, confidence_threshold=1.01)
    assert len(seen) == 2
    for ids, ex in zip(seen[1], counts):
        assert task.decode_text(ids) == f"{ex.question} observation : {ex.answer} :"


def test_render_trajectory_and_single_episode(model, examples):
    ex = _by_family(examples, count=True)[0]
    traj = tool_loop.run_episode(model, ex, confidence_threshold=1.01)
    assert [s.action for s in traj.steps] == ["call_tool", "answer"] and traj.steps[0].result == ex.answer
    text = tool_loop.render_trajectory(traj)
    assert ex.question in text and "call_tool" in text and tool_loop.TOOL_NAME in text
    # the stub promises the information (question, each step's context, thought, action, result), not a
    # layout: every field of a hand-made episode, each a distinct string, appears, in step order
    steps = [tool_loop.ToolStep(0, "context-zero", "thought-zero", "call_tool", "input-zero", "result-zero"),
             tool_loop.ToolStep(1, "context-one", "thought-one", "answer", "input-one", "")]
    made = tool_loop.Trajectory("the-question", "gold", steps=steps, final_answer="input-one", reward=0.0,
                                used_tool=True)
    text = tool_loop.render_trajectory(made)
    assert "the-question" in text
    for field in ("context-zero", "thought-zero", "input-zero", "result-zero", "context-one", "thought-one"):
        assert field in text, f"the transcript leaves out {field!r}"
    assert text.index("result-zero") < text.index("context-one"), "steps in order"
    assert "call_tool" in text and "answer" in text.split("context-one", 1)[1]


@pytest.mark.edge_case
def test_tool_loop_errors(model):
    with pytest.raises(ValueError):
        tool_loop.run_episodes(model, [])
    with pytest.raises(ValueError):
        tool_loop.run_episodes(model, task.make_dataset(1, seed=0), confidence_threshold=-0.1)
    with pytest.raises(ValueError):
        tool_loop.trajectory_report([])
