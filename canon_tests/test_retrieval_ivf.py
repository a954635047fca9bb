"""Reference tests for exact search, recall and the IVF index (#45 ``retrieval/ann``, module ``ivf``)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.retrieval import ivf
from canon_tests._retrieval_data import distance_scale, exact_neighbours, gaussian_mixture, recall
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, strict_numpy
from pytest_mlcanon.testing import rng as make_rng

pytestmark = pytest.mark.canon("retrieval/ann")


@pytest.fixture(scope="module")
def mixture() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The spec fixture (5000 x 32 database, 100 queries) and its exact top-10 ids."""
    database, queries = gaussian_mixture()
    _, truth = exact_neighbours(database, queries, 10)
    return database, queries, truth


@pytest.fixture(scope="module")
def ivf64(mixture: tuple[np.ndarray, np.ndarray, np.ndarray]) -> ivf.IVFIndex:
    database, _, _ = mixture
    index = ivf.IVFIndex(32, 64, seed=0)
    index.train(database)
    index.add(database)
    return index


# ---- brute_force_search ---------------------------------------------------------------------


def test_brute_force_equals_argsort_of_full_distance_matrix(mixture) -> None:
    database, queries, truth = mixture
    D, I = ivf.brute_force_search(database, queries, 10)
    assert D.shape == I.shape == (100, 10)
    assert D.dtype == np.float32 and I.dtype == np.int64
    np.testing.assert_array_equal(I, truth)
    want_d, _ = exact_neighbours(database, queries, 10)
    # float32 distances, computed from squared norms up to distance_scale in size
    assert_close(D, want_d, dtype="float32", magnitude=distance_scale(database, queries),
                 what="brute_force_search(mixture) distances")
    assert (np.diff(D, axis=1) >= 0).all()


def test_brute_force_inner_product_descending() -> None:
    g = make_rng(1)
    X, Q = g.standard_normal((300, 8)), g.standard_normal((7, 8))
    D, I = call_leaves_inputs_unchanged(ivf.brute_force_search, X, Q, 5, metric="ip")
    full = Q @ X.T
    want_i = np.argsort(-full, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(I, want_i)
    assert_close(D, np.take_along_axis(full, want_i, axis=1), dtype="float32", magnitude=distance_scale(X, Q),
                 what="brute_force_search(metric='ip') scores")
    assert (np.diff(D, axis=1) <= 0).all()


@pytest.mark.edge_case
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_tied_neighbours_go_to_the_lower_index(metric: str) -> None:
    # The docstring: ties go to the lower index. Duplicated small-integer points make every distance and
    # score exact in any float order (and their means 0), so ten rows tie at each place; k = 7 must take
    # the lowest seven rows of the nearest group, in index order (argpartition keeps an arbitrary seven).
    points = np.array([[1, 2, 0], [-1, -2, 0], [2, -1, 1], [-2, 1, -1]], dtype=np.float32)
    database = points[make_rng(5).permutation(np.repeat(np.arange(4), 10))]  # (40, 3)
    queries = np.array([[1, 1, 0], [-1, -1, 0], [2, 0, 1], [-2, 0, -1]], dtype=np.float32)
    exact = (((queries[:, None, :] - database[None, :, :]) ** 2).sum(-1) if metric == "l2"
             else -(queries @ database.T)).astype(np.int64)  # (4, 40), smaller is nearer
    want = np.stack([np.lexsort((np.arange(40), row))[:7] for row in exact])  # (4, 7)
    _, I = ivf.brute_force_search(database, queries, 7, metric=metric)
    np.testing.assert_array_equal(I, want)


@pytest.mark.edge_case
def test_k_larger_than_n_pads_with_minus_one() -> None:
    X = make_rng(2).standard_normal((4, 3))
    q = X[1:2] + 0.01
    D, I = ivf.brute_force_search(X, q, 6)
    assert I.shape == (1, 6)
    assert I[0, 0] == 1 and sorted(I[0, :4].tolist()) == [0, 1, 2, 3]
    assert I[0, 4:].tolist() == [-1, -1] and np.isinf(D[0, 4:]).all() and (D[0, 4:] > 0).all()
    D_ip, I_ip = ivf.brute_force_search(X, q, 6, metric="ip")
    assert I_ip[0, 4:].tolist() == [-1, -1] and (D_ip[0, 4:] == -np.inf).all()


@pytest.mark.numerics_probe
def test_far_from_origin_distances_stay_exact() -> None:
    # |x|^2 ~ 3.2e7 at an offset of 1000: a float32 expansion |q|^2 - 2 q.x + |x|^2 loses the neighbours.
    g = make_rng(3)
    X = (1000.0 + g.standard_normal((500, 32))).astype(np.float32)
    Q = (X[:20] + 0.05 * g.standard_normal((20, 32))).astype(np.float32)
    with strict_numpy():
        D, I = ivf.brute_force_search(X, Q, 5)
    want_d, want_i = exact_neighbours(X, Q, 5)
    np.testing.assert_array_equal(I, want_i)
    assert (D >= 0).all()
    # a looser bound than float32 allows on purpose: the probe is about the float32 expansion, which is
    # off by about 8 here (|x|^2 = 3.2e7 times float32's 2.4e-7), against distances of about 0.1
    np.testing.assert_allclose(D, want_d, rtol=1e-3, atol=1e-3)


# ---- recall_at_k ----------------------------------------------------------------------------


def test_recall_at_k_hand_example() -> None:
    found = np.array([[1, 2, 3, 4], [4, 5, 6, 7]])
    truth = np.array([[3, 2, 9, 8], [7, 8, 9, 10]])
    assert_close(call_leaves_inputs_unchanged(ivf.recall_at_k, found, truth, 3), (2 / 3 + 0.0) / 2,
                 what="recall_at_k(hand example, 3)")
    assert_close(ivf.recall_at_k(found, truth, 4), (2 / 4 + 1 / 4) / 2, what="recall_at_k(hand example, 4)")
    assert ivf.recall_at_k(truth, truth, 4) == 1.0


# ---- IVFIndex -------------------------------------------------------------------------------


def test_train_sets_state(ivf64: ivf.IVFIndex) -> None:
    assert ivf64.is_trained and ivf64.ntotal == 5000
    assert ivf64.centroids.shape == (64, 32)
    fresh = ivf.IVFIndex(32, 64)
    assert not fresh.is_trained and fresh.ntotal == 0


def test_nprobe_nlist_is_exact(mixture, ivf64: ivf.IVFIndex) -> None:
    database, queries, truth = mixture
    D, I = ivf64.search(queries, 10, nprobe=64)
    assert D.dtype == np.float32 and I.dtype == np.int64 and I.shape == (100, 10)
    np.testing.assert_array_equal(I, truth)
    want_d, _ = exact_neighbours(database, queries, 10)
    assert_close(D, want_d, dtype="float32", magnitude=distance_scale(database, queries),
                 what="IVFIndex.search(nprobe=nlist) distances")


def test_nprobe_8_recall(mixture, ivf64: ivf.IVFIndex) -> None:
    # recall@10 = 1.0 on seeds 0-4 at nprobe = 8 (0.97-0.999 already at nprobe = 1)
    _, queries, truth = mixture
    D, I = ivf64.search(queries, 10, nprobe=8)
    assert ivf.recall_at_k(I, truth, 10) >= 0.9
    assert recall(I, truth) >= 0.9
    assert (np.diff(D, axis=1) >= 0).all()


def test_recall_grows_with_nprobe_on_unclustered_data() -> None:
    # Without clusters a cell border cuts through most neighbourhoods: nprobe matters. Seeds 0-4:
    # recall 0.25-0.29 at nprobe 1, 0.63-0.67 at 4, 0.97-0.98 at 16, 1.0 at 32.
    g = make_rng(4)
    X, Q = g.standard_normal((3000, 16)), g.standard_normal((60, 16))
    _, truth = exact_neighbours(X, Q, 10)
    index = ivf.IVFIndex(16, 32, seed=1)
    index.train(X)
    index.add(X)
    recalls = [recall(index.search(Q, 10, nprobe=p)[1], truth) for p in (1, 4, 16, 32)]
    assert all(b >= a for a, b in zip(recalls, recalls[1:])), recalls
    assert recalls[0] < 0.8 and recalls[-1] == 1.0, recalls


def test_custom_ids_returned_unchanged(mixture) -> None:
    database, queries, truth = mixture
    X = database[:800]
    index = ivf.IVFIndex(32, 16, seed=2)
    index.train(X)
    custom = 10_000 + 7 * np.arange(800, dtype=np.int64)[::-1]
    index.add(X, ids=custom)
    _, I = index.search(queries, 5, nprobe=16)
    _, local = exact_neighbours(X, queries, 5)
    np.testing.assert_array_equal(I, custom[local])


def test_add_in_two_batches_keeps_default_ids(mixture) -> None:
    database, queries, _ = mixture
    X = database[:600]
    index = ivf.IVFIndex(32, 8, seed=3)
    index.train(X)
    index.add(X[:250])
    index.add(X[250:])
    assert index.ntotal == 600
    _, I = index.search(X[[10, 400]], 1, nprobe=8)
    assert I[:, 0].tolist() == [10, 400]


@pytest.mark.edge_case
def test_empty_index_returns_minus_one(mixture) -> None:
    database, queries, _ = mixture
    index = ivf.IVFIndex(32, 8, seed=0)
    index.train(database[:500])
    D, I = index.search(queries[:3], 4, nprobe=2)
    assert I.shape == (3, 4) and (I == -1).all()
    assert np.isinf(D).all()


@pytest.mark.edge_case
def test_probed_cells_smaller_than_k_pad(mixture) -> None:
    database, _, _ = mixture
    index = ivf.IVFIndex(32, 4, seed=0)
    index.train(database[:400])
    index.add(database[:3])
    D, I = index.search(database[:1], 5, nprobe=4)
    assert sorted(I[0, :3].tolist()) == [0, 1, 2] and I[0, 0] == 0 and I[0, 3:].tolist() == [-1, -1]
    assert_close(D[0, 0], 0.0, dtype="float32", magnitude=distance_scale(database[:3], database[:1]),
                 what="distance of a vector to itself")


def test_inner_product_index_exact_at_full_probe() -> None:
    g = make_rng(5)
    X, Q = g.standard_normal((1000, 8)), g.standard_normal((10, 8))
    index = ivf.IVFIndex(8, 10, metric="ip", seed=0)
    index.train(X)
    index.add(X)
    D, I = call_leaves_inputs_unchanged(index.search, Q, 5, nprobe=10)
    np.testing.assert_array_equal(I, np.argsort(-(Q @ X.T), axis=1, kind="stable")[:, :5])
    assert (np.diff(D, axis=1) <= 0).all()


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.contract
def test_errors() -> None:
    g = make_rng(6)
    X = g.standard_normal((50, 4))
    with pytest.raises(ValueError):
        ivf.brute_force_search(X, X[:2], 0)
    with pytest.raises(ValueError):
        ivf.brute_force_search(X, g.standard_normal((2, 5)), 3)
    with pytest.raises(ValueError):
        ivf.brute_force_search(X, X[:2], 3, metric="cosine")
    index = ivf.IVFIndex(4, 8)
    with pytest.raises(RuntimeError):
        index.add(X)
    with pytest.raises(RuntimeError):
        index.search(X[:2], 3)
    with pytest.raises(ValueError):
        index.train(X[:5])
    with pytest.raises(ValueError):
        index.train(g.standard_normal((50, 3)))
    index.train(X)
    with pytest.raises(ValueError):
        index.add(g.standard_normal((5, 3)))
    index.add(X)
    with pytest.raises(ValueError):
        index.search(X[:2], 3, nprobe=0)
    with pytest.raises(ValueError):
        index.search(X[:2], 3, nprobe=9)
    with pytest.raises(ValueError):
        index.search(X[:2], 0)
    with pytest.raises(ValueError):
        index.search(g.standard_normal((2, 3)), 3)
