"""Reference tests for canon #36 (SwiGLU / GELU feed-forward), #29 (encoder block) and #30 (decoder block).

One class per item, each tied to its slug with a class-level ``pytestmark``. The block tests compare
against ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` with copied weights, after
randomising every norm's weight and bias so that a swapped or shared norm cannot hide.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from canon_refs.llm import gqa
from canon_refs.nn import normalization_torch
from canon_refs.transformer import blocks, ffn, kv_cache, masks, multihead, positional
from pytest_mlcanon.testing import (
    assert_close,
    assert_low_precision_matches,
    call_leaves_inputs_unchanged,
    copy_linear,
    randn,
)


def _fp16_module_probe(module: nn.Module, x: torch.Tensor) -> None:
    """C9's fp16 probe for a module: the module is cast along with its input."""

    def run(inp: torch.Tensor) -> torch.Tensor:
        return copy.deepcopy(module).to(inp.dtype)(inp)

    assert_low_precision_matches(run, x)


#: Float32 compositions (projections of width up to 4d = 64, a softmax, norms) are compared at 16 ulps
#: times a condition of 64, the longest sum of rounded products on the path: about 1e-4 at unit size.
COND = 64.0


# ============================================================================ #36 feed-forward


class TestFeedForward:
    pytestmark = pytest.mark.canon("transformer/ffn")

    @staticmethod
    def _swiglu(d: int = 16, d_ff: int | None = None, seed: int = 0, **kwargs) -> ffn.SwiGLU:
        torch.manual_seed(seed)
        return ffn.SwiGLU(d, d_ff, **kwargs)

    @staticmethod
    def _formula(m: ffn.SwiGLU, x: torch.Tensor) -> torch.Tensor:
        """``w2(silu(w1 x) * w3 x)`` written with F.linear and F.silu on the module's own weights."""
        gate = F.silu(F.linear(x, m.w1.weight, m.w1.bias))
        up = F.linear(x, m.w3.weight, m.w3.bias)
        return F.linear(gate * up, m.w2.weight, m.w2.bias)

    @pytest.mark.parametrize(("d_model", "expected"), [(48, 128), (64, 176), (512, 1368)])
    def test_swiglu_hidden_dim_quoted_values(self, d_model, expected):
        assert ffn.swiglu_hidden_dim(d_model) == expected

    def test_swiglu_hidden_dim_rounding(self):
        # multiple_of = 1 is int(8d/3) itself; Llama-7B's d = 4096 with multiple_of = 256 gives 11008
        assert ffn.swiglu_hidden_dim(64, multiple_of=1) == 170
        assert ffn.swiglu_hidden_dim(4096, multiple_of=256) == 11008
        assert ffn.swiglu_hidden_dim(3) == 8  # int(8) is already a multiple of 8: not pushed up to 16
        assert ffn.swiglu_hidden_dim(6, multiple_of=5) == 20  # int(16) rounded up to 20, never down to 15
        m = ffn.SwiGLU(64)
        assert m.w1.out_features == m.w3.out_features == m.w2.in_features == 176
        assert ffn.SwiGLU(64, multiple_of=32).w1.out_features == 192

    def test_swiglu_forward_equals_silu_formula(self):
        m = self._swiglu(16, 40, seed=1)
        x = randn(3, 5, 16, seed=2)
        out = m(x)
        assert out.shape == (3, 5, 16) and out.dtype == torch.float32
        assert_close(out, self._formula(m, x), cond=40.0, what="SwiGLU(16, 40)(x)")
        # the gate is w1 (through SiLU) and the up projection w3 (linear): the swapped wiring differs
        swapped = F.linear(F.silu(F.linear(x, m.w3.weight)) * F.linear(x, m.w1.weight), m.w2.weight)
        assert (out - swapped).abs().max() > 1e-3

    def test_swiglu_with_bias_equals_formula(self):
        m = self._swiglu(8, 12, seed=3, bias=True)
        with torch.no_grad():
            for layer in (m.w1, m.w2, m.w3):
                layer.bias.normal_()
        x = randn(4, 8, seed=4, dtype=torch.float64)
        m = m.double()
        assert_close(m(x), self._formula(m, x), cond=12.0, what="SwiGLU(bias=True)(x) in float64")

    def test_feedforward_equals_linear_gelu_linear(self):
        torch.manual_seed(5)
        m = ffn.FeedForward(16)
        assert m.fc1.in_features == 16 and m.fc1.out_features == 64 and m.fc2.out_features == 16
        ref = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
        copy_linear(ref[0], m.fc1.weight, m.fc1.bias)
        copy_linear(ref[2], m.fc2.weight, m.fc2.bias)
        x = randn(2, 7, 16, seed=6)
        assert_close(m(x), ref(x), cond=COND, what="FeedForward(16)(x) vs Linear-GELU-Linear")
        # exact (erf) GELU, not the tanh approximation
        x64 = 3.0 * randn(2, 7, 16, seed=7, dtype=torch.float64)
        m64 = m.double()
        ref_erf = F.linear(F.gelu(F.linear(x64, m64.fc1.weight, m64.fc1.bias)), m64.fc2.weight, m64.fc2.bias)
        assert_close(m64(x64), ref_erf, cond=COND, what="FeedForward in float64 vs exact (erf) GELU")

    def test_feedforward_custom_width_and_no_bias(self):
        m = ffn.FeedForward(8, 20, bias=False)
        assert m.fc1.weight.shape == (20, 8) and m.fc2.weight.shape == (8, 20)
        assert m.fc1.bias is None and m.fc2.bias is None
        assert sum(p.numel() for p in m.parameters()) == 2 * 8 * 20

    @pytest.mark.parametrize("d", [64, 512])
    def test_parameter_count(self, d):
        m = ffn.SwiGLU(d)
        d_ff = ffn.swiglu_hidden_dim(d)
        n = sum(p.numel() for p in m.parameters())
        assert n == 3 * d * d_ff
        assert abs(n - 8 * d * d) / (8 * d * d) < 0.05
        gelu = ffn.FeedForward(d)
        assert sum(p.numel() for p in gelu.parameters()) == 8 * d * d + 4 * d + d

    def test_zeroing_w3_zeroes_the_output(self):
        m = self._swiglu(16, 32, seed=8)
        with torch.no_grad():
            m.w3.weight.zero_()
        out = m(randn(2, 4, 16, seed=9))
        assert torch.equal(out, torch.zeros_like(out))

    def test_gradcheck(self):
        m = self._swiglu(6, 10, seed=10, bias=True).double()
        x = randn(2, 3, 6, seed=11, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(m, (x,))
        torch.manual_seed(12)
        g = ffn.FeedForward(6, 10).double()
        assert torch.autograd.gradcheck(g, (x,))

    def test_parameters_receive_gradients(self):
        m = self._swiglu(8, 16, seed=13)
        m(randn(3, 8, seed=14)).pow(2).sum().backward()
        for name, p in m.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name

    def test_dropout_only_in_training(self):
        torch.manual_seed(15)
        m = ffn.SwiGLU(8, 16, dropout=0.5)
        x = randn(4, 6, 8, seed=16)
        m.eval()
        assert_close(m(x), self._formula(m, x), cond=16.0, what="SwiGLU(dropout=0.5) in eval mode")
        m.train()
        assert not torch.allclose(m(x), self._formula(m, x), atol=1e-4)

    @pytest.mark.numerics_probe
    def test_extreme_float32_inputs_stay_finite(self):
        m = self._swiglu(16, 32, seed=17)
        x = 1e4 * torch.sign(randn(2, 5, 16, seed=18))
        x.requires_grad_(True)
        out = m(x)
        assert torch.isfinite(out).all(), "SwiGLU's output on +-1e4 float32 inputs is not finite"
        with torch.no_grad():
            out64 = self._formula(copy.deepcopy(m).double(), x.detach().double())
        assert_close(out, out64, cond=32.0, what="SwiGLU(+-1e4 inputs) vs float64")
        out.sum().backward()
        assert torch.isfinite(x.grad).all(), "the gradient of SwiGLU's output w.r.t. +-1e4 float32 inputs is not finite"
        torch.manual_seed(19)
        g = ffn.FeedForward(16, 32)
        assert torch.isfinite(g(x.detach())).all(), "FeedForward's output on +-1e4 float32 inputs is not finite"

    @pytest.mark.numerics_probe
    def test_fp16_probe_unit_scale(self):
        _fp16_module_probe(self._swiglu(16, 32, seed=20), randn(2, 5, 16, seed=21))
        torch.manual_seed(22)
        _fp16_module_probe(ffn.FeedForward(16, 32), randn(2, 5, 16, seed=23))

    @pytest.mark.edge_case
    def test_any_leading_dims_and_single_token(self):
        m = self._swiglu(8, 16, seed=24)
        x = randn(2, 3, 4, 8, seed=25)
        out = m(x)
        assert out.shape == (2, 3, 4, 8)
        assert_close(out, self._formula(m, x), cond=16.0, what="SwiGLU on (2, 3, 4, 8) inputs")
        assert_close(m(x.reshape(24, 8)), self._formula(m, x.reshape(24, 8)), cond=16.0, what="SwiGLU on (24, 8)")
        assert m(x[0, 0, 0]).shape == (8,)
        assert m(x[:1, :1, :1]).shape == (1, 1, 1, 8)

    @pytest.mark.edge_case
    def test_hidden_width_one(self):
        m = self._swiglu(4, 1, seed=26)
        x = randn(3, 4, seed=27)
        assert_close(m(x), self._formula(m, x), cond=4.0, what="SwiGLU(4, 1)(x)")

    def test_inputs_are_not_modified(self):
        x = randn(3, 5, 16, seed=28)
        call_leaves_inputs_unchanged(self._swiglu(16, 40, seed=1), x)
        torch.manual_seed(29)
        call_leaves_inputs_unchanged(ffn.FeedForward(16), x)

    @pytest.mark.contract
    def test_errors(self):
        with pytest.raises(ValueError):
            ffn.SwiGLU(8, 0)
        with pytest.raises(ValueError):
            ffn.FeedForward(8, 0)
        with pytest.raises(ValueError):
            ffn.SwiGLU(8, multiple_of=0)
        with pytest.raises(ValueError):
            ffn.swiglu_hidden_dim(64, 0)
        with pytest.raises(ValueError):
            ffn.swiglu_hidden_dim(0)
        with pytest.raises(ValueError):
            ffn.SwiGLU(8, dropout=1.0)
        with pytest.raises(ValueError):
            ffn.SwiGLU(8)(torch.zeros(2, 7))
        with pytest.raises(ValueError):
            ffn.FeedForward(8)(torch.zeros(2, 9))


# ============================================================================ shared block helpers

D, H, D_FF = 16, 4, 24


def _randomise_norms(block: nn.Module, seed: int) -> None:
    """Give every norm its own random weight (and bias), so a swapped or shared norm shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in block.modules():
            if isinstance(module, (nn.LayerNorm, normalization_torch.RMSNorm)):
                module.weight.copy_(1.0 + 0.5 * torch.randn(module.weight.shape, generator=gen))
                if getattr(module, "bias", None) is not None:
                    module.bias.copy_(0.5 * torch.randn(module.bias.shape, generator=gen))


def _copy_attention(dst: nn.MultiheadAttention, src: nn.Module) -> None:
    with torch.no_grad():
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.k_proj.weight, src.v_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.k_proj.bias, src.v_proj.bias]))
    copy_linear(dst.out_proj, src.out_proj.weight, src.out_proj.bias)


def _copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def _zero_sublayer_outputs(block: nn.Module) -> None:
    """Zero the last linear layer of every sublayer (attention out_proj, FFN down projection)."""
    with torch.no_grad():
        last = [block.self_attn.out_proj]
        if getattr(block, "cross_attn", None) is not None:
            last.append(block.cross_attn.out_proj)
        last.append(block.ffn.fc2 if hasattr(block.ffn, "fc2") else block.ffn.w2)
        for layer in last:
            layer.weight.zero_()
            if layer.bias is not None:
                layer.bias.zero_()


# ============================================================================ #29 encoder block


class TestEncoderBlock:
    pytestmark = pytest.mark.canon("transformer/encoder_block")

    VALID = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)

    @staticmethod
    def _block(seed: int = 0, **kwargs) -> blocks.EncoderBlock:
        torch.manual_seed(seed)
        block = blocks.EncoderBlock(D, H, kwargs.pop("d_ff", D_FF), **kwargs)
        _randomise_norms(block, seed + 100)
        return block

    @staticmethod
    def _torch_like(block: blocks.EncoderBlock, norm_first: bool) -> nn.TransformerEncoderLayer:
        ref = nn.TransformerEncoderLayer(D, H, block.ffn.fc1.out_features, dropout=0.0, activation="gelu",
                                         batch_first=True, norm_first=norm_first)
        _copy_attention(ref.self_attn, block.self_attn)
        copy_linear(ref.linear1, block.ffn.fc1.weight, block.ffn.fc1.bias)
        copy_linear(ref.linear2, block.ffn.fc2.weight, block.ffn.fc2.bias)
        _copy_norm(ref.norm1, block.norm_attn)
        _copy_norm(ref.norm2, block.norm_ffn)
        return ref

    @pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
    @pytest.mark.parametrize("padded", [False, True], ids=["no_mask", "key_padding"])
    def test_matches_torch_encoder_layer(self, norm_first, padded):
        block = self._block(seed=1, norm_first=norm_first)
        ref = self._torch_like(block, norm_first)
        x = randn(3, 6, D, seed=2)
        if padded:
            out = block(x, self.VALID)
            expected = ref(x, src_key_padding_mask=~self.VALID)       # torch's bool masks are inverted
            assert_close(out[self.VALID], expected[self.VALID], cond=COND, what="EncoderBlock(key padding) vs torch")
            assert_close(block(x, self.VALID.long())[self.VALID], expected[self.VALID], cond=COND,
                         what="EncoderBlock(integer key padding mask) vs torch")
        else:
            assert_close(block(x), ref(x), cond=COND, what="EncoderBlock vs nn.TransformerEncoderLayer")

    def test_attributes_and_default_widths(self):
        block = blocks.EncoderBlock(D, H)
        assert isinstance(block.self_attn, multihead.MultiHeadAttention)
        assert isinstance(block.norm_attn, nn.LayerNorm) and isinstance(block.norm_ffn, nn.LayerNorm)
        assert block.norm_attn is not block.norm_ffn
        assert isinstance(block.ffn, ffn.FeedForward) and block.ffn.fc1.out_features == 4 * D
        assert block.norm_attn.eps == 1e-5
        swiglu = blocks.EncoderBlock(48, 4, ffn="swiglu", norm="rmsnorm", eps=1e-6)
        assert isinstance(swiglu.ffn, ffn.SwiGLU) and swiglu.ffn.w1.out_features == 128
        assert isinstance(swiglu.norm_attn, normalization_torch.RMSNorm) and swiglu.norm_ffn.eps == 1e-6
        nobias = blocks.EncoderBlock(D, H, bias=False)
        assert nobias.norm_attn.bias is None and nobias.ffn.fc1.bias is None and nobias.self_attn.q_proj.bias is None

    def test_token_permutation_equivariance(self):
        block = self._block(seed=3)
        x = randn(2, 6, D, seed=4)
        perm = torch.tensor([3, 0, 5, 1, 4, 2])
        assert_close(block(x[:, perm]), block(x)[:, perm], cond=COND, what="EncoderBlock on permuted tokens")

    def test_padded_tokens_do_not_change_real_outputs(self):
        block = self._block(seed=5)
        x = randn(3, 6, D, seed=6)
        out = block(x, self.VALID)
        y = x.clone()
        y[~self.VALID] = randn(int((~self.VALID).sum()), D, seed=7) * 10.0
        assert_close(block(y, self.VALID)[self.VALID], out[self.VALID], cond=COND,
                     what="EncoderBlock real tokens after the padded ones changed")
        # and a padded row equals torch's layer on the same sequence unpadded
        assert_close(out[1, :4], self._torch_like(block, True)(x[1:2, :4])[0], cond=COND,
                     what="EncoderBlock padded row vs the unpadded sequence")

    @pytest.mark.parametrize("variant", [{}, {"ffn": "swiglu", "norm": "rmsnorm"}], ids=["gelu", "swiglu"])
    def test_zeroed_sublayers_make_the_pre_norm_block_the_identity(self, variant):
        block = self._block(seed=8, **variant)
        _zero_sublayer_outputs(block)
        x = randn(2, 5, D, seed=9)
        # zero out_proj and down projection make each residual branch exactly 0: x + 0 is x, exactly
        assert torch.equal(block(x), x)
        assert torch.equal(block(x, self.VALID[:2, :5]), x)

    def test_swiglu_rmsnorm_variant_shapes_and_finite_gradients(self):
        block = self._block(seed=10, ffn="swiglu", norm="rmsnorm", d_ff=None)
        x = randn(2, 5, D, seed=11, requires_grad=True)
        out = block(x, torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))
        assert out.shape == (2, 5, D) and torch.isfinite(out).all()
        out.pow(2).mean().backward()
        assert torch.isfinite(x.grad).all()
        for name, p in block.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), name

    def test_gradcheck_float64(self):
        torch.manual_seed(12)
        block = blocks.EncoderBlock(8, 2, 12).double()
        _randomise_norms(block, 13)
        x = randn(2, 3, 8, seed=14, dtype=torch.float64, requires_grad=True)
        mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
        assert torch.autograd.gradcheck(lambda inp: block(inp, mask), (x,))

    def test_dropout_only_in_training(self):
        block = self._block(seed=15, dropout=0.3)
        reference = self._block(seed=15)
        x = randn(2, 5, D, seed=16)
        block.eval()
        assert_close(block(x), self._torch_like(reference, True)(x), cond=COND, what="EncoderBlock(dropout) in eval mode")
        block.train()
        assert not torch.allclose(block(x), reference(x), atol=1e-3)

    @pytest.mark.numerics_probe
    def test_fp16_probe(self):
        block = self._block(seed=17)

        def run(inp: torch.Tensor) -> torch.Tensor:
            return copy.deepcopy(block).to(inp.dtype)(inp, self.VALID[:2, :5])

        assert_low_precision_matches(run, randn(2, 5, D, seed=18))

    @pytest.mark.numerics_probe
    def test_fully_padded_row_and_huge_inputs_stay_finite(self):
        block = self._block(seed=19)
        x = randn(2, 4, D, seed=20, requires_grad=True)
        valid = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
        out = block(x, valid)
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(x.grad).all()
        big = block(1e4 * torch.sign(x.detach()))
        assert torch.isfinite(big).all()

    @pytest.mark.edge_case
    def test_batch_of_one_and_single_token(self):
        block = self._block(seed=21)
        x = randn(1, 1, D, seed=22)
        ref = self._torch_like(block, True)
        out = block(x)
        assert out.shape == (1, 1, D)
        assert_close(out, ref(x), cond=COND, what="EncoderBlock(one token) vs torch")

    def test_inputs_are_not_modified(self):
        call_leaves_inputs_unchanged(self._block(seed=24), randn(3, 6, D, seed=25), self.VALID)

    @pytest.mark.contract
    def test_errors(self):
        block = self._block(seed=23)
        with pytest.raises(ValueError):
            block(randn(2, 5, D + 1))
        with pytest.raises(ValueError):
            block(randn(5, D))
        with pytest.raises(ValueError):
            block(randn(2, 5, D), torch.ones(2, 4, dtype=torch.bool))
        with pytest.raises(ValueError):
            block(randn(2, 5, D), torch.ones(2, 5))
        with pytest.raises(ValueError):
            blocks.EncoderBlock(D, H, ffn="relu")
        with pytest.raises(ValueError):
            blocks.EncoderBlock(D, H, norm="batchnorm")


# ============================================================================ #30 decoder block


class TestDecoderBlock:
    pytestmark = pytest.mark.canon("transformer/decoder_block")

    MEMORY_VALID = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)

    @staticmethod
    def _block(seed: int = 0, **kwargs) -> blocks.DecoderBlock:
        torch.manual_seed(seed)
        block = blocks.DecoderBlock(D, H, kwargs.pop("d_ff", D_FF), **kwargs)
        _randomise_norms(block, seed + 100)
        return block

    @staticmethod
    def _torch_like(block: blocks.DecoderBlock, norm_first: bool) -> nn.TransformerDecoderLayer:
        ref = nn.TransformerDecoderLayer(D, H, block.ffn.fc1.out_features, dropout=0.0, activation="gelu",
                                         batch_first=True, norm_first=norm_first)
        _copy_attention(ref.self_attn, block.self_attn)
        _copy_attention(ref.multihead_attn, block.cross_attn)
        copy_linear(ref.linear1, block.ffn.fc1.weight, block.ffn.fc1.bias)
        copy_linear(ref.linear2, block.ffn.fc2.weight, block.ffn.fc2.bias)
        _copy_norm(ref.norm1, block.norm_attn)
        _copy_norm(ref.norm2, block.norm_cross)
        _copy_norm(ref.norm3, block.norm_ffn)
        return ref

    @staticmethod
    def _decode_in_steps(block, x, cache, prefill: int, **kwargs) -> torch.Tensor:
        """Prefill ``prefill`` tokens, then one token per call, passing the mask over all keys so far."""
        mask = kwargs.pop("attention_mask", None)
        outs = []
        for start, stop in [(0, prefill)] + [(t, t + 1) for t in range(prefill, x.shape[1])]:
            step_mask = None if mask is None else mask[:, :stop]
            outs.append(block(x[:, start:stop], attention_mask=step_mask, kv_cache=cache, **kwargs))
        return torch.cat(outs, dim=1)

    @pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
    @pytest.mark.parametrize("memory_padded", [False, True], ids=["full_memory", "padded_memory"])
    def test_matches_torch_decoder_layer(self, norm_first, memory_padded):
        block = self._block(seed=1, cross_attention=True, norm_first=norm_first)
        ref = self._torch_like(block, norm_first)
        x, memory = randn(2, 5, D, seed=2), randn(2, 7, D, seed=3)
        tgt_mask = ~masks.causal_mask(5)                                 # torch: True = may NOT attend
        if memory_padded:
            out = block(x, memory, memory_mask=self.MEMORY_VALID)
            expected = ref(x, memory, tgt_mask=tgt_mask, memory_key_padding_mask=~self.MEMORY_VALID)
        else:
            out = block(x, memory)
            expected = ref(x, memory, tgt_mask=tgt_mask)
        assert_close(out, expected, cond=COND, what="DecoderBlock vs nn.TransformerDecoderLayer")

    def test_target_padding_matches_torch(self):
        block = self._block(seed=4, cross_attention=True)
        ref = self._torch_like(block, True)
        x, memory = randn(2, 5, D, seed=5), randn(2, 7, D, seed=6)
        valid = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
        out = block(x, memory, attention_mask=valid)
        expected = ref(x, memory, tgt_mask=~masks.causal_mask(5), tgt_key_padding_mask=~valid)
        assert_close(out[valid], expected[valid], cond=COND, what="DecoderBlock(attention_mask) vs torch")

    def test_attributes(self):
        plain = blocks.DecoderBlock(D, H)
        assert isinstance(plain.self_attn, multihead.MultiHeadAttention)
        assert plain.cross_attn is None and plain.norm_cross is None
        assert isinstance(plain.ffn, ffn.FeedForward) and plain.ffn.fc1.out_features == 4 * D
        cross = blocks.DecoderBlock(D, H, cross_attention=True)
        assert isinstance(cross.cross_attn, multihead.CrossAttention)
        norms = [cross.norm_attn, cross.norm_cross, cross.norm_ffn]
        assert len({id(n) for n in norms}) == 3
        grouped = blocks.DecoderBlock(D, H, n_kv_heads=2, ffn="swiglu", norm="rmsnorm", bias=False)
        assert isinstance(grouped.self_attn, gqa.GroupedQueryAttention) and grouped.self_attn.n_kv_heads == 2
        assert isinstance(grouped.ffn, ffn.SwiGLU) and isinstance(grouped.norm_ffn, normalization_torch.RMSNorm)
        rope = positional.RotaryEmbedding(D // H, 32)
        assert blocks.DecoderBlock(D, H, rope=rope).self_attn.rope is rope

    @pytest.mark.parametrize("kwargs", [{}, {"cross_attention": True}, {"n_kv_heads": 1}], ids=["mha", "cross", "mqa"])
    def test_causality(self, kwargs):
        block = self._block(seed=7, **kwargs)
        memory = randn(2, 7, D, seed=8) if kwargs.get("cross_attention") else None
        x = randn(2, 6, D, seed=9)
        out = block(x, memory)
        for t in range(5):
            y = x.clone()
            y[:, t + 1:] = randn(2, 5 - t, D, seed=10 + t)
            assert_close(block(y, memory)[:, :t + 1], out[:, :t + 1], cond=COND,
                         what=f"DecoderBlock outputs before changed token {t + 1}")

    def test_memory_permutation_and_masked_memory(self):
        block = self._block(seed=15, cross_attention=True)
        x, memory = randn(2, 5, D, seed=16), randn(2, 7, D, seed=17)
        perm = torch.tensor([6, 2, 0, 5, 1, 3, 4])
        assert_close(block(x, memory[:, perm]), block(x, memory), cond=COND, what="DecoderBlock on permuted memory")
        out = block(x, memory, memory_mask=self.MEMORY_VALID)
        ref = self._torch_like(block, True)
        expected = ref(x, memory, tgt_mask=~masks.causal_mask(5), memory_key_padding_mask=~self.MEMORY_VALID)
        assert_close(out, expected, cond=COND, what="DecoderBlock(memory_mask) vs torch")
        changed = memory.clone()
        changed[~self.MEMORY_VALID] = 10.0 * randn(int((~self.MEMORY_VALID).sum()), D, seed=18)
        assert_close(block(x, changed, memory_mask=self.MEMORY_VALID), expected, cond=COND,
                     what="DecoderBlock with masked memory changed")

    @pytest.mark.parametrize(
        "kwargs",
        [{}, {"n_kv_heads": 2}, {"rope": "rope"}, {"n_kv_heads": 2, "rope": "rope", "ffn": "swiglu", "norm": "rmsnorm"},
         {"norm_first": False}],
        ids=["mha", "gqa", "rope", "llama_style", "post_norm"],
    )
    def test_cached_decoding_equals_full_forward(self, kwargs):
        kwargs = dict(kwargs)
        if kwargs.get("rope"):
            kwargs["rope"] = positional.RotaryEmbedding(D // H, max_positions=32)
        block = self._block(seed=19, **kwargs).eval()
        x = randn(2, 9, D, seed=20)
        n_kv = kwargs.get("n_kv_heads") or H
        with torch.no_grad():
            full = block(x)
            cache = kv_cache.KVCache(2, n_kv, D // H, 12)
            steps = self._decode_in_steps(block, x, cache, prefill=5)
        assert cache.length == 9
        assert_close(steps, full, cond=COND, what="cached DecoderBlock decoding vs the full forward")

    def test_cached_decoding_with_cross_attention_and_left_padding(self):
        block = self._block(seed=21, cross_attention=True, n_kv_heads=2).eval()
        x, memory = randn(2, 8, D, seed=22), randn(2, 7, D, seed=23)
        valid = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
        with torch.no_grad():
            full = block(x, memory, attention_mask=valid, memory_mask=self.MEMORY_VALID)
            steps = self._decode_in_steps(block, x, kv_cache.KVCache(2, 2, D // H, 8), prefill=4, memory=memory,
                                          attention_mask=valid, memory_mask=self.MEMORY_VALID)
            unpadded = block(x[:1, 2:], memory[:1])
        assert_close(steps, full, cond=COND, what="cached decoding with cross-attention and left padding")
        # left padding under the key mask equals the unpadded sequence (no positions are involved here)
        assert_close(full[0, 2:], unpadded[0], cond=COND, what="left-padded row vs the unpadded sequence")

    @pytest.mark.parametrize("variant", [{}, {"cross_attention": True}, {"ffn": "swiglu", "norm": "rmsnorm"}])
    def test_zeroed_sublayers_make_the_pre_norm_block_the_identity(self, variant):
        block = self._block(seed=24, **variant)
        _zero_sublayer_outputs(block)
        x = randn(2, 5, D, seed=25)
        memory = randn(2, 3, D, seed=26) if variant.get("cross_attention") else None
        assert torch.equal(block(x, memory), x)

    def test_gradcheck_float64(self):
        torch.manual_seed(27)
        block = blocks.DecoderBlock(8, 2, 12, cross_attention=True, n_kv_heads=1).double()
        _randomise_norms(block, 28)
        x = randn(2, 3, 8, seed=29, dtype=torch.float64, requires_grad=True)
        memory = randn(2, 4, 8, seed=30, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a, m: block(a, m), (x, memory))

    @pytest.mark.numerics_probe
    def test_fp16_probe(self):
        block = self._block(seed=31, cross_attention=True)

        def run(inp: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
            return copy.deepcopy(block).to(inp.dtype)(inp, mem, memory_mask=self.MEMORY_VALID)

        assert_low_precision_matches(run, randn(2, 5, D, seed=32), randn(2, 7, D, seed=33))

    @pytest.mark.numerics_probe
    def test_fully_masked_rows_stay_finite(self):
        block = self._block(seed=34, cross_attention=True)
        x = randn(2, 4, D, seed=35, requires_grad=True)
        memory = randn(2, 3, D, seed=36)
        valid = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])               # left padding: queries 0-1 see nothing
        no_memory = torch.tensor([[0, 0, 0], [1, 1, 1]])                 # row 0 has no memory at all
        out = block(x, memory, attention_mask=valid, memory_mask=no_memory)
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(x.grad).all()

    @pytest.mark.edge_case
    def test_batch_of_one_and_single_token(self):
        block = self._block(seed=37, cross_attention=True)
        ref = self._torch_like(block, True)
        x, memory = randn(1, 1, D, seed=38), randn(1, 1, D, seed=39)
        want = ref(x, memory)
        assert_close(block(x, memory), want, cond=COND, what="DecoderBlock(one token) vs torch")
        with torch.no_grad():
            cache = kv_cache.KVCache(1, H, D // H, 1)
            assert_close(block(x, memory, kv_cache=cache), want, cond=COND, what="DecoderBlock(one token, cache)")

    def test_inputs_are_not_modified(self):
        block = self._block(seed=44, cross_attention=True)
        call_leaves_inputs_unchanged(block, randn(2, 5, D, seed=45), randn(2, 7, D, seed=46),
                                     attention_mask=torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]),
                                     memory_mask=self.MEMORY_VALID)

    @pytest.mark.contract
    def test_errors_leave_the_cache_untouched(self):
        plain = self._block(seed=40)
        cross = self._block(seed=40, cross_attention=True)
        x, memory = randn(2, 3, D, seed=41), randn(2, 4, D, seed=42)
        with pytest.raises(ValueError):
            plain(x, memory)
        with pytest.raises(ValueError):
            cross(x)
        with pytest.raises(ValueError):
            cross(x, randn(3, 4, D, seed=43))
        with pytest.raises(ValueError):
            cross(x, memory, memory_mask=torch.ones(2, 3, dtype=torch.bool))
        with pytest.raises(ValueError):
            blocks.DecoderBlock(D, H, n_kv_heads=3)
        with pytest.raises(ValueError):
            plain(randn(2, 3, D + 2))
        cache = kv_cache.KVCache(2, H, D // H, 8)
        with torch.no_grad():
            cross(x, memory, kv_cache=cache)
            k_before = cache.k.clone()
            with pytest.raises(ValueError):
                cross(x[:, :1], memory, kv_cache=cache, attention_mask=torch.ones(2, 1, dtype=torch.bool))  # needs 4
            with pytest.raises(ValueError):
                cross(x[:, :1], memory, kv_cache=cache, memory_mask=torch.ones(2, 5))
        assert cache.length == 3 and torch.equal(cache.k[:, :, :3], k_before[:, :, :3])
