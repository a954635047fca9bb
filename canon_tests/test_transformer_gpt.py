"""Reference tests for #31 (tiny GPT) and #32 (generation: greedy, temperature, top-k, top-p).

``TestGeneration`` drives ``generate`` with the toy causal LM of ``canon_tests/_toy_lm.py`` (and two
stubs of its own), so #32 does not depend on #31; GPT variants of its ``generate`` checks belong here
once #31 lands.
"""

from __future__ import annotations

import pytest
import torch

from canon_refs.transformer import generation
from canon_tests._toy_lm import ToyCausalLM
from pytest_mlcanon.testing import randn


class TestGeneration:
    pytestmark = pytest.mark.canon("transformer/generation")

    PROBS = [0.5, 0.25, 0.15, 0.1]
    N_DRAWS = 20_000

    class CountingLM(torch.nn.Module):
        """Stub LM whose greedy continuation of token ``t`` is ``(t + 1) % V``."""

        def __init__(self, vocab_size: int = 8) -> None:
            super().__init__()
            self.vocab_size = vocab_size

        def forward(self, idx, targets=None, **kwargs):
            logits = 10.0 * torch.nn.functional.one_hot((idx + 1) % self.vocab_size, self.vocab_size).float()
            return logits, None

    class RecordingLM(ToyCausalLM):
        """The toy LM, logging (input length, cache given) of every forward call."""

        def __init__(self, **kwargs) -> None:
            super().__init__(**kwargs)
            self.calls: list[tuple[int, bool]] = []

        def forward(self, idx, targets=None, **kwargs):
            self.calls.append((idx.shape[1], kwargs.get("kv_caches") is not None))
            return super().forward(idx, targets, **kwargs)

    @staticmethod
    def kept(filtered: torch.Tensor) -> list[set[int]]:
        """Indices a filter kept, row by row (removed entries are -inf or finfo.min)."""
        floor = torch.finfo(filtered.dtype).min
        return [set(torch.nonzero(row > floor).flatten().tolist()) for row in filtered]

    @classmethod
    def prob_logits(cls, order: list[int] | None = None) -> torch.Tensor:
        probs = torch.tensor(cls.PROBS, dtype=torch.float64)
        if order is not None:
            probs = probs[order]
        return probs.log()[None]

    @classmethod
    def frequencies(cls, logits: torch.Tensor, seed: int = 0, **kwargs) -> torch.Tensor:
        many = logits.expand(cls.N_DRAWS, logits.shape[-1])
        ids = generation.sample_next_token(many, generator=torch.Generator().manual_seed(seed), **kwargs)
        assert ids.shape == (cls.N_DRAWS,) and ids.dtype == torch.long
        return torch.bincount(ids, minlength=logits.shape[-1]).double() / cls.N_DRAWS

    @classmethod
    def assert_matches_distribution(cls, freq: torch.Tensor, expected: torch.Tensor) -> None:
        se = torch.sqrt(expected * (1 - expected) / cls.N_DRAWS)
        bad = (freq - expected).abs() > 4 * se + 1e-12
        assert not bad.any(), f"frequencies {freq.tolist()} vs expected {expected.tolist()} (4 s.e. = {(4 * se).tolist()})"

    # --- greedy and the filters ------------------------------------------------------------------------

    def test_greedy_equals_argmax(self):
        logits = randn(6, 17, seed=1)
        got = generation.sample_next_token(logits, greedy=True)
        assert got.dtype == torch.long and got.shape == (6,)
        assert torch.equal(got, logits.argmax(dim=-1))

    @pytest.mark.parametrize("temperature", [0.05, 1.0, 10.0])
    def test_top_k_one_equals_greedy_at_any_temperature(self, temperature):
        logits = randn(32, 50, seed=2)
        gen = torch.Generator().manual_seed(3)
        got = generation.sample_next_token(logits, temperature=temperature, top_k=1, generator=gen)
        assert torch.equal(got, logits.argmax(dim=-1))

    @pytest.mark.parametrize(("p", "expected"), [(0.4, {0}), (0.6, {0, 1}), (0.8, {0, 1, 2}), (1.0, {0, 1, 2, 3})])
    def test_top_p_sets(self, p, expected):
        filtered = generation.top_p_filter(self.prob_logits(), p)
        assert filtered.shape == (1, 4)
        assert self.kept(filtered) == [expected]
        kept_idx = sorted(expected)
        assert torch.equal(filtered[0, kept_idx], self.prob_logits()[0, kept_idx])
        # the same sets when the vocabulary is not already sorted
        order = [2, 0, 3, 1]
        shuffled = generation.top_p_filter(self.prob_logits(order), p)
        assert self.kept(shuffled) == [{order.index(i) for i in expected}]

    def test_top_p_rows_are_independent(self):
        logits = torch.cat([self.prob_logits(), self.prob_logits([3, 2, 1, 0])], dim=0).float()
        assert self.kept(generation.top_p_filter(logits, 0.6)) == [{0, 1}, {3, 2}]

    def test_top_k_filter_keeps_ties(self):
        logits = torch.tensor([[3.0, 1.0, 3.0, 2.0], [0.5, 4.0, -1.0, 2.0]])
        filtered = generation.top_k_filter(logits, 1)
        assert self.kept(filtered) == [{0, 2}, {1}]
        assert self.kept(generation.top_k_filter(logits, 2)) == [{0, 2}, {1, 3}]
        assert torch.equal(generation.top_k_filter(logits, 4), logits)
        assert torch.equal(generation.top_k_filter(logits, 9), logits)
        probs = torch.softmax(generation.top_k_filter(logits, 2), dim=-1)
        assert float(probs[0, 1]) == 0.0 and float(probs[1, 2]) == 0.0
        assert filtered.dtype == logits.dtype and torch.equal(filtered[0, [0, 2]], logits[0, [0, 2]])

    # --- sampling distributions ------------------------------------------------------------------------

    def test_draws_match_softmax_and_entropy_grows_with_temperature(self):
        logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]], dtype=torch.float64)
        entropies = []
        for temperature in (0.5, 1.0, 2.0):
            freq = self.frequencies(logits, temperature=temperature)
            self.assert_matches_distribution(freq, torch.softmax(logits[0] / temperature, dim=-1))
            nz = freq[freq > 0]
            entropies.append(float(-(nz * nz.log()).sum()))
        assert entropies[0] < entropies[1] < entropies[2]

    def test_top_k_and_top_p_renormalise(self):
        logits = self.prob_logits()
        probs = torch.tensor(self.PROBS, dtype=torch.float64)
        freq = self.frequencies(logits, top_k=2)
        self.assert_matches_distribution(freq, torch.tensor([2 / 3, 1 / 3, 0.0, 0.0], dtype=torch.float64))
        freq = self.frequencies(logits, top_p=0.8)
        self.assert_matches_distribution(freq, torch.cat([probs[:3] / 0.9, torch.zeros(1, dtype=torch.float64)]))

    def test_pipeline_order_temperature_then_top_k_then_top_p(self):
        logits = self.prob_logits()
        # temperature 0.5 first: tempered mass of token 0 is 0.72 >= 0.6, so top_p keeps only token 0
        freq = self.frequencies(logits, temperature=0.5, top_p=0.6)
        assert freq.tolist() == [1.0, 0.0, 0.0, 0.0]
        # T = 2 -> p ∝ sqrt(probs); top_k = 3 keeps {0, 1, 2}; then top_p = 0.7 keeps {0, 1}
        tempered = torch.tensor(self.PROBS, dtype=torch.float64).sqrt()
        expected = torch.cat([tempered[:2] / tempered[:2].sum(), torch.zeros(2, dtype=torch.float64)])
        freq = self.frequencies(logits, temperature=2.0, top_k=3, top_p=0.7)
        self.assert_matches_distribution(freq, expected)

    def test_positional_order_matches_capstone(self):
        logits = randn(4, 9, seed=5)
        by_position = generation.sample_next_token(logits, False, 0.7, 3, torch.Generator().manual_seed(9))
        by_name = generation.sample_next_token(
            logits, greedy=False, temperature=0.7, top_k=3, generator=torch.Generator().manual_seed(9)
        )
        assert torch.equal(by_position, by_name)

    # --- numerics ---------------------------------------------------------------------------------------

    @pytest.mark.numerics_probe
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_extreme_logits(self, dtype):
        logits = torch.tensor([[1e4, -1e4, 0.0, -1e4], [-1e4, -1e4, 1e4, 1e4]], dtype=dtype)
        gen = torch.Generator().manual_seed(0)
        for kwargs in ({}, {"temperature": 0.5}, {"top_k": 2}, {"top_p": 0.9}, {"greedy": True}):
            ids = generation.sample_next_token(logits, generator=gen, **kwargs)
            assert ids.dtype == torch.long
            assert int(ids[0]) == 0 and int(ids[1]) in (2, 3)
        for p in (0.3, 0.99):
            assert self.kept(generation.top_p_filter(logits, p))[0] == {0}

    @pytest.mark.numerics_probe
    def test_fp16_logits(self):
        logits = (4.0 * randn(64, 50, seed=6)).half()
        gen = torch.Generator().manual_seed(1)
        for kwargs in ({}, {"temperature": 0.3}, {"top_k": 5}, {"top_p": 0.9}, {"top_k": 10, "top_p": 0.5}):
            ids = generation.sample_next_token(logits, generator=gen, **kwargs)
            assert ids.dtype == torch.long and ids.shape == (64,)
            assert bool(((ids >= 0) & (ids < 50)).all())
        top1 = generation.sample_next_token(logits, top_k=1, generator=gen)
        assert torch.equal(top1, logits.float().argmax(dim=-1))
        filtered = generation.top_p_filter(logits, 0.9)
        assert filtered.dtype == torch.float16 and not torch.isnan(filtered).any()

    # --- generate ---------------------------------------------------------------------------------------

    def test_prompt_is_kept_as_prefix(self):
        model = ToyCausalLM(seed=1)
        prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
        out = generation.generate(model, prompt, 5, generator=torch.Generator().manual_seed(0))
        assert out.shape == (2, 8) and out.dtype == torch.long
        assert torch.equal(out[:, :3], prompt)
        assert bool(((out >= 0) & (out < model.config.vocab_size)).all())

    def test_same_generator_same_output(self):
        model = ToyCausalLM(seed=2)
        prompt = torch.tensor([[7, 1], [3, 3], [0, 9]])
        runs = [
            generation.generate(model, prompt, 6, temperature=1.5, top_k=6, top_p=0.95, generator=torch.Generator().manual_seed(4))
            for _ in range(2)
        ]
        assert torch.equal(runs[0], runs[1])

    def test_greedy_is_the_argmax_chain(self):
        model = self.CountingLM(vocab_size=8)
        out = generation.generate(model, torch.tensor([[2], [6]]), 4, greedy=True)
        assert out.tolist() == [[2, 3, 4, 5, 6], [6, 7, 0, 1, 2]]

    def test_greedy_with_and_without_cache(self):
        prompt = torch.tensor([[1, 5, 2, 9], [3, 3, 8, 0]])
        plain_model = self.RecordingLM(seed=3, max_seq_len=16)
        cached_model = self.RecordingLM(seed=3, max_seq_len=16)
        plain = generation.generate(plain_model, prompt, 8, greedy=True)
        cached = generation.generate(cached_model, prompt, 8, greedy=True, use_cache=True)
        assert torch.equal(plain, cached)
        # the cache is really used: one prefill of the prompt, then one token per step
        assert cached_model.calls == [(4, True)] + [(1, True)] * 7
        assert all(not used for _, used in plain_model.calls)

    def test_eos_padding(self):
        model = self.CountingLM(vocab_size=8)
        out = generation.generate(model, torch.tensor([[2], [4], [0]]), 5, greedy=True, eos_id=5)
        assert out.tolist() == [[2, 3, 4, 5, 5, 5], [4, 5, 5, 5, 5, 5], [0, 1, 2, 3, 4, 5]]

    def test_eos_padding_when_sampling(self):
        model = ToyCausalLM(seed=4)
        out = generation.generate(model, torch.tensor([[1, 2]] * 16), 10, eos_id=3, generator=torch.Generator().manual_seed(2))
        new = out[:, 2:]
        for row in new.tolist():
            if 3 in row:
                first = row.index(3)
                assert row[first:] == [3] * (len(row) - first)
        assert (new == 3).any(), "the test needs at least one row that emitted EOS"

    def test_context_is_cropped_without_cache(self):
        model = ToyCausalLM(seed=5, max_seq_len=8)
        prompt = torch.randint(0, 12, (2, 12), generator=torch.Generator().manual_seed(0))
        out = generation.generate(model, prompt, 3, greedy=True)
        assert out.shape == (2, 15) and torch.equal(out[:, :12], prompt)
        ids = prompt
        for _ in range(3):
            nxt = model(ids[:, -8:])[0][:, -1].argmax(dim=-1)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
        assert torch.equal(out, ids)

    @pytest.mark.edge_case
    def test_zero_new_tokens_and_single_token_prompt(self):
        model = ToyCausalLM(seed=6)
        prompt = torch.tensor([[4]])
        assert torch.equal(generation.generate(model, prompt, 0), prompt)
        out = generation.generate(model, prompt, 3, greedy=True, use_cache=True)
        assert out.shape == (1, 4) and int(out[0, 0]) == 4

    @pytest.mark.edge_case
    def test_batch_of_one_row_of_logits(self):
        logits = torch.tensor([[0.0, 5.0, 1.0]])
        assert generation.sample_next_token(logits, greedy=True).tolist() == [1]
        assert generation.sample_next_token(logits, top_k=1, generator=torch.Generator().manual_seed(0)).tolist() == [1]

    # --- errors -----------------------------------------------------------------------------------------

    def test_sampling_errors(self):
        logits = randn(2, 5, seed=7)
        with pytest.raises(ValueError, match="logits"):
            generation.sample_next_token(logits[0])
        with pytest.raises(ValueError, match="logits"):
            generation.top_k_filter(randn(2, 3, 5, seed=7), 2)
        with pytest.raises(ValueError, match="logits"):
            generation.top_p_filter(logits[0], 0.5)
        for temperature in (0.0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="temperature"):
                generation.sample_next_token(logits, temperature=temperature)
        assert generation.sample_next_token(logits, greedy=True, temperature=0.0).shape == (2,)
        with pytest.raises(ValueError, match="top_k"):
            generation.sample_next_token(logits, top_k=0)
        with pytest.raises(ValueError, match="k"):
            generation.top_k_filter(logits, 0)
        for p in (0.0, 1.5, -0.2, float("nan")):
            with pytest.raises(ValueError, match="top_p"):
                generation.sample_next_token(logits, top_p=p)
            with pytest.raises(ValueError, match="p"):
                generation.top_p_filter(logits, p)

    def test_generate_errors(self):
        model = self.RecordingLM(seed=8, max_seq_len=8)
        prompt = torch.tensor([[1, 2, 3, 4, 5, 6]])
        with pytest.raises(ValueError, match="max_new_tokens"):
            generation.generate(model, prompt, -1)
        with pytest.raises(ValueError, match="temperature"):
            generation.generate(model, prompt, 1, temperature=0.0)
        with pytest.raises(ValueError, match="top_p"):
            generation.generate(model, prompt, 1, top_p=2.0)
        with pytest.raises(ValueError, match="max_seq_len"):
            generation.generate(model, prompt, 3, use_cache=True)
        assert model.calls == [], "invalid arguments must be rejected before the first forward"
        assert generation.generate(model, prompt, 2, greedy=True, use_cache=True).shape == (1, 8)
        assert generation.generate(model, prompt, 3, greedy=True).shape == (1, 9)  # no cache: cropped
