"""Reference tests for canon #17, the tiny CNN trained end to end on 16x16 "bars" images."""

from __future__ import annotations

import copy
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.vision import tiny_cnn
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged

pytestmark = pytest.mark.canon("vision/tiny_cnn")

BAR_CLASSES = ("horizontal", "vertical", "diagonal", "anti-diagonal")


def make_bars(n: int, seed: int, size: int = 16, noise: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` single-channel ``size x size`` images of one line each, plus Gaussian noise.

    Label 0: a horizontal line, 1: vertical, 2: diagonal (``col - row = offset``), 3: anti-diagonal
    (``row + col = size - 1 + offset``); the offset is uniform in ``[-(size//2 - 2), size//2 - 2]``.
    Returns ``X (n, 1, size, size)`` float32 and ``y (n,)`` long.
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    offsets = torch.randint(-(size // 2 - 2), size // 2 - 1, (n,), generator=g)[:, None, None]
    rows = torch.arange(size)[None, :, None]
    cols = torch.arange(size)[None, None, :]
    lines = torch.stack(
        [
            (rows == size // 2 + offsets).expand(n, size, size),
            (cols == size // 2 + offsets).expand(n, size, size),
            (cols - rows == offsets),
            (rows + cols == size - 1 + offsets),
        ],
        dim=1,
    )
    images = lines[torch.arange(n), labels].float()
    images = images + noise * torch.randn(n, size, size, generator=g)
    return images[:, None], labels


@pytest.fixture(scope="module")
def bars() -> dict[str, torch.Tensor]:
    X_train, y_train = make_bars(1024, seed=0)
    X_test, y_test = make_bars(256, seed=1)
    return {"X_train": X_train, "y_train": y_train, "X_test": X_test, "y_test": y_test}


def test_bars_fixture_is_balanced_and_noisy(bars):
    assert bars["X_train"].shape == (1024, 1, 16, 16) and bars["X_test"].shape == (256, 1, 16, 16)
    counts = torch.bincount(bars["y_train"], minlength=4)
    assert counts.min() > 200
    residual = bars["X_train"] - bars["X_train"].round().clamp(0, 1)
    assert 0.08 < residual.std().item() < 0.12


def test_output_shape_and_architecture():
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN()
    out = model(torch.randn(5, 1, 16, 16))
    assert out.shape == (5, 4)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) >= 2
    assert sum(p.numel() for p in model.parameters()) < 20_000
    wide = tiny_cnn.TinyCNN(in_channels=3, n_classes=7, width=8)
    convs = [m for m in wide.modules() if isinstance(m, nn.Conv2d)]
    assert (convs[0].in_channels, convs[0].out_channels) == (3, 8)
    assert (convs[1].in_channels, convs[1].out_channels) == (8, 16)
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in convs[:2])
    heads = [m for m in wide.modules() if isinstance(m, nn.Linear)]
    assert [(h.in_features, h.out_features) for h in heads] == [(16, 7)]
    assert wide(torch.randn(2, 3, 12, 12)).shape == (2, 7)


@pytest.mark.parametrize("size", [(4, 4), (4, 7), (16, 16), (31, 20)])
def test_any_input_size(size):
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN().eval()
    with torch.no_grad():
        out = model(torch.randn(3, 1, *size))
    assert out.shape == (3, 4)
    assert torch.isfinite(out).all()


@pytest.mark.edge_case
def test_batch_of_one_in_eval_mode():
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN().eval()
    x = torch.randn(4, 1, 16, 16)
    with torch.no_grad():
        full = model(x)
        one = model(x[2:3])
    assert one.shape == (1, 4)
    # float32 forward of one image vs the same image inside a batch: the kernels may sum in another order
    assert_close(one[0], full[2], cond=64, what="TinyCNN(x[2:3]) vs TinyCNN(x)[2]")


def test_training_reaches_accuracy(bars):
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN()
    # CPU time of this single-threaded process (the reference takes ~3 s): a budget that only catches
    # a pathologically slow loop, not a different but reasonable implementation.
    start = time.process_time()
    out = call_leaves_inputs_unchanged(
        tiny_cnn.train_cnn, model, bars["X_train"], bars["y_train"], steps=300, batch_size=64, lr=3e-3, seed=0
    )
    elapsed = time.process_time() - start
    losses = out["losses"]  # extra keys in the returned dict are allowed
    assert len(losses) == 300
    assert all(isinstance(v, float) and v == v for v in losses)
    assert sum(losses[-20:]) / 20 < sum(losses[:20]) / 20
    accuracy = tiny_cnn.evaluate(model, bars["X_test"], bars["y_test"])
    assert accuracy >= 0.95, f"test accuracy {accuracy:.3f} after 300 steps"
    assert elapsed < 30.0, f"training took {elapsed:.1f} s of CPU time (budget 30 s)"


def test_same_seed_gives_identical_losses(bars):
    torch.manual_seed(0)
    first = tiny_cnn.TinyCNN()
    second = tiny_cnn.TinyCNN()
    second.load_state_dict(first.state_dict())
    third = copy.deepcopy(first)
    X, y = bars["X_train"], bars["y_train"]
    a = tiny_cnn.train_cnn(first, X, y, steps=25, seed=3)["losses"]
    b = tiny_cnn.train_cnn(second, X, y, steps=25, seed=3)["losses"]  # no re-seeding in between
    assert a == b
    c = tiny_cnn.train_cnn(third, X, y, steps=25, seed=4)["losses"]
    assert c != a, "the seed must change the batch order"


def test_loss_is_cross_entropy_of_the_logits(bars):
    # Eight copies of one labelled image: whatever batch is drawn, the first reported loss is the
    # mean F.cross_entropy of that image's raw logits before the update.
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN()
    X = bars["X_train"][:1].repeat(8, 1, 1, 1)
    y = bars["y_train"][:1].repeat(8)
    with torch.no_grad():
        want = F.cross_entropy(model(X[:1]), y[:1]).item()
    got = tiny_cnn.train_cnn(model, X, y, steps=1, batch_size=4)["losses"]
    assert len(got) == 1
    assert_close(got[0], want, dtype=torch.float32, magnitude=max(want, 1.0), cond=64,
                 what="train_cnn(...)['losses'][0]")


def test_evaluate_accuracy_and_mode(bars):
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN()
    X, y = bars["X_test"][:100], bars["y_test"][:100]
    model.eval()
    with torch.no_grad():
        want = int((model(X).argmax(dim=-1) == y).sum()) / len(y)
    model.train()
    acc = call_leaves_inputs_unchanged(tiny_cnn.evaluate, model, X, y, batch_size=7)
    assert isinstance(acc, float)
    # a ratio of counts, which an implementation may compute as a float32 mean
    assert_close(acc, want, dtype=torch.float32, what="evaluate(model, X, y)")
    assert model.training, "evaluate must restore train mode"
    model.eval()
    assert_close(tiny_cnn.evaluate(model, X, y), want, dtype=torch.float32, what="evaluate(model, X, y)")
    assert not model.training, "evaluate must leave an eval-mode model in eval mode"


@pytest.mark.numerics_probe
def test_huge_inputs_give_finite_losses(bars):
    # Inputs scaled by 1e4 make logits of order 1e4: finite only if the loss works on logits
    # through log-softmax (F.cross_entropy), not through exp or log(softmax).
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN()
    X = 1e4 * bars["X_train"][:128]
    losses = tiny_cnn.train_cnn(model, X, bars["y_train"][:128], steps=5, batch_size=32)["losses"]
    assert all(torch.isfinite(torch.tensor(v)) for v in losses)
    assert max(losses) > 10.0, "losses this large come only from unsquashed logits"


# ---- input checks (contract: the exception type only) -------------------------------------------


@pytest.mark.contract
def test_forward_errors():
    model = tiny_cnn.TinyCNN(in_channels=1)
    with pytest.raises(ValueError):
        model(torch.randn(1, 16, 16))
    with pytest.raises(ValueError):
        model(torch.randn(2, 3, 16, 16))


@pytest.mark.contract
@pytest.mark.parametrize(
    "kwargs, n_labels", [({}, 9), ({"steps": 0}, 10), ({"batch_size": 0}, 10)], ids=["y", "steps", "batch_size"]
)
def test_train_cnn_errors(kwargs, n_labels):
    torch.manual_seed(0)
    model = tiny_cnn.TinyCNN()
    X = torch.randn(10, 1, 8, 8)
    y = torch.zeros(n_labels, dtype=torch.long)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError):
        tiny_cnn.train_cnn(model, X, y, **kwargs)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), "a failed call must not update the weights"
