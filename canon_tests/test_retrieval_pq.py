"""Reference tests for product quantization with ADC (#45 ``retrieval/ann``, module ``pq``)."""

from __future__ import annotations

import numpy as np
import pytest

from canon_refs.retrieval import pq
from canon_tests._retrieval_data import distance_scale, exact_neighbours, gaussian_mixture
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged
from pytest_mlcanon.testing import rng as make_rng

pytestmark = pytest.mark.canon("retrieval/ann")


@pytest.fixture(scope="module")
def trained() -> tuple[pq.ProductQuantizer, np.ndarray, np.ndarray, np.ndarray]:
    """m = 8, nbits = 8 on the spec's mixture, trained on the first 1280 vectors (5 per centroid, to
    keep eight 256-centroid k-means fits short; training on 2560 or 5000 gives no better recall on
    seeds 0-4) and encoding all 5000."""
    database, queries = gaussian_mixture()
    quantizer = pq.ProductQuantizer(32, 8, nbits=8, seed=0)
    quantizer.train(database[:1280])
    return quantizer, database, queries, quantizer.encode(database)


def test_codes_are_uint8_n_by_m(trained) -> None:
    quantizer, database, _, codes = trained
    assert codes.dtype == np.uint8 and codes.shape == (5000, 8)
    assert codes.max() > 127, "256 centroids per subspace: codes above 127 must survive"
    assert quantizer.codebooks.shape == (8, 256, 4)
    assert len(np.unique(codes[:, 0])) > 200


def test_encode_picks_the_nearest_sub_centroid(trained) -> None:
    quantizer, database, _, codes = trained
    X = database[:200].astype(np.float64).reshape(200, 8, 4)
    books = quantizer.codebooks.astype(np.float64)
    dists = np.sum((X[:, :, None, :] - books[None]) ** 2, axis=3)   # (200, 8, 256)
    chosen = np.take_along_axis(dists, codes[:200, :, None].astype(np.int64), axis=2)[..., 0]
    # a float32 distance may pick a sub-centroid within float32 rounding of the nearest one
    assert_close(chosen, dists.min(axis=2), dtype="float32", magnitude=distance_scale(X.reshape(-1, 4), books.reshape(-1, 4)),
                 what="distance to the encoded sub-centroid vs the nearest one")


def test_decode_concatenates_sub_centroids(trained) -> None:
    quantizer, database, _, codes = trained
    rec = quantizer.decode(codes[:50])
    assert rec.dtype == np.float32 and rec.shape == (50, 32)
    for j in (0, 3, 7):
        np.testing.assert_array_equal(rec[:, 4 * j : 4 * j + 4], quantizer.codebooks[j][codes[:50, j]])
    mse = float(np.mean((quantizer.decode(codes) - database) ** 2))
    assert mse < 0.5 * float(np.var(database))


def test_distance_tables(trained) -> None:
    quantizer, _, queries, _ = trained
    q = np.array(queries[0])
    table = call_leaves_inputs_unchanged(quantizer.distance_tables, q)
    assert table.shape == (8, 256) and table.dtype == np.float32
    want = np.sum((q.reshape(8, 1, 4).astype(np.float64) - quantizer.codebooks) ** 2, axis=2)
    assert_close(table, want, dtype="float32", magnitude=distance_scale(quantizer.codebooks.reshape(-1, 4), q.reshape(8, 4)),
                 what="distance_tables(q)")


def test_adc_distance_equals_distance_to_decoded(trained) -> None:
    quantizer, _, queries, codes = trained
    D, I = call_leaves_inputs_unchanged(quantizer.adc_search, np.array(queries), codes.copy(), 10)
    assert D.shape == I.shape == (100, 10) and D.dtype == np.float32 and I.dtype == np.int64
    assert (np.diff(D, axis=1) >= 0).all()
    books = quantizer.codebooks.astype(np.float64)
    rec = np.concatenate([books[j][codes[:, j]] for j in range(8)], axis=1)  # trusted decode
    direct = np.sum((rec[I] - queries[:, None, :].astype(np.float64)) ** 2, axis=2)
    # a float32 sum of 8 table entries, each exact to a few ulps of its sub-distance's terms
    scale = distance_scale(rec, queries)
    assert_close(D, direct, dtype="float32", magnitude=scale, cond=8, what="adc_search distances")
    # and the returned rows are the k smallest ADC distances over the whole database
    all_adc = np.sum((rec[None, :, :] - queries[:5, None, :].astype(np.float64)) ** 2, axis=2)
    assert_close(D[:5], np.sort(all_adc, axis=1)[:, :10], dtype="float32", magnitude=scale, cond=8,
                 what="adc_search distances vs the 10 smallest over the database")


def test_true_nearest_neighbour_in_adc_top10(trained) -> None:
    # seeds 0-4 of the fixture: 0.88, 0.94, 0.92, 0.89, 0.89
    _, database, queries, codes = trained
    quantizer = trained[0]
    _, nn = exact_neighbours(database, queries, 1)
    _, I = quantizer.adc_search(queries, codes, 10)
    hit = np.mean([nn[i, 0] in I[i] for i in range(len(queries))])
    assert hit >= 0.8, f"true nearest neighbour in the ADC top-10 for {hit:.0%} of queries"


def test_reconstruction_mse_decreases_with_m() -> None:
    # nbits = 4 keeps the three trainings fast; on seeds 0-4 the MSE falls 6.5-6.7 -> 4.9-5.1 -> 2.9-3.0
    database, _ = gaussian_mixture()
    mses = []
    for m in (2, 4, 8):
        quantizer = pq.ProductQuantizer(32, m, nbits=4, seed=1)
        quantizer.train(database)
        codes = quantizer.encode(database)
        assert codes.dtype == np.uint8 and codes.max() < 16
        mses.append(float(np.mean((quantizer.decode(codes) - database) ** 2)))
    assert mses[0] > mses[1] > mses[2], mses


def test_same_seed_same_codebooks() -> None:
    X = make_rng(1).standard_normal((300, 8))
    a, b = pq.ProductQuantizer(8, 2, nbits=5, seed=3), pq.ProductQuantizer(8, 2, nbits=5, seed=3)
    a.train(X)
    b.train(X)
    np.testing.assert_array_equal(a.codebooks, b.codebooks)
    np.testing.assert_array_equal(a.encode(X), b.encode(X))


@pytest.mark.edge_case
def test_k_larger_than_n_pads(trained) -> None:
    quantizer, _, queries, codes = trained
    D, I = quantizer.adc_search(queries[:2], codes[:3], 5)
    assert I.shape == (2, 5) and (I[:, 3:] == -1).all() and np.isinf(D[:, 3:]).all()
    assert sorted(I[0, :3].tolist()) == [0, 1, 2]


@pytest.mark.edge_case
def test_one_bit_codes() -> None:
    X = make_rng(2).standard_normal((40, 6))
    quantizer = pq.ProductQuantizer(6, 3, nbits=1, seed=0)
    quantizer.train(X)
    codes = quantizer.encode(X)
    assert codes.dtype == np.uint8 and set(np.unique(codes).tolist()) <= {0, 1}
    assert quantizer.codebooks.shape == (3, 2, 2)


@pytest.mark.contract
def test_errors() -> None:
    X = make_rng(3).standard_normal((300, 8))
    with pytest.raises(ValueError):
        pq.ProductQuantizer(10, 3)
    for bad in (0, 9):
        with pytest.raises(ValueError):
            pq.ProductQuantizer(8, 2, nbits=bad)
    quantizer = pq.ProductQuantizer(8, 2, nbits=8)
    with pytest.raises(RuntimeError):
        quantizer.encode(X)
    with pytest.raises(RuntimeError):
        quantizer.adc_search(X[:2], np.zeros((5, 2), np.uint8), 3)
    with pytest.raises(ValueError):
        quantizer.train(X[:100])
    with pytest.raises(ValueError):
        quantizer.train(make_rng(4).standard_normal((300, 6)))
    small = pq.ProductQuantizer(8, 2, nbits=3)
    small.train(X)
    with pytest.raises(ValueError):
        small.encode(np.zeros((2, 7)))
    with pytest.raises(ValueError):
        small.adc_search(X[:2], small.encode(X), 0)
    with pytest.raises(ValueError):
        small.adc_search(np.zeros((2, 7)), small.encode(X), 3)
    with pytest.raises(ValueError):
        small.adc_search(X[:2], np.zeros((5, 3), np.uint8), 3)
