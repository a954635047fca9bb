"""Reference tests for KNN (#4, ``classical/knn``) and K-means (#5, ``classical/kmeans``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from canon_refs.classical import kmeans, knn
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, optional_module, strict_numpy
from pytest_mlcanon.testing import rng as make_rng


def _loop_sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The double loop that ``pairwise_sq_distances`` replaces."""
    out = np.zeros((A.shape[0], B.shape[0]))
    for i in range(A.shape[0]):
        for j in range(B.shape[0]):
            diff = A[i] - B[j]
            out[i, j] = float(diff @ diff)
    return out


def _expansion_scale(A: np.ndarray, B: np.ndarray) -> float:
    """The size the norm expansion cancels from: ``max ||a||^2 + max ||b||^2``. Its rounding error is a
    few ulps of this, times the feature width for the ``A @ B.T`` reduction (the ``cond`` passed)."""
    return float((A * A).sum(axis=1).max() + (B * B).sum(axis=1).max())


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
        got = call_leaves_inputs_unchanged(knn.pairwise_sq_distances, A, B)
        assert got.shape == (7, 5)
        assert got.dtype == np.float64
        assert_close(got, _loop_sq_distances(A, B), magnitude=_expansion_scale(A, B), cond=3,
                     what="pairwise_sq_distances(A, B)")

    def test_pairwise_matches_scipy_cdist(self) -> None:
        distance = optional_module("scipy.spatial.distance")
        g = make_rng(2)
        A, B = g.standard_normal((40, 8)), g.standard_normal((30, 8))
        assert_close(knn.pairwise_sq_distances(A, B), distance.cdist(A, B) ** 2,
                     magnitude=_expansion_scale(A, B), cond=8, what="pairwise_sq_distances(A, B)")

    def test_pairwise_self_distances_nonnegative_with_zero_diagonal(self) -> None:
        X = make_rng(3).standard_normal((200, 16))
        D = knn.pairwise_sq_distances(X, X)
        assert (D >= 0).all()
        scale = _expansion_scale(X, X)
        assert_close(np.diag(D), np.zeros(200), magnitude=scale, cond=16, what="diag(pairwise_sq_distances(X, X))")
        assert_close(D, D.T, magnitude=scale, cond=16, what="pairwise_sq_distances(X, X) symmetry")

    @pytest.mark.numerics_probe
    def test_pairwise_clipped_at_zero_far_from_origin(self) -> None:
        # At an offset of 10 the unclipped expansion gives ~50 entries of about -1e-12 here.
        X = make_rng(0).standard_normal((200, 16)) + 10.0
        with strict_numpy():
            D = knn.pairwise_sq_distances(X, X)
        assert (D >= 0).all(), f"min entry {D.min():.3e}: squared distances are never negative"
        assert_close(np.diag(D), np.zeros(200), magnitude=_expansion_scale(X, X), cond=16,
                     what="diag(pairwise_sq_distances(X, X))")
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
        # the expansion's absolute error (a few ulps of ||a||^2 + ||b||^2) passes through sqrt
        # divided by 2 * dist, so it is largest at the smallest distance
        want = np.sort(exact, axis=1)[:, :6]
        assert_close(dist, want, magnitude=_expansion_scale(X_query, X_train) / want.min(), cond=4,
                     what="kneighbors(X).dist")
        assert (np.diff(dist, axis=1) >= 0).all()
        dist2, idx2 = clf.kneighbors(X_query, k=2)
        np.testing.assert_array_equal(idx2, idx[:, :2])
        assert_close(dist2, dist[:, :2], what="kneighbors(X, k=2).dist")

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
        assert_close(clf.predict_proba(queries), np.tile([0.3, 0.2, 0.5], (6, 1)), what="predict_proba")

    def test_vote_tie_goes_to_smallest_label(self) -> None:
        # The nearest neighbour has label 1, the second label 0: a 1-1 tie must give 0, not 1.
        clf = knn.KNNClassifier(k=2).fit(np.array([[0.0], [2.0]]), np.array([1, 0]))
        np.testing.assert_array_equal(clf.predict(np.array([[0.9]])), [0])
        assert_close(clf.predict_proba(np.array([[0.9]])), np.array([[0.5, 0.5]]), what="predict_proba")

    def test_distance_weighting_flips_the_vote(self) -> None:
        # Query at 0: one label-0 point at distance 1, two label-1 points at distance 3.
        X = np.array([[1.0], [3.0], [-3.0]])
        y = np.array([0, 1, 1])
        q = np.array([[0.0]])
        weighted = knn.KNNClassifier(k=3, weights="distance").fit(X, y)
        uniform = knn.KNNClassifier(k=3, weights="uniform").fit(X, y)
        np.testing.assert_array_equal(weighted.predict(q), [0])
        np.testing.assert_array_equal(uniform.predict(q), [1])
        assert_close(weighted.predict_proba(q), np.array([[0.6, 0.4]]), what="predict_proba (distance)")
        assert_close(uniform.predict_proba(q), np.array([[1 / 3, 2 / 3]]), what="predict_proba (uniform)")

    @pytest.mark.numerics_probe
    def test_exact_duplicate_dominates_distance_vote(self) -> None:
        X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1]])
        clf = knn.KNNClassifier(k=3, weights="distance").fit(X, np.array([2, 0, 0]))
        with strict_numpy():
            proba = clf.predict_proba(np.array([[0.0, 0.0]]))
        assert np.isfinite(proba).all()
        assert_close(proba.sum(axis=1), np.ones(1), what="predict_proba(...).sum(axis=1)")
        # weights 1/max(d, 1e-12) give the duplicate a share of 1 - 2e-11; any floor below 1e-7 (or
        # all the weight to zero distances) clears 1 - 1e-6
        assert proba[0, 2] > 1.0 - 1e-6
        np.testing.assert_array_equal(clf.predict(np.array([[0.0, 0.0]])), [2])

    def test_fit_stores_copies(self) -> None:
        X = np.array([[0.0], [1.0], [5.0]])
        y = np.array([0, 1, 1])
        clf = call_leaves_inputs_unchanged(knn.KNNClassifier(k=1).fit, X, y)
        call_leaves_inputs_unchanged(clf.predict_proba, np.array([[0.2], [4.0]]))
        X[:] = 100.0
        y[:] = 0
        np.testing.assert_array_equal(clf.predict(np.array([[0.2], [4.0]])), [0, 1])

    def test_2000_by_2000_vectorised_without_a_loop_over_pairs(self) -> None:
        # Best of 3, on the smaller of wall time and this process's CPU time: CPU time ignores other
        # processes competing for the cores, wall time ignores BLAS threads adding up CPU time.
        # The reference takes about 0.25 s (CPU) on one core and broadcasting A[:, None] - B[None]
        # about 1.6 s; a Python loop over the 4M pairs takes 10+ s. The bound only catches that loop.
        g = make_rng(8)
        X_train, X_query = g.standard_normal((2000, 32)), g.standard_normal((2000, 32))
        y = g.integers(0, 10, 2000)
        best = float("inf")
        for _ in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            pred = knn.KNNClassifier(k=5).fit(X_train, y).predict(X_query)
            best = min(best, time.perf_counter() - wall, time.process_time() - cpu)
            if best < 4.0 or best > 12.0:  # settled either way: no need to time it again
                break
        assert pred.shape == (2000,)
        assert best < 4.0, f"fit + predict of 2000 x 2000 points in d=32 took {best:.2f} s: vectorise the distances"

    # ---- edge cases ------------------------------------------------------------------------

    @pytest.mark.edge_case
    def test_single_training_point(self) -> None:
        clf = knn.KNNClassifier(k=1, weights="distance").fit(np.array([[1.0, 2.0]]), np.array([3]))
        queries = np.array([[1.0, 2.0], [4.0, 6.0]])
        dist, idx = clf.kneighbors(queries)
        # 16 + 36 - 2 * (4 + 12) + 5 = 25 and 0 are exact in the expansion too
        assert_close(dist, np.array([[0.0], [5.0]]), what="kneighbors(X).dist")
        np.testing.assert_array_equal(idx, [[0], [0]])
        np.testing.assert_array_equal(clf.predict(queries), [3, 3])
        assert_close(clf.predict_proba(queries), np.array([[0, 0, 0, 1.0]] * 2), what="predict_proba")

    @pytest.mark.edge_case
    def test_single_query(self) -> None:
        X = np.array([[0.0], [1.0], [2.0], [10.0]])
        clf = knn.KNNClassifier(k=3).fit(X, np.array([0, 1, 1, 0]))
        dist, idx = clf.kneighbors(np.array([[1.2]]))
        # sqrt of an expansion with squared norms up to 100, at a distance of 0.2
        assert_close(dist, np.array([[0.2, 0.8, 1.2]]), magnitude=102.0 / 0.2, what="kneighbors(X).dist")
        np.testing.assert_array_equal(idx, [[1, 2, 0]])
        assert clf.predict_proba(np.array([[1.2]])).shape == (1, 2)
        np.testing.assert_array_equal(clf.predict(np.array([[1.2]])), [1])

    # ---- input checks (contract: the exception type only) -------------------------------------

    @pytest.mark.contract
    @pytest.mark.parametrize("k", [0, -1])
    def test_k_below_one_raises(self, k: int) -> None:
        with pytest.raises(ValueError):
            knn.KNNClassifier(k=k)

    @pytest.mark.contract
    def test_k_above_n_train_raises(self) -> None:
        X, y = np.zeros((3, 2)), np.array([0, 1, 0])
        with pytest.raises(ValueError):
            knn.KNNClassifier(k=4).fit(X, y)
        clf = knn.KNNClassifier(k=2).fit(X, y)
        with pytest.raises(ValueError):
            clf.kneighbors(X, k=4)

    @pytest.mark.contract
    def test_unknown_weights_raises(self) -> None:
        with pytest.raises(ValueError):
            knn.KNNClassifier(k=1, weights="inverse")  # type: ignore[arg-type]

    @pytest.mark.contract
    def test_dimension_mismatch_raises(self) -> None:
        with pytest.raises(ValueError):
            knn.pairwise_sq_distances(np.zeros((3, 2)), np.zeros((4, 3)))
        clf = knn.KNNClassifier(k=1).fit(np.zeros((3, 2)), np.array([0, 1, 0]))
        with pytest.raises(ValueError):
            clf.predict(np.zeros((2, 3)))

    @pytest.mark.contract
    def test_non_integer_labels_raise(self) -> None:
        with pytest.raises(ValueError):
            knn.KNNClassifier(k=1).fit(np.zeros((2, 1)), np.array([0.5, 1.5]))
        with pytest.raises(ValueError):
            knn.KNNClassifier(k=1).fit(np.zeros((2, 1)), np.array([-1, 0]))

    @pytest.mark.contract
    def test_predict_before_fit_raises(self) -> None:
        with pytest.raises(RuntimeError):
            knn.KNNClassifier(k=1).predict(np.zeros((1, 2)))


class TestKMeans:
    pytestmark = pytest.mark.canon("classical/kmeans")

    def test_1d_closed_form(self) -> None:
        X = np.array([[0.0], [1.0], [10.0], [11.0]])
        init = np.array([[0.0], [1.0]])
        res = call_leaves_inputs_unchanged(kmeans.kmeans, X, 2, init=init)
        assert_close(res.centroids, np.array([[0.5], [10.5]]), what="kmeans(...).centroids")
        assert_close(res.inertia, 1.0, magnitude=121.0, what="kmeans(...).inertia")  # from norms up to 11^2
        np.testing.assert_array_equal(res.labels, [0, 0, 1, 1])
        assert res.labels.dtype == np.int64

    def test_1d_one_update_closed_form(self) -> None:
        # init [0], [1] labels [0, 1, 1, 1] (inertia 181); one update moves the centroids to 0 and
        # 22/3; the returned labels and inertia are those of the moved centroids: [0, 0, 1, 1], 194/9.
        X = np.array([[0.0], [1.0], [10.0], [11.0]])
        res = kmeans.kmeans(X, 2, n_iter=1, init=np.array([[0.0], [1.0]]))
        assert res.n_iter == 1
        assert_close(res.centroids, np.array([[0.0], [22.0 / 3.0]]), what="kmeans(..., n_iter=1).centroids")
        np.testing.assert_array_equal(res.labels, [0, 0, 1, 1])
        assert_close(res.inertia, 194.0 / 9.0, magnitude=121.0, what="kmeans(..., n_iter=1).inertia")
        assert_close(np.asarray(res.inertia_history), np.array([181.0, 194.0 / 9.0]), magnitude=121.0,
                     what="kmeans(..., n_iter=1).inertia_history")

    def test_three_blobs_purity_one(self) -> None:
        X, y, centres = _blobs()
        res = kmeans.kmeans(X, 3, seed=0)
        mapped = [set(res.labels[y == c].tolist()) for c in range(3)]
        assert all(len(s) == 1 for s in mapped), f"a true cluster is split: {mapped}"
        assert len(set().union(*mapped)) == 3, "two true clusters share a label"
        order = [next(iter(s)) for s in mapped]
        np.testing.assert_allclose(res.centroids[order], centres, atol=0.25)
        # the stub's stop rule: once no centroid moves more than tol, no further update runs (a few on blobs)
        assert res.n_iter < 100 and len(res.inertia_history) == res.n_iter + 1, (
            f"converged blobs stopped after {res.n_iter} of at most 100 updates")

    def test_inertia_history_non_increasing(self) -> None:
        X = make_rng(9).uniform(size=(300, 2))
        res = kmeans.kmeans(X, 8, init="random", seed=1)
        hist = np.asarray(res.inertia_history)
        assert len(hist) >= 2
        assert (hist[1:] <= hist[:-1] * (1 + 1e-12)).all(), f"inertia went up: {hist}"
        exact = _loop_sq_distances(X, res.centroids)[np.arange(300), res.labels].sum()
        # a sum of 300 squared distances, each a few ulps of the squared norms (<= 2) off
        assert_close(res.inertia, exact, magnitude=2.0 * 300, what="kmeans(...).inertia")
        assert_close(hist[-1], res.inertia, magnitude=2.0 * 300, what="kmeans(...).inertia_history[-1]")
        assert 1 <= res.n_iter <= 100

    @pytest.mark.parametrize("n_iter", [1, 100])
    def test_labels_are_a_fixed_point_of_assign(self, n_iter: int) -> None:
        X = make_rng(10).standard_normal((200, 3))
        res = kmeans.kmeans(X, 5, n_iter=n_iter, init="random", seed=2)
        labels, sq = kmeans.assign(X, res.centroids)
        np.testing.assert_array_equal(res.labels, labels)
        scale = float((X * X).sum(axis=1).max() + (res.centroids**2).sum(axis=1).max())
        assert_close(res.inertia, float(sq.sum()), magnitude=scale * 200, what="kmeans(...).inertia")
        assert res.n_iter <= n_iter

    def test_assign_values_and_ties(self) -> None:
        X = np.array([[0.0], [1.0], [2.5], [4.0]])
        labels, sq = kmeans.assign(X, np.array([[0.0], [2.0], [3.0]]))
        np.testing.assert_array_equal(labels, [0, 0, 1, 2])  # 1.0 ties 0 and 2 -> 0; 2.5 ties 1 and 2 -> 1
        assert_close(sq, np.array([0.0, 1.0, 0.25, 1.0]), magnitude=16.0 + 9.0, what="assign(X, C) sq_dists")
        assert labels.dtype == np.int64

    def test_k1_centroid_is_the_mean(self) -> None:
        X = make_rng(11).standard_normal((50, 4))
        res = kmeans.kmeans(X, 1)
        # a mean of 50 values of size <= 3: a few ulps of 3, times the 50 terms summed
        assert_close(res.centroids, X.mean(axis=0, keepdims=True), magnitude=3.0, cond=50,
                     what="kmeans(X, 1).centroids")
        np.testing.assert_array_equal(res.labels, np.zeros(50))
        scale = float((X * X).sum(axis=1).max()) * 50
        assert_close(res.inertia, float(((X - X.mean(axis=0)) ** 2).sum()), magnitude=scale, what="kmeans(X, 1).inertia")

    @pytest.mark.edge_case
    @pytest.mark.parametrize("init", ["k-means++", "random"])
    def test_k_equals_n_gives_zero_inertia(self, init: str) -> None:
        X = make_rng(12).standard_normal((12, 3))
        res = kmeans.kmeans(X, 12, init=init, seed=3)
        assert_close(res.inertia, 0.0, magnitude=float((X * X).sum(axis=1).max()) * 12 * 4,
                     what="kmeans(X, n).inertia")
        assert sorted(res.labels.tolist()) == list(range(12))

    @pytest.mark.edge_case
    def test_empty_cluster_gives_no_nan(self) -> None:
        # The third centroid gets no point. Keeping its old centroid (standard Lloyd) or re-seeding it
        # at a data point are both accepted; a mean of no points (0 / 0 = NaN) is not.
        X = np.array([[0.0], [1.0], [2.0], [3.0]])
        with strict_numpy():
            res = kmeans.kmeans(X, 3, init=np.array([[0.0], [1.0], [100.0]]))
        assert np.isfinite(res.centroids).all(), f"an empty cluster's centroid is not finite: {res.centroids}"
        hist = np.asarray(res.inertia_history)
        assert np.isfinite(hist).all() and (hist[1:] <= hist[:-1] * (1 + 1e-12)).all(), f"inertia: {hist}"
        np.testing.assert_array_equal(res.labels, kmeans.assign(X, res.centroids)[0])
        # keeping the old centroid converges to {0, 1}, {2, 3} (inertia 1.0); a re-seed does better
        assert res.inertia <= 1.0 + 1e-12

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

    def test_kmeans_plus_plus_measures_the_nearest_centroid_chosen_so_far(self) -> None:
        # X = {0, 1, 10, 11}: after picks 0 then 10, D^2 to the nearest pick is [0, 1, 0, 1], so the third pick
        # is 1 or 11 with p = 1/2 each; measuring D to the last pick only (10) gives 1 with p = 81/82.
        X = np.array([[0.0], [1.0], [10.0], [11.0]])
        g = make_rng(15)
        picks = np.array([kmeans.kmeans_plus_plus_init(X, 3, g)[:, 0] for _ in range(3000)])  # (3000, 3)
        third = picks[(picks[:, 0] == 0.0) & (picks[:, 1] == 10.0), 2]  # about 3000 * 1/4 * 100/222 = 338 draws
        assert third.size > 200
        assert abs(np.mean(third == 1.0) - 0.5) <= 4 * np.sqrt(0.25 / third.size)

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

    # ---- input checks (contract: the exception type only) -------------------------------------

    @pytest.mark.contract
    @pytest.mark.parametrize("k", [0, 5])
    def test_k_out_of_range_raises(self, k: int) -> None:
        with pytest.raises(ValueError):
            kmeans.kmeans(np.zeros((4, 2)), k)

    @pytest.mark.contract
    @pytest.mark.parametrize("X", [np.zeros(4), np.array([[0.0], [np.nan], [1.0]]), np.array([[0.0], [np.inf], [1.0]])],
                             ids=["1-D", "nan", "inf"])
    def test_bad_X_raises(self, X: np.ndarray) -> None:
        with pytest.raises(ValueError):
            kmeans.kmeans(X, 2)

    @pytest.mark.contract
    @pytest.mark.parametrize("init", [np.zeros((3, 2)), np.zeros((2, 3)), "farthest"], ids=["rows", "width", "name"])
    def test_bad_init_raises(self, init: np.ndarray | str) -> None:
        with pytest.raises(ValueError):
            kmeans.kmeans(np.zeros((4, 2)), 2, init=init)  # type: ignore[arg-type]
