"""Reference tests for canon #26 multi-head attention, #28 cross-attention and #33 the KV cache
(docs/contract.md #26, #28, #33; masks follow C10).

#26 and #28 use duck-typed stand-ins for the cache and RoPE (``_ConcatCache``, ``_ScaleRope`` below), so
they do not depend on #33/#34; the #33 tests use the real ``KVCache``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from canon_refs.transformer import attention, kv_cache, masks, multihead
from pytest_mlcanon.testing import (
    TOL,
    assert_close,
    call_leaves_inputs_unchanged,
    copy_linear,
    low_precision_dtype,
    randn,
)

B, T, D, H = 2, 5, 16, 4
#: float32 compositions of d = 16 projections, a softmax and an output projection: each output sums
#: up to 16 rounded products per stage, so they are compared at 16 ulps times a condition of d.
COND = float(D)


# ----------------------------------------------------------------------------- helpers


def _mha(d: int = D, n_heads: int = H, seed: int = 0, **kwargs) -> multihead.MultiHeadAttention:
    torch.manual_seed(seed)
    return multihead.MultiHeadAttention(d, n_heads, **kwargs)


def _torch_mha_like(ours: multihead.MultiHeadAttention, fused: bool = True, **kwargs) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` holding our weights: fused ``in_proj_weight`` or separate q/k/v weights."""
    ref = nn.MultiheadAttention(ours.q_proj.out_features, ours.n_heads, batch_first=True, dropout=0.0, **kwargs)
    with torch.no_grad():
        if fused:
            ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        else:
            ref.q_proj_weight.copy_(ours.q_proj.weight)
            ref.k_proj_weight.copy_(ours.k_proj.weight)
            ref.v_proj_weight.copy_(ours.v_proj.weight)
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    copy_linear(ref.out_proj, ours.out_proj.weight, ours.out_proj.bias)
    return ref.eval()


def _composed(m: multihead.MultiHeadAttention, x: torch.Tensor, context: torch.Tensor | None = None,
              mask: torch.Tensor | None = None, rope_scale=None) -> torch.Tensor:
    """MHA written out from #25 on the projections: (B, T_q, d) -> (B, T_q, d)."""
    src = x if context is None else context
    Bx, T_q, d = x.shape
    T_k = src.shape[1]
    d_h = d // m.n_heads
    q = m.q_proj(x).reshape(Bx, T_q, m.n_heads, d_h).transpose(1, 2)
    k = m.k_proj(src).reshape(Bx, T_k, m.n_heads, d_h).transpose(1, 2)
    v = m.v_proj(src).reshape(Bx, T_k, m.n_heads, d_h).transpose(1, 2)
    if rope_scale is not None:
        q, k = q * rope_scale, k * rope_scale
    heads = attention.scaled_dot_product_attention(q, k, v, mask)
    return m.out_proj(heads.transpose(1, 2).reshape(Bx, T_q, d))


class _ConcatCache:
    """Duck-typed stand-in for #33's ``KVCache``: ``length`` and ``update(k, v)``, by concatenation."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.updates = 0

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.updates += 1
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=2)
        return self.k, self.v


class _ScaleRope(nn.Module):
    """Duck-typed stand-in for #34's ``RotaryEmbedding``: scales x by ``1 + 0.1·position`` and records
    the positions it was given, so a test can see what reached it and what it was applied to."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    @staticmethod
    def factor(positions: torch.Tensor) -> torch.Tensor:
        f = 1.0 + 0.1 * positions.double()
        return f[:, None] if f.dim() == 1 else f[:, None, :, None]   # (T, 1) or (B, 1, T, 1)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(x.shape[2])
        self.seen.append(positions.clone())
        return x * self.factor(positions).to(x.dtype)


# ============================================================================= #26


class TestMultiHeadAttention:
    pytestmark = pytest.mark.canon("transformer/multihead")

    def test_attributes_and_projection_shapes(self):
        m = multihead.MultiHeadAttention(D, H)
        assert m.n_heads == H and m.head_dim == D // H and m.rope is None
        for proj in (m.q_proj, m.k_proj, m.v_proj, m.out_proj):
            assert isinstance(proj, nn.Linear) and proj.weight.shape == (D, D) and proj.bias is not None
            assert proj.weight.dtype == torch.float32
        m = multihead.MultiHeadAttention(D, H, d_context=6, bias=False)
        assert m.k_proj.weight.shape == (D, 6) and m.v_proj.weight.shape == (D, 6)
        assert m.q_proj.weight.shape == (D, D) and m.out_proj.bias is None

    @pytest.mark.parametrize("kind", ["none", "causal", "is_causal", "key_padding"])
    def test_matches_torch_multihead_attention(self, kind):
        m = _mha()
        ref = _torch_mha_like(m)
        x = randn(B, T, D, seed=1)
        kwargs, ref_kwargs = {}, {}
        if kind == "causal":
            kwargs["mask"] = masks.causal_mask(T)
            ref_kwargs["attn_mask"] = ~masks.causal_mask(T)            # torch: True = may NOT attend
        elif kind == "is_causal":
            kwargs["is_causal"] = True
            ref_kwargs["attn_mask"] = ~masks.causal_mask(T)
        elif kind == "key_padding":
            valid = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
            kwargs["mask"] = masks.key_padding_to_attention(valid)
            ref_kwargs["key_padding_mask"] = ~valid
        out, weights = m(x, return_weights=True, **kwargs)
        want, want_weights = ref(x, x, x, need_weights=True, **ref_kwargs)
        assert out.shape == (B, T, D) and weights.shape == (B, H, T, T)
        assert_close(out, want, cond=COND, what=f"MultiHeadAttention({kind}) vs nn.MultiheadAttention")
        assert_close(weights.mean(dim=1), want_weights, cond=COND, what=f"MultiHeadAttention({kind}) weights")

    def test_is_causal_future_tokens_do_not_change_past_outputs(self):
        m = _mha()
        x = randn(B, T, D, seed=1)
        out = m(x, is_causal=True)
        for t in range(T - 1):
            x2 = x.clone()
            x2[:, t + 1:] = randn(B, T - t - 1, D, seed=10 + t) * 3
            out2 = m(x2, is_causal=True)
            assert_close(out2[:, : t + 1], out[:, : t + 1], cond=COND, what=f"causal outputs before token {t + 1}")
            assert not torch.allclose(out2[:, t + 1:], out[:, t + 1:])

    def test_single_head_equals_attention_on_projections(self):
        m = _mha(n_heads=1)
        x = randn(B, T, D, seed=1)
        want = m.out_proj(attention.scaled_dot_product_attention(m.q_proj(x), m.k_proj(x), m.v_proj(x)))
        assert_close(m(x), want, cond=COND, what="MultiHeadAttention(n_heads=1)")

    def test_matches_attention_composition_with_mask(self):
        m = _mha()
        x = randn(B, T, D, seed=1)
        mask = torch.rand(B, 1, T, T, generator=torch.Generator().manual_seed(3)) > 0.4
        mask[..., 0] = True
        assert_close(m(x, mask=mask), _composed(m, x, mask=mask), cond=COND, what="MultiHeadAttention(mask)")

    def test_split_merge_round_trip_and_layout(self):
        m = _mha()
        x = randn(B, T, D, seed=2)
        heads = m.split_heads(x)
        assert heads.shape == (B, H, T, D // H)
        d_h = D // H
        for h in range(H):  # a split moves values without arithmetic: exact for every implementation
            assert torch.equal(heads[:, h], x[..., h * d_h:(h + 1) * d_h]), f"split_heads: head {h} holds other features"
        assert torch.equal(m.merge_heads(heads), x), "merge_heads(split_heads(x)) is not x"

    def test_token_permutation_equivariance(self):
        m = _mha()
        x = randn(B, T, D, seed=1)
        perm = torch.randperm(T, generator=torch.Generator().manual_seed(4))
        assert_close(m(x[:, perm]), m(x)[:, perm], cond=COND, what="MultiHeadAttention on permuted tokens")

    def test_gradcheck_float64(self):
        m = _mha(d=8, n_heads=2).double()
        x = randn(1, 3, 8, seed=1, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a: m(a, is_causal=True), (x,))
        ctx = randn(1, 4, 8, seed=2, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, c: m(a, c), (x, ctx))

    def test_mask_forms_agree(self):
        m = _mha()
        x = randn(B, T, D, seed=1)
        allow = torch.rand(B, T, T, generator=torch.Generator().manual_seed(5)) > 0.3
        allow[..., 0] = True
        want = _composed(m, x, mask=allow[:, None])
        assert_close(m(x, mask=allow), want, cond=COND, what="MultiHeadAttention((B, T_q, T_k) mask)")
        assert_close(m(x, mask=allow[:, None]), want, cond=COND, what="MultiHeadAttention((B, 1, T_q, T_k) mask)")
        assert_close(m(x, mask=allow[:, None].expand(B, H, T, T)), want, cond=COND,
                     what="MultiHeadAttention((B, H, T_q, T_k) mask)")
        assert_close(m(x, mask=masks.mask_to_bias(allow)), want, cond=COND, what="MultiHeadAttention(float bias)")
        # a float bias and is_causal combine without overflowing (finfo.min filled, never added twice)
        bias = masks.mask_to_bias(allow)
        both = m(x, mask=bias, is_causal=True)
        assert torch.isfinite(both).all()
        assert_close(both, _composed(m, x, mask=(allow & masks.causal_mask(T))[:, None]), cond=COND,
                     what="MultiHeadAttention(float bias, is_causal=True)")

    def test_return_weights_rows_sum_to_one(self):
        m = _mha()
        x = randn(B, T, D, seed=1)
        out, weights = m(x, is_causal=True, return_weights=True)
        assert_close(out, _composed(m, x, mask=masks.causal_mask(T)), cond=COND, what="MultiHeadAttention(is_causal)")
        assert_close(weights.sum(-1), torch.ones(B, H, T), cond=COND, what="attention weights.sum(-1)")
        assert torch.all(weights[..., ~masks.causal_mask(T)] == 0.0)

    def test_dropout_only_in_training(self):
        m = _mha(dropout=0.5)
        plain = _mha()
        x = randn(B, T, D, seed=1)
        m.eval()
        assert_close(m(x), _composed(plain, x), cond=COND, what="MultiHeadAttention(dropout=0.5) in eval mode")
        m.train()
        assert not torch.allclose(m(x), plain(x))

    def test_rope_is_applied_to_queries_and_keys_with_given_positions(self):
        rope = _ScaleRope()
        m = _mha(rope=rope)
        assert m.rope is rope
        x = randn(B, T, D, seed=1)
        positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
        out = m(x, positions=positions)
        assert all(torch.equal(p, positions) for p in rope.seen) and len(rope.seen) == 2
        want = _composed(m, x, rope_scale=_ScaleRope.factor(positions).float())
        assert_close(out, want, cond=COND, what="MultiHeadAttention(rope, positions)")

    def test_duck_typed_cache_offsets_causal_mask_and_positions(self):
        rope = _ScaleRope()
        m = _mha(rope=rope)
        x = randn(B, 7, D, seed=1)
        full = m(x, is_causal=True)
        rope.seen.clear()
        cache = _ConcatCache()
        steps = [m(x[:, :4], is_causal=True, kv_cache=cache)]
        steps += [m(x[:, t:t + 1], is_causal=True, kv_cache=cache) for t in range(4, 7)]
        assert_close(torch.cat(steps, dim=1), full, cond=COND, what="cached decoding (duck-typed cache) vs full forward")
        assert cache.length == 7
        assert torch.equal(rope.seen[0], torch.arange(4))
        assert [p.tolist() for p in rope.seen[2::2]] == [[4], [5], [6]]

    @pytest.mark.edge_case
    def test_batch_of_one_and_single_token(self):
        m = _mha()
        ref = _torch_mha_like(m)
        x = randn(1, 1, D, seed=1)
        out = m(x, is_causal=True)
        assert out.shape == (1, 1, D)
        assert_close(out, ref(x, x, x, need_weights=False)[0], cond=COND, what="MultiHeadAttention(one token)")
        # one token attends only to itself: the output is out_proj(v_proj(x))
        assert_close(out, m.out_proj(m.v_proj(x)), cond=COND, what="MultiHeadAttention(one token)")

    @pytest.mark.numerics_probe
    def test_fully_masked_query_gives_out_proj_bias(self):
        m = _mha()
        x = randn(B, T, D, seed=1, requires_grad=True)
        allow = masks.causal_padding_mask(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]))
        out = m(x, mask=allow)
        assert torch.isfinite(out).all()
        assert_close(out[0, :2], m.out_proj.bias.expand(2, D), what="fully masked queries (out_proj of zeros)")
        out.sum().backward()
        assert torch.isfinite(x.grad).all()

    def test_inputs_are_not_modified(self):
        m = _mha(d_context=6)
        x, ctx = randn(B, T, D, seed=1), randn(B, 3, 6, seed=2)
        call_leaves_inputs_unchanged(m, x, ctx, torch.ones(B, T, 3, dtype=torch.bool))
        call_leaves_inputs_unchanged(_mha(), x, mask=masks.mask_to_bias(masks.causal_mask(T)), is_causal=True)

    @pytest.mark.contract
    @pytest.mark.parametrize(
        "make",
        [
            lambda: multihead.MultiHeadAttention(10, 3),
            lambda: multihead.MultiHeadAttention(D, 0),
            lambda: multihead.MultiHeadAttention(D, H, dropout=1.0),
        ],
        ids=["n_heads_not_dividing", "n_heads_zero", "dropout_one"],
    )
    def test_invalid_constructor(self, make):
        with pytest.raises(ValueError):
            make()

    @pytest.mark.contract
    def test_invalid_forward_inputs(self):
        m = _mha(d_context=6)
        x = randn(B, T, D, seed=1)
        with pytest.raises(ValueError):
            m(randn(B, T, D + 1))
        with pytest.raises(ValueError):
            m(x, randn(B, 3, D))                                        # width must be d_context = 6
        with pytest.raises(ValueError):
            m(x, randn(B + 1, 3, 6))
        m = _mha()
        with pytest.raises(ValueError):
            m(x, mask=torch.ones(B, T, dtype=torch.bool))               # key padding not converted
        with pytest.raises(ValueError):
            m(x, mask=torch.ones(B, 3, T, T, dtype=torch.bool))         # 3 heads, not 4
        with pytest.raises(ValueError):
            m(x, mask=torch.ones(T, T + 1, dtype=torch.bool))

    @pytest.mark.contract
    def test_cache_and_rope_are_self_attention_only_and_errors_leave_cache_untouched(self):
        x = randn(B, T, D, seed=1)
        ctx = randn(B, 3, D, seed=2)
        cache = _ConcatCache()
        m = _mha()
        with pytest.raises(ValueError):
            m(x, ctx, kv_cache=cache)
        with pytest.raises(ValueError):
            m(x, mask=torch.ones(T, T + 2, dtype=torch.bool), kv_cache=cache)
        assert cache.updates == 0 and cache.length == 0
        with pytest.raises(ValueError):
            _mha(rope=_ScaleRope())(x, ctx)
        with pytest.raises(ValueError):
            _mha(rope=_ScaleRope())(x, positions=torch.arange(T + 1), kv_cache=cache)
        assert cache.updates == 0
        real = kv_cache.KVCache(B, H, D // H, 9)
        m(randn(B, 3, D, seed=3), is_causal=True, kv_cache=real)
        k_before = real.k[:, :, :3].clone()
        with pytest.raises(ValueError):
            m(randn(B, 1, D, seed=4), mask=torch.ones(1, 3, dtype=torch.bool), kv_cache=real)  # T_k is 4
        assert real.length == 3 and torch.equal(real.k[:, :, :3], k_before)


# ============================================================================= #28


class TestCrossAttention:
    pytestmark = pytest.mark.canon("transformer/cross_attention")

    T_Q, T_K, D_C = 3, 11, 6

    def _setup(self, d_context: int | None = None, bias: bool = True):
        torch.manual_seed(0)
        m = multihead.CrossAttention(D, H, d_context, bias=bias)
        x = randn(B, self.T_Q, D, seed=1)
        ctx = randn(B, self.T_K, d_context or D, seed=2)
        return m, x, ctx

    def test_is_a_multihead_attention_with_context_width(self):
        m, _, _ = self._setup(self.D_C)
        assert isinstance(m, multihead.MultiHeadAttention)
        assert m.k_proj.weight.shape == (D, self.D_C) and m.v_proj.weight.shape == (D, self.D_C)
        assert m.q_proj.weight.shape == (D, D)

    @pytest.mark.parametrize("masked", [False, True])
    def test_matches_torch_with_separate_kdim_vdim(self, masked):
        m, x, ctx = self._setup(self.D_C)
        ref = _torch_mha_like(m, fused=False, kdim=self.D_C, vdim=self.D_C)
        valid = torch.ones(B, self.T_K, dtype=torch.bool)
        valid[1, 7:] = False
        out, weights = m(x, ctx, valid if masked else None, return_weights=True)
        want, want_weights = ref(x, ctx, ctx, key_padding_mask=~valid if masked else None)
        assert out.shape == (B, self.T_Q, D) and weights.shape == (B, H, self.T_Q, self.T_K)
        assert_close(out, want, cond=COND, what="CrossAttention vs nn.MultiheadAttention(kdim, vdim)")
        assert_close(weights.mean(1), want_weights, cond=COND, what="CrossAttention weights")

    def test_matches_torch_with_fused_in_proj_when_widths_agree(self):
        m, x, ctx = self._setup()
        ref = _torch_mha_like(m, fused=True)
        assert_close(m(x, ctx), ref(x, ctx, ctx, need_weights=False)[0], cond=COND,
                     what="CrossAttention vs nn.MultiheadAttention")

    def test_masked_context_contents_do_not_matter(self):
        m, x, ctx = self._setup(self.D_C)
        valid = torch.ones(B, self.T_K, dtype=torch.long)
        valid[0, 4:] = 0
        out = m(x, ctx, valid)
        ctx2 = ctx.clone()
        ctx2[0, 4:] = randn(self.T_K - 4, self.D_C, seed=8) * 50
        want = _composed(m, x, ctx, mask=masks.key_padding_to_attention(valid))
        assert_close(out, want, cond=COND, what="CrossAttention(context_mask)")
        assert_close(m(x, ctx2, valid), want, cond=COND, what="CrossAttention(context_mask), masked tokens changed")
        _, weights = m(x, ctx, valid, return_weights=True)
        assert torch.all(weights[0, ..., 4:] == 0.0)

    def test_context_permutation_invariance_and_query_equivariance(self):
        m, x, ctx = self._setup(self.D_C)
        out = m(x, ctx)
        perm_k = torch.randperm(self.T_K, generator=torch.Generator().manual_seed(1))
        perm_q = torch.tensor([2, 0, 1])
        assert_close(m(x, ctx[:, perm_k]), out, cond=COND, what="CrossAttention on permuted context")
        assert_close(m(x[:, perm_q], ctx), out[:, perm_q], cond=COND, what="CrossAttention on permuted queries")

    def test_equals_multihead_forward_with_converted_mask(self):
        m, x, ctx = self._setup(self.D_C)
        valid = torch.ones(B, self.T_K, dtype=torch.bool)
        valid[1, :5] = False
        want = _composed(m, x, ctx, mask=masks.key_padding_to_attention(valid))
        assert_close(m(x, ctx, valid), want, cond=COND, what="CrossAttention(context_mask)")
        assert_close(multihead.MultiHeadAttention.forward(m, x, ctx, masks.key_padding_to_attention(valid)), want,
                     cond=COND, what="MultiHeadAttention.forward(context, converted mask)")

    @pytest.mark.parametrize("kind", ["none", "per_query_mask", "is_causal", "bias_and_is_causal"])
    def test_self_attention_is_cross_attention_to_itself(self, kind):
        """``m(x)`` equals ``m(x, context=x)``, masks included; and with a real context, a per-query
        ``(B, T_q, T_k)`` mask and ``is_causal`` (bottom-right, ``causal_mask(T_q, T_k)``) give the
        composition of #25 on the projections with that mask."""
        torch.manual_seed(0)
        m = multihead.MultiHeadAttention(D, H)
        x = randn(B, T, D, seed=1)
        xq, ctx = randn(B, self.T_Q, D, seed=2), randn(B, self.T_K, D, seed=3)

        def allow(t_q: int, t_k: int) -> torch.Tensor:
            a = torch.rand(B, t_q, t_k, generator=torch.Generator().manual_seed(t_k)) > 0.4
            a[..., 0] = True                                            # no query loses every key
            return a

        def kwargs(t_q: int, t_k: int) -> tuple[dict, torch.Tensor | None]:
            """The forward's mask arguments, and the equivalent (B, 1, T_q, T_k) allow-mask."""
            a, causal = allow(t_q, t_k), masks.causal_mask(t_q, t_k)
            return {"none": ({}, None),
                    "per_query_mask": ({"mask": a}, a[:, None]),
                    "is_causal": ({"is_causal": True}, causal.expand(B, 1, t_q, t_k)),
                    "bias_and_is_causal": ({"mask": masks.mask_to_bias(a), "is_causal": True},
                                           a[:, None] & causal)}[kind]

        args, _ = kwargs(T, T)
        args, want = kwargs(T, T)
        assert_close(m(x, **args), _composed(m, x, mask=want), cond=COND, what=f"self-attention ({kind})")
        assert_close(m(x, x, **args), _composed(m, x, x, mask=want), cond=COND, what=f"attention to context=x ({kind})")
        args, want = kwargs(self.T_Q, self.T_K)
        out = m(xq, ctx, **args)
        assert torch.isfinite(out).all()
        assert_close(out, _composed(m, xq, ctx, mask=want), cond=COND, what=f"cross-attention ({kind})")
        if kind != "none":
            assert not torch.allclose(out, m(xq, ctx), **TOL.COMPOSITE.kw())  # the mask did something

    def test_cached_decoding_step_is_cross_attention_to_the_prefix(self):
        """With a KV cache, a new token attends to the cached prefix: cross-attention from it to
        ``x[:, :t+1]``; the causal prefill is cross-attention of the prompt to itself, causal."""
        torch.manual_seed(0)
        m = multihead.MultiHeadAttention(D, H)
        x = randn(B, 7, D, seed=1)
        cache = _ConcatCache()
        prefill = m(x[:, :3], is_causal=True, kv_cache=cache)
        assert_close(prefill, _composed(m, x[:, :3], mask=masks.causal_mask(3)), cond=COND, what="causal prefill")
        for t in range(3, 7):
            step = m(x[:, t:t + 1], kv_cache=cache)
            assert cache.length == t + 1
            assert_close(step, _composed(m, x[:, t:t + 1], x[:, :t + 1]), cond=COND, what=f"cached step {t}")
        assert cache.updates == 5

    @pytest.mark.numerics_probe
    @pytest.mark.parametrize("bias", [True, False])
    def test_all_context_masked_gives_out_proj_bias(self, bias):
        m, x, ctx = self._setup(self.D_C, bias=bias)
        x.requires_grad_(True)
        valid = torch.ones(B, self.T_K, dtype=torch.bool)
        valid[1] = False
        out = m(x, ctx, valid)
        assert torch.isfinite(out).all()
        want = m.out_proj.bias.expand(self.T_Q, D) if bias else torch.zeros(self.T_Q, D)
        assert_close(out[1], want, what="CrossAttention with every context token masked")
        out.sum().backward()
        assert torch.isfinite(x.grad).all()
        assert torch.all(x.grad[1] == 0.0)

    @pytest.mark.edge_case
    def test_single_context_token(self):
        m, x, ctx = self._setup(self.D_C)
        out = m(x, ctx[:, :1])
        assert_close(out, m.out_proj(m.v_proj(ctx[:, :1])).expand(B, self.T_Q, D), cond=COND,
                     what="CrossAttention over one context token")

    def test_inputs_are_not_modified(self):
        m, x, ctx = self._setup(self.D_C)
        valid = torch.ones(B, self.T_K, dtype=torch.bool)
        valid[0, 5:] = False
        call_leaves_inputs_unchanged(m, x, ctx, valid)

    @pytest.mark.contract
    def test_invalid_inputs(self):
        m, x, ctx = self._setup(self.D_C)
        with pytest.raises(ValueError):
            m(x, None)
        with pytest.raises(ValueError):
            m(x, ctx[:1])
        with pytest.raises(ValueError):
            m(x, randn(B, self.T_K, D))
        with pytest.raises(ValueError):
            m(x, ctx, torch.ones(B, self.T_K - 1, dtype=torch.bool))
        with pytest.raises(ValueError):
            m(x, ctx, torch.ones(B, 1, 1, self.T_K, dtype=torch.bool))


# ============================================================================= #33


class TestKVCache:
    pytestmark = pytest.mark.canon("transformer/kv_cache")

    def _cache(self, max_len: int = 9, batch: int = B, heads: int = H, head_dim: int = D // H,
               dtype: torch.dtype = torch.float32) -> kv_cache.KVCache:
        return kv_cache.KVCache(batch, heads, head_dim, max_len, dtype=dtype)

    def _decode_in_steps(self, module, x: torch.Tensor, cache, prefill: int) -> torch.Tensor:
        """Prefill ``prefill`` tokens, then one token per call; returns the concatenated outputs."""
        outs = [module(x[:, :prefill], is_causal=True, kv_cache=cache)]
        for t in range(prefill, x.shape[1]):
            outs.append(module(x[:, t:t + 1], is_causal=True, kv_cache=cache))
        return torch.cat(outs, dim=1)

    @pytest.mark.numerics_probe
    def test_half_precision_cached_decoding_is_finite_and_close(self):
        dtype = low_precision_dtype()
        if dtype is None:
            pytest.skip("neither float16 nor bfloat16 kernels on this CPU")
        m = _mha().eval()
        x = randn(B, 9, D, seed=1)
        with torch.no_grad():
            full = m(x, is_causal=True)
            low = copy.deepcopy(m).to(dtype)
            steps = self._decode_in_steps(low, x.to(dtype), self._cache(max_len=9, dtype=dtype), prefill=5)
        assert steps.dtype == dtype and torch.isfinite(steps).all()
        tol = TOL.LOW_PRECISION  # C9's fp16/bf16 probe tolerance against float32
        torch.testing.assert_close(steps.float(), full, atol=tol.atol, rtol=tol.rtol)

    def test_buffers_are_preallocated(self):
        cache = kv_cache.KVCache(2, 3, 4, 10, dtype=torch.float64)
        assert cache.k.shape == (2, 3, 10, 4) and cache.v.shape == (2, 3, 10, 4)
        assert cache.k.dtype == torch.float64 and cache.length == 0

    def test_cached_decoding_equals_full_causal_forward(self):
        m = _mha().eval()
        x = randn(B, 9, D, seed=1)
        with torch.no_grad():
            full = m(x, is_causal=True)
            cache = self._cache(max_len=9)
            steps = self._decode_in_steps(m, x, cache, prefill=5)
        assert cache.length == 9
        assert_close(steps, full, cond=COND, what="cached decoding vs the full causal forward")

    def test_cached_decoding_with_rotary_embedding(self):
        from canon_refs.transformer import positional

        m = _mha(rope=positional.RotaryEmbedding(D // H, max_positions=32)).eval()
        x = randn(B, 9, D, seed=1)
        with torch.no_grad():
            full = m(x, is_causal=True)
            steps = self._decode_in_steps(m, x, self._cache(max_len=12), prefill=5)
        assert_close(steps, full, cond=COND, what="cached decoding with RoPE vs the full causal forward")

    def test_cached_decoding_with_grouped_query_attention(self):
        from canon_refs.llm import gqa
        torch.manual_seed(0)
        m = gqa.GroupedQueryAttention(D, H, 2).eval()
        x = randn(B, 9, D, seed=1)
        with torch.no_grad():
            full = m(x, is_causal=True)
            cache = self._cache(max_len=9, heads=2)
            steps = self._decode_in_steps(m, x, cache, prefill=5)
        assert_close(steps, full, cond=COND, what="cached decoding with GQA vs the full causal forward")

    def test_length_reset_and_views_share_storage(self):
        cache = self._cache(max_len=6, batch=1, heads=2, head_dim=3)
        k1, v1 = randn(1, 2, 4, 3, seed=1), randn(1, 2, 4, 3, seed=2)
        k, v = cache.update(k1, v1)
        assert cache.length == 4 and k.shape == (1, 2, 4, 3) and v.shape == (1, 2, 4, 3)
        assert torch.equal(k, k1) and torch.equal(v, v1), "update must return exactly what was written"
        assert k.untyped_storage().data_ptr() == cache.k.untyped_storage().data_ptr()
        assert v.untyped_storage().data_ptr() == cache.v.untyped_storage().data_ptr()
        k2, v2 = randn(1, 2, 1, 3, seed=3), randn(1, 2, 1, 3, seed=4)
        k, v = cache.update(k2, v2)
        assert cache.length == 5 and k.shape == (1, 2, 5, 3)
        assert torch.equal(k, torch.cat([k1, k2], dim=2)) and torch.equal(v, torch.cat([v1, v2], dim=2))
        cache.k[0, 0, 0, 0] = 123.0                                      # a view, not a copy
        assert k[0, 0, 0, 0].item() == 123.0
        cache.reset()
        assert cache.length == 0
        k, _ = cache.update(k2, v2)
        assert cache.length == 1
        assert torch.equal(k, k2), "after reset the cache starts again at position 0"

    def test_memory_bytes_and_model_formula(self):
        assert kv_cache.kv_cache_bytes(32, 1, 8, 128, 8192) == 1073741824
        assert kv_cache.kv_cache_bytes(32, 1, 8, 128, 8192, bytes_per_elem=4) == 2 * 1073741824
        assert kv_cache.kv_cache_bytes(2, 3, 4, 5, 6, 1) == 2 * 2 * 3 * 4 * 5 * 6
        assert kv_cache.KVCache(2, 4, 8, 16).memory_bytes() == 2 * 2 * 4 * 16 * 8 * 4
        assert kv_cache.KVCache(2, 4, 8, 16, dtype=torch.bfloat16).memory_bytes() == 2 * 2 * 4 * 16 * 8 * 2

    @pytest.mark.edge_case
    def test_fill_to_capacity_then_overflow_leaves_cache_unchanged(self):
        cache = self._cache(max_len=4, batch=1, heads=1, head_dim=2)
        cache.update(randn(1, 1, 3, 2, seed=1), randn(1, 1, 3, 2, seed=2))
        k, _ = cache.update(randn(1, 1, 1, 2, seed=3), randn(1, 1, 1, 2, seed=4))
        assert cache.length == 4 and k.shape == (1, 1, 4, 2)
        cache.reset()
        cache.update(randn(1, 1, 3, 2, seed=1), randn(1, 1, 3, 2, seed=2))
        k_before, v_before = cache.k[:, :, :3].clone(), cache.v[:, :, :3].clone()
        with pytest.raises(ValueError):  # documented: an append past max_len raises ValueError
            cache.update(randn(1, 1, 2, 2, seed=5), randn(1, 1, 2, 2, seed=6))
        assert cache.length == 3, "a refused update must not advance length"
        assert torch.equal(cache.k[:, :, :3], k_before) and torch.equal(cache.v[:, :, :3], v_before)

    _MISMATCHES = [
        ((2, 4, 1, 4), (2, 4, 1, 4), torch.float32),                    # wrong batch
        ((1, 3, 1, 4), (1, 3, 1, 4), torch.float32),                    # wrong H_kv
        ((1, 4, 1, 5), (1, 4, 1, 5), torch.float32),                    # wrong d_h
        ((4, 1, 4), (4, 1, 4), torch.float32),                          # 3-D
        ((1, 4, 1, 4), (1, 4, 2, 4), torch.float32),                    # T_new differs
        ((1, 4, 1, 4), (1, 4, 1, 4), torch.float64),                    # dtype
    ]
    _MISMATCH_IDS = ["batch", "heads", "head_dim", "rank_3", "t_new_differs", "dtype"]

    def _filled(self) -> tuple[kv_cache.KVCache, torch.Tensor, torch.Tensor]:
        cache = self._cache(max_len=4, batch=1, heads=4, head_dim=4)
        cache.update(randn(1, 4, 2, 4, seed=1), randn(1, 4, 2, 4, seed=2))
        return cache, cache.k[:, :, :2].clone(), cache.v[:, :, :2].clone()

    @pytest.mark.parametrize(("k_shape", "v_shape", "dtype"), _MISMATCHES, ids=_MISMATCH_IDS)
    def test_a_refused_update_leaves_the_cache_unchanged(self, k_shape, v_shape, dtype):
        # State is the point of a cache: whatever an update refuses (ValueError or any other error),
        # length and the cached positions stay as they were. (That it raises is the contract check below.)
        cache, k_before, v_before = self._filled()
        try:
            cache.update(randn(*k_shape, seed=3, dtype=dtype), randn(*v_shape, seed=4, dtype=dtype))
        except Exception:
            assert cache.length == 2, "a refused update must not advance length"
            assert torch.equal(cache.k[:, :, :2], k_before) and torch.equal(cache.v[:, :, :2], v_before)

    @pytest.mark.contract
    @pytest.mark.parametrize(("k_shape", "v_shape", "dtype"), _MISMATCHES, ids=_MISMATCH_IDS)
    def test_update_rejects_mismatches(self, k_shape, v_shape, dtype):
        cache, _, _ = self._filled()
        with pytest.raises(ValueError):
            cache.update(randn(*k_shape, seed=3, dtype=dtype), randn(*v_shape, seed=4, dtype=dtype))

    @pytest.mark.contract
    @pytest.mark.parametrize("name", ["batch_size", "n_kv_heads", "head_dim", "max_len"])
    def test_constructor_rejects_non_positive_sizes(self, name):
        sizes = {"batch_size": 1, "n_kv_heads": 2, "head_dim": 4, "max_len": 8}
        sizes[name] = 0
        with pytest.raises(ValueError):
            kv_cache.KVCache(**sizes)

    def test_update_leaves_its_inputs_unchanged(self):
        cache = self._cache(max_len=6, batch=1, heads=2, head_dim=3)
        call_leaves_inputs_unchanged(cache.update, randn(1, 2, 4, 3, seed=1), randn(1, 2, 4, 3, seed=2))

    @pytest.mark.parametrize("pos", ["learned", "rope"])
    def test_gpt_greedy_generation_with_cache_equals_without(self, pos):
        from canon_refs.transformer import generation, gpt
        torch.manual_seed(0)
        config = gpt.GPTConfig(vocab_size=13, max_seq_len=24, d_model=32, n_heads=4, n_layers=2, pos=pos)
        model = gpt.GPT(config).eval()
        idx = torch.randint(0, 13, (2, 5), generator=torch.Generator().manual_seed(1))
        plain = generation.generate(model, idx, 12, greedy=True, use_cache=False)
        cached = generation.generate(model, idx, 12, greedy=True, use_cache=True)
        assert cached.shape == (2, 17)
        assert torch.equal(cached, plain)
