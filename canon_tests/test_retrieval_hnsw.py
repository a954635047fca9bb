"""Reference tests for the HNSW graph index (#45 ``retrieval/ann``, module ``hnsw``)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.retrieval import hnsw
from canon_tests._retrieval_data import distance_scale, exact_neighbours, gaussian_mixture, recall
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, strict_numpy
from pytest_mlcanon.testing import rng as make_rng

pytestmark = pytest.mark.canon("retrieval/ann")


@pytest.fixture(scope="module")
def built() -> tuple[hnsw.HNSWIndex, np.ndarray, np.ndarray]:
    """n = 2000, d = 16 points of the spec's mixture in a graph with M = 16 (ef_construction 24 keeps
    the build short; recall@10 at ef = 64 is 1.0 on seeds 0-4 with 24, 40 or 100)."""
    database, queries = gaussian_mixture(2000, 16)
    index = hnsw.HNSWIndex(16, M=16, ef_construction=24, seed=0)
    index.add(database)
    return index, database, queries


def test_recall_at_10(built) -> None:
    index, database, queries = built
    assert index.ntotal == 2000
    _, truth = exact_neighbours(database, queries, 10)
    D, I = index.search(queries, 10, ef=64)
    assert D.shape == I.shape == (100, 10) and D.dtype == np.float32 and I.dtype == np.int64
    assert recall(I, truth) >= 0.95


def test_rows_sorted_ascending_with_true_distances(built) -> None:
    index, database, queries = built
    D, I = index.search(queries, 10, ef=64)
    assert (np.diff(D, axis=1) >= 0).all(), "each row of D must be sorted ascending"
    assert (I >= 0).all() and all(len(set(row)) == 10 for row in I.tolist())
    exact = np.sum((database[I].astype(np.float64) - queries[:, None, :].astype(np.float64)) ** 2, axis=2)
    assert_close(D, exact, dtype="float32", magnitude=distance_scale(database, queries),
                 what="HNSWIndex.search distances")


def test_self_queries_find_themselves(built) -> None:
    index, database, _ = built
    probe = np.asarray(database[::40])
    D, I = call_leaves_inputs_unchanged(index.search, probe, 1, ef=32)
    found_self = I[:, 0] == np.arange(0, 2000, 40)
    assert np.mean(found_self) >= 0.98
    assert_close(D[found_self, 0], np.zeros(int(found_self.sum())), dtype=np.float32,
                 magnitude=distance_scale(probe, probe), what="distance of a vector to itself")


def test_recall_on_unclustered_gaussian() -> None:
    # no clusters to help: recall@10 at ef = 64 is 0.990-0.997 on seeds 0-4 (0.87-0.90 at ef = 16,
    # 0.76-0.81 at ef = 10), so a search that ignores ef falls well below the threshold.
    g = make_rng(1)
    X, Q = g.standard_normal((1000, 16)), g.standard_normal((40, 16))
    index = hnsw.HNSWIndex(16, M=8, ef_construction=32, seed=1)
    index.add(X)
    _, truth = exact_neighbours(X, Q, 10)
    assert recall(index.search(Q, 10, ef=64)[1], truth) >= 0.95


@pytest.mark.edge_case
def test_one_element_index() -> None:
    x = make_rng(2).standard_normal((1, 6))
    index = hnsw.HNSWIndex(6, M=4, seed=0)
    index.add(x)
    Q = make_rng(3).standard_normal((5, 6))
    D, I = index.search(Q, 3, ef=1)
    assert I[:, 0].tolist() == [0] * 5 and (I[:, 1:] == -1).all()
    assert_close(D[:, 0], np.sum((Q - x) ** 2, axis=1), dtype="float32", magnitude=distance_scale(x, Q),
                 what="one-element index distances")
    assert np.isinf(D[:, 1:]).all()


@pytest.mark.edge_case
def test_empty_index_and_k_larger_than_n() -> None:
    index = hnsw.HNSWIndex(3, M=4)
    D, I = index.search(np.zeros((2, 3)), 4)
    assert I.shape == (2, 4) and (I == -1).all() and np.isinf(D).all()
    X = make_rng(4).standard_normal((5, 3))
    index.add(X)
    D, I = index.search(X[2:3], 8, ef=8)
    assert I[0, 0] == 2 and sorted(I[0, :5].tolist()) == [0, 1, 2, 3, 4] and (I[0, 5:] == -1).all()


def test_ids_follow_insertion_order_across_adds() -> None:
    X = make_rng(5).standard_normal((300, 8))
    index = hnsw.HNSWIndex(8, M=8, ef_construction=32, seed=2)
    call_leaves_inputs_unchanged(index.add, X[:120].copy())
    index.add(X[120:])
    assert index.ntotal == 300
    _, I = index.search(X[[3, 150, 299]], 1, ef=32)
    assert I[:, 0].tolist() == [3, 150, 299]


def test_same_seed_same_results() -> None:
    X = make_rng(6).standard_normal((400, 8))
    Q = make_rng(7).standard_normal((30, 8))
    results = []
    for seed in (5, 5):
        index = hnsw.HNSWIndex(8, M=6, ef_construction=20, seed=seed)
        index.add(X)
        results.append(index.search(Q, 5, ef=5))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


@pytest.mark.numerics_probe
def test_far_from_origin() -> None:
    g = make_rng(8)
    X = 1000.0 + g.standard_normal((300, 16))
    index = hnsw.HNSWIndex(16, M=8, ef_construction=32, seed=0)
    index.add(X)
    with strict_numpy():
        D, I = index.search(X[:30] + 1e-3, 3, ef=32)
    assert (I[:, 0] == np.arange(30)).all()
    assert (D >= 0).all() and np.isfinite(D).all()


@pytest.mark.contract
def test_errors() -> None:
    with pytest.raises(ValueError):
        hnsw.HNSWIndex(4, M=1)
    index = hnsw.HNSWIndex(4, M=4)
    with pytest.raises(ValueError):
        index.add(np.zeros((3, 5)))
    index.add(make_rng(9).standard_normal((10, 4)))
    with pytest.raises(ValueError):
        index.search(np.zeros((1, 4)), 2, ef=0)
    with pytest.raises(ValueError):
        index.search(np.zeros((1, 4)), 0)
    with pytest.raises(ValueError):
        index.search(np.zeros((1, 3)), 2)
