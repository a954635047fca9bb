"""Reference tests for KNN (#4, ``classical/knn``) and K-means (#5, ``classical/kmeans``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from canon_refs.classical import kmeans, knn
from pytest_mlcanon.testing import TOL, strict_numpy
from pytest_mlcanon.testing import rng as make_rng


def _loop_sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The double loop that ``pairwise_sq_distances`` replaces."""
    out = np.zeros((A.shape[0], B.shape[0]))
    for i in range(A.shape[0]):
        for j in range(B.shape[0]):
            diff = A[i] - B[j]
            out[i, j] = float(diff @ diff)
    return out


def _blobs(n_per: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three well-separated Gaussian blobs in 2-D: points, true labels, true centres."""
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    g = make_rng(seed)
    X = np.concatenate([c + 0.5 * g.standard_normal((n_per, 2)) for c in centres])
    y = np.repeat(np.arange(3), n_per)
    return X, y, centres


class TestKNN:
    pytestmark = pytest.mark.canon("classical/knn")

    # ---- pairwise_sq_distances -------------------------------------------------------------

    def test_pairwise_matches_double_loop(self) -> None:
        g = make_rng(1)
        A, B = g.standard_normal((7, 3)), g.standard_normal((5, 3))
        got = knn.pairwise_sq_distances(A, B)
        assert got.shape == (7, 5)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, _loop_sq_distances(A, B), **TOL.NUMPY_VS_REF.kw())

    def test_pairwise_matches_scipy_cdist(self) -> None:
        distance = pytest.importorskip("scipy.spatial.distance")
        g = make_rng(2)
        A, B = g.standard_normal((40, 8)), g.standard_normal((30, 8))
        np.testing.assert_allclose(
            knn.pairwise_sq_distances(A, B), distance.cdist(A, B) ** 2, **TOL.NUMPY_VS_REF.kw()
        )

    def test_pairwise_self_distances_nonnegative_with_zero_diagonal(self) -> None:
        X = make_rng(3).standard_normal((200, 16))
        D = knn.pairwise_sq_distances(X, X)
        assert (D >= 0).all()
        assert np.abs(np.diag(D)).max() <= 1e-9
        np.testing.assert_allclose(D, D.T, atol=1e-10)

    @pytest.mark.numerics_probe
    def test_pairwise_clipped_at_zero_far_from_origin(self) -> None:
        # At an offset of 10 the unclipped expansion gives ~50 entries of about -1e-12 here.
        X = make_rng(0).standard_normal((200, 16)) + 10.0
        with strict_numpy():
            D = knn.pairwise_sq_distances(X, X)
        assert (D >= 0).all(), f"min entry {D.min():.3e}: clip the expansion at 0"
        assert np.abs(np.diag(D)).max() <= 1e-9
        clf = knn.KNNClassifier(k=3).fit(X, np.arange(200) % 4)
        with strict_numpy():
            dist, idx = clf.kneighbors(X)
        assert np.isfinite(dist).all()
        np.testing.assert_array_equal(idx[:, 0], np.arange(200))

    # ---- kneighbors ------------------------------------------------------------------------

    def test_kneighbors_matches_brute_force(self) -> None:
        g = make_rng(4)
        X_train, X_query = g.standard_normal((50, 4)), g.standard_normal((9, 4))
        clf = knn.KNNClassifier(k=6).fit(X_train, g.integers(0, 3, 50))
        dist, idx = clf.kneighbors(X_query)
        assert dist.shape == (9, 6) and idx.shape == (9, 6)
        assert idx.dtype == np.int64 and dist.dtype == np.float64
        exact = np.sqrt(_loop_sq_distances(X_query, X_train))
        np.testing.assert_array_equal(idx, np.argsort(exact, axis=1, kind="stable")[:, :6])
        np.testing.assert_allclose(dist, np.sort(exact, axis=1)[:, :6], **TOL.NUMPY_VS_REF.kw())
        assert (np.diff(dist, axis=1) >= 0).all()
        dist2, idx2 = clf.kneighbors(X_query, k=2)
        np.testing.assert_array_equal(idx2, idx[:, :2])
        np.testing.assert_allclose(dist2, dist[:, :2], **TOL.EXACT64.kw())

    def test_kneighbors_ties_keep_lower_index(self) -> None:
        # 300 training points on {0, 1, 2}: every distance is tied with ~100 others.
        X_train = make_rng(5).integers(0, 3, (300, 1)).astype(np.float64)
        clf = knn.KNNClassifier(k=50).fit(X_train, np.zeros(300, dtype=np.int64))
        queries = np.array([[0.0], [1.0], [2.0]])
        _, idx = clf.kneighbors(queries)
        for row, q in zip(idx, queries[:, 0]):
            expected = np.argsort(np.abs(X_train[:, 0] - q), kind="stable")[:50]
            np.testing.assert_array_equal(row, expected)

    # ---- predictions -----------------------------------------------------------------------

    @pytest.mark.parametrize("weights", ["uniform", "distance"])
    def test_k1_on_training_set_reproduces_labels(self, weights: str) -> None:
        g = make_rng(6)
        X, y = g.standard_normal((80, 5)), g.integers(0, 4, 80)
        clf = knn.KNNClassifier(k=1, weights=weights).fit(X, y)
        pred = clf.predict(X)
        assert pred.dtype == np.int64
        np.testing.assert_array_equal(pred, y)

    def test_k_equals_n_predicts_majority(self) -> None:
        g = make_rng(7)
        y = np.array([0] * 3 + [1] * 2 + [2] * 5)
        X = g.standard_normal((10, 2))
        clf = knn.KNNClassifier(k=10).fit(X, y)
        queries = 5.0 * g.standard_normal((6, 2))
        np.testing.assert_array_equal(clf.predict(queries), np.full(6, 2))
        np.testing.assert_allclose(
            clf.predict_proba(queries), np.tile([0.3, 0.2, 0.5], (6, 1)), **TOL.EXACT64.kw()
        )

    def test_vote_tie_goes_to_smallest_label(self) -> None:
        # The nearest neighbour has label 1, the second label 0: a 1-1 tie must give 0, not 1.
        clf = knn.KNNClassifier(k=2).fit(np.array([[0.0], [2.0]]), np.array([1, 0]))
        np.testing.assert_array_equal(clf.predict(np.array([[0.9]])), [0])
        np.testing.assert_allclose(clf.predict_proba(np.array([[0.9]])), [[0.5, 0.5]], **TOL.EXACT64.kw())

    def test_distance_weighting_flips_the_vote(self) -> None:
        # Query at 0: one label-0 point at distance 1, two label-1 points at distance 3.
        X = np.array([[1.0], [3.0], [-3.0]])
        y = np.array([0, 1, 1])
        q = np.array([[0.0]])
        weighted = knn.KNNClassifier(k=3, weights="distance").fit(X, y)
        uniform = knn.KNNClassifier(k=3, weights="uniform").fit(X, y)
        np.testing.assert_array_equal(weighted.predict(q), [0])
        np.testing.assert_array_equal(uniform.predict(q), [1])
        np.testing.assert_allclose(weighted.predict_proba(q), [[0.6, 0.4]], atol=1e-12)
        np.testing.assert_allclose(uniform.predict_proba(q), [[1 / 3, 2 / 3]], atol=1e-12)

    @pytest.mark.numerics_probe
    def test_exact_duplicate_dominates_distance_vote(self) -> None:
        X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1]])
        clf = knn.KNNClassifier(k=3, weights="distance").fit(X, np.array([2, 0, 0]))
        with strict_numpy():
            proba = clf.predict_proba(np.array([[0.0, 0.0]]))
        assert np.isfinite(proba).all()
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
        assert proba[0, 2] > 1.0 - 1e-9
        np.testing.assert_array_equal(clf.predict(np.array([[0.0, 0.0]])), [2])

    def test_fit_stores_copies(self) -> None:
        X = np.array([[0.0], [1.0], [5.0]])
        y = np.array([0, 1, 1])
        clf = knn.KNNClassifier(k=1).fit(X, y)
        X[:] = 100.0
        y[:] = 0
        np.testing.assert_array_equal(clf.predict(np.array([[0.2], [4.0]])), [0, 1])

    def test_2000_by_2000_in_under_a_second(self) -> None:
        # Best of 3, on the smaller of wall time and this process's CPU time: CPU time ignores other
        # processes competing for the cores, wall time ignores BLAS threads adding up CPU time.
        # The reference takes about 0.25 s (CPU) on one core; a Python loop over the 4M pairs takes 10+ s.
        g = make_rng(8)
        X_train, X_query = g.standard_normal((2000, 32)), g.standard_normal((2000, 32))
        y = g.integers(0, 10, 2000)
        best = float("inf")
        for _ in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            pred = knn.KNNClassifier(k=5).fit(X_train, y).predict(X_query)
            best = min(best, time.perf_counter() - wall, time.process_time() - cpu)
        assert pred.shape == (2000,)
        assert best < 1.0, f"fit + predict of 2000 x 2000 points in d=32 took {best:.2f} s (best of 3)"

    # ---- edge cases ------------------------------------------------------------------------

    @pytest.mark.edge_case
    def test_single_training_point(self) -> None:
        clf = knn.KNNClassifier(k=1, weights="distance").fit(np.array([[1.0, 2.0]]), np.array([3]))
        queries = np.array([[1.0, 2.0], [4.0, 6.0]])
        dist, idx = clf.kneighbors(queries)
        np.testing.assert_allclose(dist, [[0.0], [5.0]], atol=1e-12)
        np.testing.assert_array_equal(idx, [[0], [0]])
        np.testing.assert_array_equal(clf.predict(queries), [3, 3])
        np.testing.assert_allclose(clf.predict_proba(queries), [[0, 0, 0, 1.0]] * 2, atol=1e-12)

    @pytest.mark.edge_case
    def test_single_query(self) -> None:
        X = np.array([[0.0], [1.0], [2.0], [10.0]])
        clf = knn.KNNClassifier(k=3).fit(X, np.array([0, 1, 1, 0]))
        dist, idx = clf.kneighbors(np.array([[1.2]]))
        np.testing.assert_allclose(dist, [[0.2, 0.8, 1.2]], atol=1e-12)
        np.testing.assert_array_equal(idx, [[1, 2, 0]])
        assert clf.predict_proba(np.array([[1.2]])).shape == (1, 2)
        np.testing.assert_array_equal(clf.predict(np.array([[1.2]])), [1])

    # ---- errors ----------------------------------------------------------------------------

    @pytest.mark.parametrize("k", [0, -1])
    def test_k_below_one_raises(self, k: int) -> None:
        with pytest.raises(ValueError, match="k"):
            knn.KNNClassifier(k=k)

    def test_k_above_n_train_raises(self) -> None:
        X, y = np.zeros((3, 2)), np.array([0, 1, 0])
        with pytest.raises(ValueError, match="k"):
            knn.KNNClassifier(k=4).fit(X, y)
        clf = knn.KNNClassifier(k=2).fit(X, y)
        with pytest.raises(ValueError, match="k"):
            clf.kneighbors(X, k=4)

    def test_unknown_weights_raises(self) -> None:
        with pytest.raises(ValueError, match="weights"):
            knn.KNNClassifier(k=1, weights="inverse")  # type: ignore[arg-type]

    def test_dimension_mismatch_raises(self) -> None:
        with pytest.raises(ValueError, match=r"\b[AB]\b"):
            knn.pairwise_sq_distances(np.zeros((3, 2)), np.zeros((4, 3)))
        clf = knn.KNNClassifier(k=1).fit(np.zeros((3, 2)), np.array([0, 1, 0]))
        with pytest.raises(ValueError, match="X"):
            clf.predict(np.zeros((2, 3)))

    def test_non_integer_labels_raise(self) -> None:
        with pytest.raises(ValueError, match="y"):
            knn.KNNClassifier(k=1).fit(np.zeros((2, 1)), np.array([0.5, 1.5]))
        with pytest.raises(ValueError, match="y"):
            knn.KNNClassifier(k=1).fit(np.zeros((2, 1)), np.array([-1, 0]))

    def test_predict_before_fit_raises(self) -> None:
        with pytest.raises(RuntimeError):
            knn.KNNClassifier(k=1).predict(np.zeros((1, 2)))


class TestKMeans:
    pytestmark = pytest.mark.canon("classical/kmeans")

    def test_1d_closed_form(self) -> None:
        X = np.array([[0.0], [1.0], [10.0], [11.0]])
        init = np.array([[0.0], [1.0]])
        res = kmeans.kmeans(X, 2, init=init)
        np.testing.assert_allclose(res.centroids, [[0.5], [10.5]], **TOL.EXACT64.kw())
        assert abs(res.inertia - 1.0) <= 1e-12
        np.testing.assert_array_equal(res.labels, [0, 0, 1, 1])
        assert res.labels.dtype == np.int64
        np.testing.assert_array_equal(init, [[0.0], [1.0]])  # the init array is not modified

    def test_three_blobs_purity_one(self) -> None:
        X, y, centres = _blobs()
        res = kmeans.kmeans(X, 3, seed=0)
        mapped = [set(res.labels[y == c].tolist()) for c in range(3)]
        assert all(len(s) == 1 for s in mapped), f"a true cluster is split: {mapped}"
        assert len(set().union(*mapped)) == 3, "two true clusters share a label"
        order = [next(iter(s)) for s in mapped]
        np.testing.assert_allclose(res.centroids[order], centres, atol=0.25)

    def test_inertia_history_non_increasing(self) -> None:
        X = make_rng(9).uniform(size=(300, 2))
        res = kmeans.kmeans(X, 8, init="random", seed=1)
        hist = np.asarray(res.inertia_history)
        assert len(hist) >= 2
        assert (hist[1:] <= hist[:-1] * (1 + 1e-12)).all(), f"inertia went up: {hist}"
        exact = _loop_sq_distances(X, res.centroids)[np.arange(300), res.labels].sum()
        assert res.inertia == pytest.approx(exact, rel=1e-9)
        assert hist[-1] == pytest.approx(res.inertia, rel=1e-9)
        assert 1 <= res.n_iter <= 100

    @pytest.mark.parametrize("n_iter", [1, 100])
    def test_labels_are_a_fixed_point_of_assign(self, n_iter: int) -> None:
        X = make_rng(10).standard_normal((200, 3))
        res = kmeans.kmeans(X, 5, n_iter=n_iter, init="random", seed=2)
        labels, sq = kmeans.assign(X, res.centroids)
        np.testing.assert_array_equal(res.labels, labels)
        assert res.inertia == pytest.approx(float(sq.sum()), rel=1e-12)
        assert res.n_iter <= n_iter

    def test_assign_values_and_ties(self) -> None:
        X = np.array([[0.0], [1.0], [2.5], [4.0]])
        labels, sq = kmeans.assign(X, np.array([[0.0], [2.0], [3.0]]))
        np.testing.assert_array_equal(labels, [0, 0, 1, 2])  # 1.0 ties 0 and 2 -> 0; 2.5 ties 1 and 2 -> 1
        np.testing.assert_allclose(sq, [0.0, 1.0, 0.25, 1.0], atol=1e-12)
        assert labels.dtype == np.int64

    def test_k1_centroid_is_the_mean(self) -> None:
        X = make_rng(11).standard_normal((50, 4))
        res = kmeans.kmeans(X, 1)
        np.testing.assert_allclose(res.centroids, X.mean(axis=0, keepdims=True), atol=1e-12)
        np.testing.assert_array_equal(res.labels, np.zeros(50))
        assert res.inertia == pytest.approx(float(((X - X.mean(axis=0)) ** 2).sum()), rel=1e-12)

    @pytest.mark.edge_case
    @pytest.mark.parametrize("init", ["k-means++", "random"])
    def test_k_equals_n_gives_zero_inertia(self, init: str) -> None:
        X = make_rng(12).standard_normal((12, 3))
        res = kmeans.kmeans(X, 12, init=init, seed=3)
        assert abs(res.inertia) <= 1e-9
        assert sorted(res.labels.tolist()) == list(range(12))

    @pytest.mark.edge_case
    def test_empty_cluster_is_reseeded(self) -> None:
        X = np.array([[0.0], [1.0], [2.0], [3.0]])
        with strict_numpy():
            res = kmeans.kmeans(X, 3, init=np.array([[0.0], [1.0], [100.0]]))
        assert np.isfinite(res.centroids).all()
        assert (np.bincount(res.labels, minlength=3) > 0).all(), f"empty cluster left: {res.labels}"
        hist = np.asarray(res.inertia_history)
        assert (hist[1:] <= hist[:-1] * (1 + 1e-12)).all()
        np.testing.assert_array_equal(res.labels, kmeans.assign(X, res.centroids)[0])

    def test_same_seed_same_result(self) -> None:
        X, _, _ = _blobs(seed=1)
        for init in ("k-means++", "random"):
            a = kmeans.kmeans(X, 4, init=init, seed=5)
            b = kmeans.kmeans(X, 4, init=init, seed=5)
            np.testing.assert_array_equal(a.centroids, b.centroids)
            np.testing.assert_array_equal(a.labels, b.labels)
            assert a.inertia_history == b.inertia_history and a.n_iter == b.n_iter

    def test_kmeans_plus_plus_picks_distinct_points(self) -> None:
        X = make_rng(13).standard_normal((20, 2))
        for seed in range(5):
            C = kmeans.kmeans_plus_plus_init(X, 20, make_rng(seed))
            assert C.shape == (20, 2)
            # k = n: the picks are a permutation of the rows of X
            np.testing.assert_array_equal(np.unique(C, axis=0), np.unique(X, axis=0))

    def test_kmeans_plus_plus_draws_proportional_to_squared_distance(self) -> None:
        # X = {0, 1, 2}: after a first pick of 0, point 2 follows with p = 4/5 (D^2), not 2/3 (D).
        X = np.array([[0.0], [1.0], [2.0]])
        g = make_rng(14)
        picks = np.array([kmeans.kmeans_plus_plus_init(X, 2, g)[:, 0] for _ in range(3000)])  # (3000, 2)
        first_share = np.mean(picks[:, 0] == 0.0)
        assert abs(first_share - 1 / 3) <= 4 * np.sqrt((1 / 3) * (2 / 3) / 3000)
        after_zero = picks[picks[:, 0] == 0.0, 1]
        se = np.sqrt(0.8 * 0.2 / after_zero.size)
        assert abs(np.mean(after_zero == 2.0) - 0.8) <= 4 * se

    @pytest.mark.numerics_probe
    def test_translation_by_1e6_changes_nothing(self) -> None:
        X, y, _ = _blobs(seed=2)
        base = kmeans.kmeans(X, 3, seed=0)
        with strict_numpy():
            moved = kmeans.kmeans(X + 1e6, 3, seed=0)
        assert np.isfinite(moved.centroids).all()
        mapped = [set(moved.labels[y == c].tolist()) for c in range(3)]
        assert all(len(s) == 1 for s in mapped) and len(set().union(*mapped)) == 3
        np.testing.assert_allclose(
            np.sort(moved.centroids - 1e6, axis=0), np.sort(base.centroids, axis=0), atol=1e-6
        )

    # ---- errors ----------------------------------------------------------------------------

    @pytest.mark.parametrize("k", [0, 5])
    def test_k_out_of_range_raises(self, k: int) -> None:
        with pytest.raises(ValueError, match="k"):
            kmeans.kmeans(np.zeros((4, 2)), k)

    def test_bad_X_raises(self) -> None:
        with pytest.raises(ValueError, match="X"):
            kmeans.kmeans(np.zeros(4), 2)
        with pytest.raises(ValueError, match="X"):
            kmeans.kmeans(np.array([[0.0], [np.nan], [1.0]]), 2)
        with pytest.raises(ValueError, match="X"):
            kmeans.kmeans(np.array([[0.0], [np.inf], [1.0]]), 2)

    def test_bad_init_raises(self) -> None:
        X = np.zeros((4, 2))
        with pytest.raises(ValueError, match="init"):
            kmeans.kmeans(X, 2, init=np.zeros((3, 2)))
        with pytest.raises(ValueError, match="init"):
            kmeans.kmeans(X, 2, init=np.zeros((2, 3)))
        with pytest.raises(ValueError, match="init"):
            kmeans.kmeans(X, 2, init="farthest")  # type: ignore[arg-type]
