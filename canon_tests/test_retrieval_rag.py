"""Reference tests for the RAG pipeline (#46, ``retrieval/rag``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from canon_refs.retrieval import rag
from pytest_mlcanon.testing import assert_close, call_leaves_inputs_unchanged, returns_within, strict_numpy

pytestmark = pytest.mark.canon("retrieval/rag")

CORPUS = {
    "volcanoes": "Volcanoes form where magma rises through the crust. The Mauna Loa volcano in Hawaii is the "
                 "largest active volcano on Earth. Lava flows cool into basalt rock.",
    "bees": "Honey bees live in colonies ruled by a single queen. Worker bees collect nectar and pollen "
            "from flowers. A bee colony can hold sixty thousand workers in summer.",
    "trains": "The first public steam railway opened in 1825 between Stockton and Darlington. Steam "
              "locomotives burn coal to boil water. Modern high speed trains run on electricity.",
    "coffee": "Coffee beans are the roasted seeds of the coffea plant. Ethiopia is the birthplace of coffee, "
              "and Brazil grows the most coffee today. Espresso is brewed under pressure.",
    "chess": "Chess is played on a board of sixty four squares. The bishop moves diagonally and the rook "
             "moves in straight lines. Checkmate ends the game when the king cannot escape.",
}
QUESTIONS = {
    "Which volcano is the largest active volcano on Earth?": "volcanoes",
    "How many workers can a bee colony hold?": "bees",
    "When did the first public steam railway open?": "trains",
    "Which country is the birthplace of coffee?": "coffee",
    "How does the bishop move in chess?": "chess",
}


def _pipeline(**kwargs: object) -> rag.RAGPipeline:
    pipe = rag.RAGPipeline(**kwargs)
    pipe.add_documents(CORPUS)
    return pipe


# ---- tokenize / chunk_text --------------------------------------------------------------------


def test_tokenize() -> None:
    assert rag.tokenize("Hello, World! It's 42x--fast.") == ["hello", "world", "it", "s", "42x", "fast"]
    assert rag.tokenize("?!...") == []


def test_chunk_250_words_size_100_overlap_20() -> None:
    words = [f"w{i}" for i in range(250)]
    chunks = rag.chunk_text(" ".join(words), chunk_size=100, overlap=20)
    assert len(chunks) == 3
    assert [len(c.split()) for c in chunks] == [100, 100, 90]
    assert [c.split()[0] for c in chunks] == ["w0", "w80", "w160"]
    assert chunks[2] == " ".join(words[160:])
    assert chunks[1].split()[:20] == chunks[0].split()[80:]


@pytest.mark.edge_case
def test_chunk_edges() -> None:
    assert rag.chunk_text("") == [] and rag.chunk_text("   \n ") == []
    assert rag.chunk_text("one  two\n\tthree", chunk_size=5, overlap=1) == ["one two three"]
    exact = " ".join(str(i) for i in range(100))
    assert rag.chunk_text(exact) == [exact]  # the first window already reaches the end
    assert len(rag.chunk_text(" ".join(str(i) for i in range(180)))) == 2  # 0 and 80; 80 + 100 = 180
    assert rag.chunk_text("a b c d e", chunk_size=2, overlap=0) == ["a b", "c d", "e"]
    assert rag.chunk_text("a b c d e", chunk_size=3, overlap=2) == ["a b c", "b c d", "c d e"]


# ---- HashingEmbedder --------------------------------------------------------------------------


def test_embedder_shapes_norms_and_determinism() -> None:
    texts = ["The cat sat on the mat.", "Dogs bark!", "", "...", "cat"]
    a = call_leaves_inputs_unchanged(rag.HashingEmbedder(dim=64).embed, texts)
    assert texts == ["The cat sat on the mat.", "Dogs bark!", "", "...", "cat"], "embed modified its input list"
    b = rag.HashingEmbedder(dim=64).embed(texts)
    assert a.shape == (5, 64) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    norms = np.linalg.norm(a.astype(np.float64), axis=1)
    assert_close(norms[[0, 1, 4]], np.ones(3), dtype="float32", what="norms of the embedded rows")
    assert (a[2] == 0).all() and (a[3] == 0).all()


def test_feature_hashing_term_frequency_and_sign() -> None:
    emb = rag.HashingEmbedder(dim=4096)
    one, twice, case = emb.embed(["cat", "cat cat", "CAT!"])
    assert np.count_nonzero(one) == 1
    assert_close(abs(float(one.sum())), 1.0, dtype="float32", what="the one-word embedding's entry")
    np.testing.assert_array_equal(one, twice)
    np.testing.assert_array_equal(one, case)
    # term frequency: "cat cat dog" weights cat twice as much as dog (no collision at dim 4096 here)
    mixed = emb.embed(["cat cat dog"])[0]
    dog = emb.embed(["dog"])[0]
    assert_close(float(mixed @ one), 2 / np.sqrt(5), dtype="float32", what="cosine(cat cat dog, cat)")
    assert_close(float(mixed @ dog), 1 / np.sqrt(5), dtype="float32", what="cosine(cat cat dog, dog)")
    # the sign bit: over many single words both signs occur, about half each
    signs = emb.embed([f"word{i}" for i in range(400)]).sum(axis=1)
    assert set(np.sign(signs).tolist()) == {-1.0, 1.0}
    assert 120 <= int((signs > 0).sum()) <= 280  # Binomial(400, 1/2): mean 200, sd 10, +-8 sd


def test_ngram_range_adds_word_order() -> None:
    uni = rag.HashingEmbedder(dim=1024)
    bi = rag.HashingEmbedder(dim=1024, ngram_range=(1, 2))
    a, b = uni.embed(["new york city", "city york new"])
    np.testing.assert_array_equal(a, b)
    c, d = bi.embed(["new york city", "city york new"])
    assert not np.array_equal(c, d)
    assert np.count_nonzero(c) > np.count_nonzero(a)


def test_embedding_stable_across_processes_with_different_hash_seeds() -> None:
    script = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("rag_under_test", {rag.__file__!r})
        mod = importlib.util.module_from_spec(spec)
        sys.modules["rag_under_test"] = mod
        spec.loader.exec_module(mod)
        vec = mod.HashingEmbedder(dim=256, ngram_range=(1, 2)).embed(["stable hashing across processes"])
        sys.stdout.write(vec.tobytes().hex())
    """)
    outputs = []
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout)
    here = rag.HashingEmbedder(dim=256, ngram_range=(1, 2)).embed(["stable hashing across processes"])
    assert outputs[0] == outputs[1] == here.tobytes().hex(), "bucket/sign must not depend on hash()"


# ---- VectorStore ------------------------------------------------------------------------------


def test_store_search_scores_descending_and_k_bounds() -> None:
    store = rag.VectorStore(rag.HashingEmbedder())
    assert store.search("anything", 3) == []
    chunks = [rag.Chunk(doc, 0, text) for doc, text in CORPUS.items()]
    store.add(chunks)
    hits = store.search("steam locomotives burn coal", 3)
    assert len(hits) == 3
    assert hits[0][0] == chunks[2]
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True) and all(isinstance(s, float) for s in scores)
    every = store.search("steam", 50)
    assert len(every) == 5 and {c for c, _ in every} == set(chunks)
    q = rag.HashingEmbedder().embed(["steam locomotives burn coal"])[0]
    e = rag.HashingEmbedder().embed([chunks[2].text])[0]
    assert_close(hits[0][1], float(q.astype(np.float64) @ e.astype(np.float64)), dtype="float32",
                 what="VectorStore.search score vs the cosine of the two embeddings")


@pytest.mark.edge_case
def test_ties_keep_insertion_order() -> None:
    store = rag.VectorStore(rag.HashingEmbedder())
    twins = [rag.Chunk("b", 0, "same words here"), rag.Chunk("a", 0, "same words here"),
             rag.Chunk("c", 0, "other text")]
    store.add(twins)
    hits = store.search("same words", 2)
    assert [c.doc_id for c, _ in hits] == ["b", "a"] and hits[0][1] == hits[1][1]


@pytest.mark.numerics_probe
def test_token_free_query_scores_zero_not_nan() -> None:
    pipe = _pipeline()
    with strict_numpy():
        hits = pipe.retrieve("?!... ---", k=5)
    assert len(hits) == 5
    assert all(s == 0.0 for _, s in hits)
    with strict_numpy():
        huge = rag.HashingEmbedder().embed([" ".join(["spam"] * 100_000)])
    assert np.isfinite(huge).all()
    assert_close(float(np.linalg.norm(huge.astype(np.float64))), 1.0, dtype="float32",
                 what="norm of the embedding of 100 000 repeated words")


# ---- RAGPipeline ------------------------------------------------------------------------------


def test_each_question_retrieves_its_document_first() -> None:
    pipe = _pipeline(k=3)
    for question, doc_id in QUESTIONS.items():
        hits = pipe.retrieve(question)
        assert len(hits) == 3
        assert hits[0][0].doc_id == doc_id, f"{question!r} retrieved {[c.doc_id for c, _ in hits]}"
        scores = [s for _, s in hits]
        assert scores == sorted(scores, reverse=True)


def test_add_documents_counts_chunks() -> None:
    pipe = rag.RAGPipeline(chunk_size=10, overlap=2)
    added = call_leaves_inputs_unchanged(pipe.add_documents, dict(CORPUS))
    expected = sum(len(rag.chunk_text(t, 10, 2)) for t in CORPUS.values())
    assert added == expected > len(CORPUS)
    hits = pipe.retrieve("bishop", k=100)
    assert len(hits) == expected
    assert {(c.doc_id, c.chunk_index) for c, _ in hits} == {
        (d, i) for d, t in CORPUS.items() for i in range(len(rag.chunk_text(t, 10, 2)))}


@pytest.mark.contract
def test_add_documents_rejects_duplicates_before_adding() -> None:
    pipe = _pipeline(chunk_size=10, overlap=2)
    with pytest.raises(ValueError):
        pipe.add_documents({"new_doc": "fresh text about kites", "chess": "again"})
    assert all(c.doc_id != "new_doc" for c, _ in pipe.retrieve("kites", k=100)), "validate before adding"


def test_build_prompt_lists_chunks_in_rank_order() -> None:
    pipe = _pipeline(k=3)
    question = "How does the bishop move in chess?"
    retrieved = pipe.retrieve(question)
    prompt = pipe.build_prompt(question, retrieved)
    assert question in prompt
    positions = []
    for n, (chunk, _) in enumerate(retrieved, start=1):
        assert chunk.text in prompt and chunk.doc_id in prompt
        assert f"[{n}]" in prompt
        positions.append(prompt.index(f"[{n}]"))
        assert prompt.index(chunk.text) > positions[-1]
    assert positions == sorted(positions)
    assert "[4]" not in prompt


def test_answer_with_identity_generator_returns_prompt() -> None:
    pipe = _pipeline(k=2, generate_fn=lambda p: p)
    question = "When did the first public steam railway open?"
    out = pipe.answer(question)
    assert set(out) >= {"answer", "prompt", "sources", "scores"}
    assert out["answer"] == out["prompt"]
    retrieved = pipe.retrieve(question)
    assert out["prompt"] == pipe.build_prompt(question, retrieved)
    assert out["sources"] == [c.doc_id for c, _ in retrieved] and out["sources"][0] == "trains"
    assert_close(out["scores"], [s for _, s in retrieved], dtype="float32", what="answer(...)['scores'] vs retrieve")


def test_default_generator_is_extractive() -> None:
    # the stub states only that the default answer contains the best-matching retrieved sentence, so a
    # citation marker or other decoration around it is accepted
    pipe = _pipeline(k=2)
    out = pipe.answer("Which country is the birthplace of coffee?")
    assert isinstance(out["answer"], str)
    assert "Ethiopia is the birthplace of coffee" in out["answer"]


@pytest.mark.edge_case
def test_empty_pipeline() -> None:
    pipe = rag.RAGPipeline()
    assert pipe.add_documents({}) == 0
    assert pipe.retrieve("anything") == []
    out = pipe.answer("anything")
    assert out["sources"] == [] and out["scores"] == [] and isinstance(out["answer"], str)


# ---- errors -----------------------------------------------------------------------------------


@pytest.mark.contract
@pytest.mark.parametrize(("chunk_size", "overlap"), [(0, 0), (5, -1), (5, 5), (5, 7)])
def test_chunk_text_rejects_bad_sizes(chunk_size: int, overlap: int) -> None:
    # without the check a window step of chunk_size - overlap <= 0 never ends: a failed check, not a hang
    # (one word, so such a loop appends the same string object and fills memory slowly)
    with pytest.raises(ValueError), returns_within(0.5, f"chunk_text(chunk_size={chunk_size}, overlap={overlap})"):
        rag.chunk_text("a", chunk_size=chunk_size, overlap=overlap)


@pytest.mark.contract
def test_embedder_rejects_a_non_positive_dim() -> None:
    with pytest.raises(ValueError):
        rag.HashingEmbedder(dim=0)


@pytest.mark.contract
@pytest.mark.parametrize("settings", [{"k": 0}, {"chunk_size": 0}, {"chunk_size": 10, "overlap": 10}])
def test_pipeline_rejects_bad_settings(settings: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        rag.RAGPipeline(**settings)


@pytest.mark.contract
def test_search_and_retrieve_reject_k_0() -> None:
    with pytest.raises(ValueError):
        rag.VectorStore(rag.HashingEmbedder()).search("q", 0)
    with pytest.raises(ValueError):
        _pipeline().retrieve("q", k=0)
