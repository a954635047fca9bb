"""Reference tests for canon #41: CLIP-style contrastive loss, the two-tower model and its evaluation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.multimodal import clip
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    randn,
)

pytestmark = pytest.mark.canon("multimodal/clip")

N_CLASSES = 8
NOISE_STD = 0.1
TRAIN_STEPS = 200
TRAIN_SEED = 0
MIN_IMAGE_TO_TEXT = 0.875  # 7 of 8; the reference reaches 8/8 on seeds 0-4 (see the item's report)


def written_out_loss(image_emb: torch.Tensor, text_emb: torch.Tensor, scale: float) -> torch.Tensor:
    """The symmetric loss from its definition, with the normalisation done by hand."""
    img = image_emb / image_emb.pow(2).sum(-1, keepdim=True).sqrt()
    txt = text_emb / text_emb.pow(2).sum(-1, keepdim=True).sqrt()
    logits = scale * img @ txt.transpose(0, 1)
    labels = torch.arange(len(img))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.transpose(0, 1), labels)) / 2


def noisy_one_hots(labels: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The fixture's "images": one-hot class vectors plus Gaussian noise of std 0.1."""
    return F.one_hot(labels, N_CLASSES).float() + NOISE_STD * torch.randn(len(labels), N_CLASSES, generator=gen)


def make_model(seed: int) -> clip.CLIP:
    torch.manual_seed(seed)
    image_encoder = nn.Sequential(nn.Linear(N_CLASSES, 32), nn.ReLU())
    text_encoder = nn.Embedding(N_CLASSES, 16)
    return clip.CLIP(image_encoder, text_encoder, d_image=32, d_text=16, d_embed=16)


def train_tiny_clip(seed: int, steps: int = TRAIN_STEPS) -> tuple[clip.CLIP, list[float]]:
    """Adam on batches holding every class once, in a random order, with fresh image noise."""
    model = make_model(seed)
    gen = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        texts = torch.randperm(N_CLASSES, generator=gen)
        loss, _ = model(noisy_one_hots(texts, gen), texts)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


# --- the loss --------------------------------------------------------------------------------------------


def test_orthonormal_pairs_closed_form():
    eye = torch.eye(4, dtype=torch.float64)
    loss = clip.clip_loss(eye, eye.clone(), math.log(10.0))
    assert loss.shape == () and loss.dtype == torch.float64
    # log1p(3e^-10) = 1.36e-4 comes out of a log-softmax of logits of size 10: its absolute error is a
    # few ulps of 10, so it is compared at that magnitude
    want = torch.tensor(math.log1p(3 * math.exp(-10)), dtype=torch.float64)
    assert_close(loss, want, magnitude=10.0, what="clip_loss(eye(4), eye(4), ln 10)")
    assert_close(loss, torch.tensor(1.361905149382713e-4, dtype=torch.float64), magnitude=10.0,
                 what="clip_loss(eye(4), eye(4), ln 10)")
    logits = clip.clip_logits(eye, eye.clone(), torch.tensor(math.log(10.0), dtype=torch.float64))
    assert_close(logits, 10 * eye, what="clip_logits(eye(4), eye(4), ln 10)")


@pytest.mark.parametrize("seed", [0, 1])
def test_loss_equals_the_two_cross_entropies(seed):
    image = randn(6, 5, seed=seed, dtype=torch.float64)
    text = randn(6, 5, seed=seed + 10, dtype=torch.float64)
    scale = 7.5
    got = clip.clip_loss(image, text, math.log(scale))
    assert_close(got, written_out_loss(image, text, scale), cond=scale, what="clip_loss vs the two cross-entropies")
    one_sided = F.cross_entropy(clip.clip_logits(image, text, math.log(scale)), torch.arange(6))
    assert abs(got.item() - one_sided.item()) > 1e-3, "the fixture must separate the two directions"


def test_logits_are_scaled_cosines_of_rectangular_batches():
    image = randn(3, 4, seed=2, dtype=torch.float64)
    text = randn(5, 4, seed=3, dtype=torch.float64)
    logits = clip.clip_logits(image, text, math.log(20.0))
    assert logits.shape == (3, 5)
    cos = F.cosine_similarity(image[:, None, :], text[None, :, :], dim=-1)
    assert_close(logits, 20.0 * cos, what="clip_logits of a (3, 4) and a (5, 4) batch")


@pytest.mark.edge_case
def test_batch_of_one_has_zero_loss():
    loss = clip.clip_loss(randn(1, 8, seed=4), randn(1, 8, seed=5), math.log(1 / 0.07))
    assert_close(loss, torch.tensor(0.0), what="clip_loss of a batch of one")


def test_invariant_to_rescaling_embeddings():
    image = randn(5, 6, seed=6, dtype=torch.float64)
    text = randn(5, 6, seed=7, dtype=torch.float64)
    # norms from about 0.2 to 600: a guard eps of up to 1e-8 on the norm stays below the tolerance
    row_scales = torch.tensor([[0.1], [3.7], [1.0], [250.0], [0.5]], dtype=torch.float64)
    base = clip.clip_loss(image, text, 2.0)
    assert_close(clip.clip_loss(image * row_scales, text * 0.3, 2.0), written_out_loss(image, text, math.exp(2.0)),
                 cond=10.0, what="clip_loss of rescaled embeddings")
    assert_close(base, written_out_loss(image, text, math.exp(2.0)), cond=10.0, what="clip_loss")


def test_invariant_to_one_permutation_of_both_sides():
    image = randn(7, 4, seed=8, dtype=torch.float64)
    text = randn(7, 4, seed=9, dtype=torch.float64)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    base = clip.clip_loss(image, text, 1.5)
    assert_close(clip.clip_loss(image[perm], text[perm], 1.5), base, cond=10.0, what="clip_loss of permuted pairs")
    cos = F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).mT
    want = math.exp(1.5) * cos[perm][:, perm]
    assert_close(clip.clip_logits(image[perm], text[perm], 1.5), want, what="clip_logits of permuted pairs")


def test_swapping_two_texts_increases_the_loss():
    image = randn(6, 8, seed=10, dtype=torch.float64)
    text = image + 0.3 * randn(6, 8, seed=11, dtype=torch.float64)  # aligned pairs
    swapped = text.clone()
    swapped[[1, 4]] = text[[4, 1]]
    base = clip.clip_loss(image, text, math.log(10.0))
    assert clip.clip_loss(image, swapped, math.log(10.0)).item() > base.item() + 0.1


def test_logit_scale_is_capped_at_max_scale():
    image = randn(4, 3, seed=12, dtype=torch.float64)
    text = randn(4, 3, seed=13, dtype=torch.float64)
    cos = F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).mT
    assert_close(clip.clip_logits(image, text, 10.0), 100.0 * cos, what="clip_logits(logit_scale=10): scale capped at 100")
    assert_close(clip.clip_logits(image, text, 1e3), 100.0 * cos, what="clip_logits(logit_scale=1e3)")
    assert_close(clip.clip_logits(image, text, 10.0, max_scale=50.0), 50.0 * cos, what="clip_logits(max_scale=50)")
    assert_close(clip.clip_logits(image, text, math.log(30.0)), 30.0 * cos, what="clip_logits(logit_scale=ln 30)")
    assert_close(clip.clip_loss(image, text, 10.0), written_out_loss(image, text, 100.0), cond=100.0,
                 what="clip_loss with the scale capped at 100")


def test_gradients_match_finite_differences():
    image = randn(4, 3, seed=14, dtype=torch.float64, requires_grad=True)
    text = randn(4, 3, seed=15, dtype=torch.float64, requires_grad=True)
    scale = torch.tensor(1.2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, s: clip.clip_loss(a, b, s), (image, text, scale))


@pytest.mark.numerics_probe
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logits_of_magnitude_1e4_stay_finite(dtype):
    # Scale 1e4 with cosines of +-1: a hand-written softmax overflows exp(1e4) to inf and returns NaN.
    image = torch.eye(4, dtype=dtype)
    text = torch.tensor([[1.0, 0, 0, 0], [0, -1.0, 0, 0], [0, 0, 1.0, 0], [1.0, 0, 0, 0]], dtype=dtype)
    image.requires_grad_(True)
    logits = clip.clip_logits(image, text, math.log(1e4), max_scale=1e4)
    cos = F.normalize(image.detach().double(), dim=-1) @ F.normalize(text.double(), dim=-1).mT
    assert_close(logits, 1e4 * cos, what="clip_logits at a scale of 1e4")
    loss = clip.clip_loss(image, text, math.log(1e4), max_scale=1e4)
    assert torch.isfinite(loss)
    want = written_out_loss(image.detach().double(), text.double(), 1e4)
    assert_close(loss, want, magnitude=1e4, what="clip_loss at a scale of 1e4")  # a log-softmax of logits of 1e4
    loss.backward()
    assert torch.isfinite(image.grad).all()


@pytest.mark.numerics_probe
def test_half_precision_matches_float32():
    image = randn(6, 16, seed=16)
    text = randn(6, 16, seed=17)
    assert_low_precision_matches(lambda a, b: clip.clip_logits(a, b, math.log(1 / 0.07)), image, text)


# --- the model -------------------------------------------------------------------------------------------


def test_model_structure_and_initial_temperature():
    model = make_model(0)
    assert isinstance(model.image_proj, nn.Linear) and model.image_proj.bias is None
    assert isinstance(model.text_proj, nn.Linear) and model.text_proj.bias is None
    assert (model.image_proj.in_features, model.image_proj.out_features) == (32, 16)
    assert (model.text_proj.in_features, model.text_proj.out_features) == (16, 16)
    assert isinstance(model.logit_scale, nn.Parameter) and model.logit_scale.shape == ()
    assert model.logit_scale.dtype == torch.float32
    assert_close(model.logit_scale, torch.tensor(2.659260036932778), what="initial logit_scale = ln(1 / 0.07)")
    other = clip.CLIP(nn.Identity(), nn.Identity(), 4, 4, 4, init_temperature=0.5)
    assert_close(other.logit_scale, torch.tensor(math.log(2.0)), what="logit_scale for init_temperature=0.5")


def test_encoders_give_unit_norm_embeddings_and_forward_is_the_loss():
    model = make_model(1)
    gen = torch.Generator().manual_seed(0)
    texts = torch.tensor([3, 1, 4, 0, 5])
    images = noisy_one_hots(texts, gen)
    img, txt = model.encode_image(images), model.encode_text(texts)
    assert img.shape == (5, 16) and txt.shape == (5, 16)
    assert_close(img.norm(dim=-1), torch.ones(5), cond=16.0, what="encode_image norms")
    assert_close(txt.norm(dim=-1), torch.ones(5), cond=16.0, what="encode_text norms")
    with torch.no_grad():
        want_img = F.normalize(model.image_proj(model.image_encoder(images)), dim=-1)
    assert_close(img, want_img, cond=32.0, what="encode_image")
    loss, logits = model(images, texts)
    assert loss.shape == () and logits.shape == (5, 5)
    scale = model.logit_scale.exp().item()
    assert_close(logits, scale * img @ txt.mT, cond=16.0, what="CLIP.forward logits")
    assert_close(loss, written_out_loss(img, txt, scale), cond=16.0 * scale, what="CLIP.forward loss")
    loss.backward()
    assert model.logit_scale.grad is not None and model.logit_scale.grad.item() != 0.0


def test_tiny_clip_learns_to_retrieve_the_classes():
    model, losses = train_tiny_clip(TRAIN_SEED)
    assert len(losses) == TRAIN_STEPS and all(math.isfinite(v) for v in losses)
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20
    gen = torch.Generator().manual_seed(999)  # held out: fresh noise, one example per class
    labels = torch.arange(N_CLASSES)
    model.eval()
    with torch.no_grad():
        _, logits = model(noisy_one_hots(labels, gen), labels)
        img = model.encode_image(noisy_one_hots(labels, gen))
        classes = model.encode_text(labels)
    image_to_text, text_to_image = clip.retrieval_accuracy(logits)
    assert image_to_text >= MIN_IMAGE_TO_TEXT, f"image->text top-1 {image_to_text:.3f} after {TRAIN_STEPS} steps"
    assert text_to_image >= MIN_IMAGE_TO_TEXT
    pred = clip.zero_shot_predict(img, classes)
    assert pred.dtype == torch.long
    assert torch.equal(pred, (img @ classes.mT).argmax(dim=-1))
    assert (pred == labels).float().mean().item() >= MIN_IMAGE_TO_TEXT


def test_zero_shot_predict_normalises_the_class_embeddings():
    image = torch.tensor([[1.0, 0.2], [0.1, 1.0], [0.7, 0.7]])
    classes = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert clip.zero_shot_predict(image, classes).tolist() == [0, 1, 0]
    big = classes * torch.tensor([[1.0], [100.0]])  # a long class vector must not win by its norm alone
    assert clip.zero_shot_predict(image, big).tolist() == [0, 1, 0]
    many = randn(20, 6, seed=18)
    prompts = randn(4, 6, seed=19) * torch.tensor([[0.1], [1.0], [10.0], [3.0]])
    want = F.cosine_similarity(many[:, None], prompts[None], dim=-1).argmax(dim=-1)
    assert torch.equal(clip.zero_shot_predict(many, prompts), want)


def test_retrieval_accuracy_in_both_directions():
    logits = torch.tensor([[5.0, 1.0, 0.0], [4.0, 2.0, 0.0], [0.0, 1.0, 3.0]])
    # rows: argmax 0, 0, 2 -> 2/3 correct; columns: argmax 0, 1, 2 -> 3/3 correct
    image_to_text, text_to_image = clip.retrieval_accuracy(logits)
    assert isinstance(image_to_text, float) and isinstance(text_to_image, float)
    assert_close(image_to_text, 2 / 3, dtype=torch.float32, what="retrieval_accuracy image->text")  # a float32 mean is fine
    assert_close(text_to_image, 1.0, dtype=torch.float32, what="retrieval_accuracy text->image")


def test_inputs_are_not_modified():
    image, text = randn(5, 6, seed=20), randn(5, 6, seed=21)
    call_leaves_inputs_unchanged(clip.clip_loss, image, text, torch.tensor(1.5))
    call_leaves_inputs_unchanged(clip.clip_logits, image, text, 1.5)
    call_leaves_inputs_unchanged(clip.zero_shot_predict, image, randn(3, 6, seed=22))
    call_leaves_inputs_unchanged(clip.retrieval_accuracy, randn(4, 4, seed=23))


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.contract
def test_errors():
    a, b = randn(4, 5, seed=20), randn(4, 6, seed=21)
    with pytest.raises(ValueError):
        clip.clip_logits(a, b, 1.0)
    with pytest.raises(ValueError):
        clip.clip_loss(a, b, 1.0)
    with pytest.raises(ValueError):
        clip.clip_loss(a, randn(3, 5, seed=22), 1.0)
    with pytest.raises(ValueError):
        clip.clip_loss(torch.zeros(0, 5), torch.zeros(0, 5), 1.0)
    with pytest.raises(ValueError):
        clip.clip_loss(a, a, 1.0, max_scale=0.0)
    with pytest.raises(ValueError):
        clip.zero_shot_predict(a, b)
    with pytest.raises(ValueError):
        clip.CLIP(nn.Identity(), nn.Identity(), 4, 4, 4, init_temperature=0.0)
    with pytest.raises(ValueError):
        clip.CLIP(nn.Identity(), nn.Identity(), 4, 4, 4, init_temperature=-0.07)
    with pytest.raises(ValueError):
        clip.CLIP(nn.Identity(), nn.Identity(), 4, 4, 4, max_scale=-1.0)
    with pytest.raises(ValueError):
        clip.retrieval_accuracy(torch.zeros(3, 4))
