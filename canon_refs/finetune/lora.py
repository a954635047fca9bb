"""Canon #38: LoRA, a low-rank trainable update beside a frozen linear layer, and the helpers around it.

``LoRALinear`` wraps a frozen ``nn.Linear`` of weight ``W (out, in)`` and adds ``scaling · B A`` with
``A (r, in)``, ``B (out, r)`` and ``scaling = alpha / r``: ``y = W x + b + scaling · B (A dropout(x))``. Only
``A`` and ``B`` train. ``merge()`` folds the update into ``W`` for inference (no extra latency) and
``unmerge()`` takes it out again. ``apply_lora`` swaps the targeted linear layers of a model in place and
freezes everything else.

The subtle point is the initialisation. ``B`` starts at zero and ``A`` random (Kaiming-uniform, as
``nn.Linear``), so at step 0 the wrapped model computes exactly the base model, and the first gradient
reaches ``B`` only: ``∂L/∂A = scaling · Bᵀ (∂L/∂y) xᵀ = 0`` while ``∂L/∂B = scaling · (∂L/∂y)(A x)ᵀ ≠ 0``.
Both zero would never train (a saddle point); both random would start from a perturbed model. The
second point is ``scaling = alpha / r`` rather than ``alpha``: with ``alpha`` fixed, changing ``r`` then
leaves the update's scale (and the learning rate that suits it) roughly unchanged.

Shape letters: ``...`` leading dims, ``d_in``/``d_out`` the base layer's ``in_features``/``out_features``,
``r`` the rank.

Trade-off: the adapter is applied as two thin matmuls ``(x Aᵀ) Bᵀ`` instead of forming ``B A`` and
adding it to ``W``, because ``x Aᵀ`` costs ``r · in`` per token against ``out · in`` for the dense update:
for a 4096 x 4096 projection at ``r = 8`` the adapter holds 65 536 weights, 0.39% of the 16.8M in ``W``,
and the gradient step touches only those. ``merge`` pays the dense ``out x in`` product once, at
deployment.

What to test: the wrapper equals ``base(x)`` exactly at init, ``A`` gets a zero gradient and ``B`` a non-zero
one, ``LoRALinear(nn.Linear(64, 32), r=4)`` has 384 trainable parameters, ``apply_lora`` on a GPT (#31)
leaves only the adapters trainable with ``Σ r·(in + out)`` parameters and its base weights bitwise
unchanged after training, ``merge``/``unmerge`` round trips, and ``lora_state_dict`` holding only adapters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["LoRALinear", "apply_lora", "count_trainable_parameters", "lora_state_dict"]


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-``r`` update: ``(..., in) -> (..., out)``.

    Args:
        base: the ``nn.Linear`` to adapt; its parameters are frozen (``requires_grad=False``) in place.
        r: rank, ``>= 1``. alpha: scale numerator, ``> 0`` (``scaling = alpha / r``).
        dropout: dropout on the adapter's input only (training mode), in ``[0, 1)``.

    Attributes: ``base``; ``lora_A (r, in)``, Kaiming-uniform with ``a = √5``; ``lora_B (out, r)``, zeros; both
    in the base weight's dtype and device; ``scaling``; ``merged``.
    Raises ValueError for a ``base`` that is not ``nn.Linear``, ``r < 1``, ``alpha <= 0`` or ``dropout`` outside
    [0, 1). Source: Hu et al. 2021, "LoRA", eq. 3 and section 4.1 (init, ``alpha / r``).
    """

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0) -> None:
        super().__init__()
        _check_base(base)
        _check_hyperparameters(r, alpha, dropout)
        self.base = base
        for param in self.base.parameters():
            param.requires_grad_(False)
        weight = base.weight
        self.r = r
        self.alpha = alpha
        self.scaling = alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features,     # (r, d_in)
                                               dtype=weight.dtype, device=weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r,    # (d_out, r)
                                               dtype=weight.dtype, device=weight.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout)
        self.merged = False

    def delta_weight(self) -> Tensor:
        """The dense update ``scaling · B @ A``, ``(out, in)`` in the adapters' dtype."""
        return self.scaling * (self.lora_B @ self.lora_A)                # (d_out, d_in)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., in) -> (..., out)``: ``base(x) + scaling · dropout(x) Aᵀ Bᵀ`` (just ``base(x)`` once merged).

        Raises ValueError if the last dim of ``x`` is not ``in_features``.
        """
        _check_input(x, self.base.in_features)
        out = self.base(x)                                               # (..., d_out)
        if self.merged:
            return out
        down = self.dropout(x) @ self.lora_A.mT                          # (..., r)
        up = down @ self.lora_B.mT                                       # (..., d_out)
        return out + self.scaling * up

    @torch.no_grad()
    def merge(self) -> None:
        """Fold the update into the base weight, ``W += scaling · B @ A``; forward then skips the adapter.

        Raises RuntimeError if already merged (merging twice would add the update twice).
        """
        if self.merged:
            raise RuntimeError("LoRALinear.merge() called on an already merged layer; call unmerge() first")
        self.base.weight += self.delta_weight().to(self.base.weight.dtype)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the update out of the base weight again, ``W -= scaling · B @ A``.

        Raises RuntimeError if the layer is not merged.
        """
        if not self.merged:
            raise RuntimeError("LoRALinear.unmerge() called on a layer that is not merged")
        self.base.weight -= self.delta_weight().to(self.base.weight.dtype)
        self.merged = False

    def extra_repr(self) -> str:
        """Shown by ``print(module)``: rank, alpha and merge state."""
        return f"r={self.r}, alpha={self.alpha}, merged={self.merged}"


def apply_lora(model: nn.Module, target_modules: Sequence[str] = ("q_proj", "v_proj"), r: int = 8,
               alpha: float = 16.0, dropout: float = 0.0) -> nn.Module:
    """Wrap every ``nn.Linear`` whose attribute name is in ``target_modules`` in a ``LoRALinear``, in place.

    Every other parameter of ``model`` is frozen, so afterwards only the adapters train. Layers already
    wrapped are left alone (a ``LoRALinear`` is never wrapped again, nor is its ``base``). Returns ``model``.
    Raises ValueError for invalid ``r``/``alpha``/``dropout``, a ``target_modules`` given as a bare string,
    or when no module of ``model`` is named as in ``target_modules``.
    Source: Hu et al. 2021, section 4.2 (adapting ``W_q`` and ``W_v``); the name matching mirrors PEFT.
    """
    _check_targets(model, target_modules)
    _check_hyperparameters(r, alpha, dropout)
    targets = set(target_modules)
    matches = [(parent, name, child)
               for parent in model.modules() if not isinstance(parent, LoRALinear)
               for name, child in parent.named_children()
               if name in targets and isinstance(child, nn.Linear)]
    if not matches:
        return model                                                     # every target is already wrapped
    for param in model.parameters():
        param.requires_grad_(False)
    for parent, name, child in matches:
        setattr(parent, name, LoRALinear(child, r=r, alpha=alpha, dropout=dropout))
    return model


def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Only the adapter tensors of ``model.state_dict()``: the entries whose key contains ``"lora_"``."""
    return {key: value for key, value in model.state_dict().items() if "lora_" in key}


def count_trainable_parameters(model: nn.Module) -> int:
    """Number of parameters with ``requires_grad``; shared (tied) parameters are counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _check_hyperparameters(r: int, alpha: float, dropout: float) -> None:
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"r must be an int >= 1, got {r!r}")
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be finite and > 0, got {alpha!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def _check_base(base: nn.Module) -> None:
    """ValueError unless ``base`` is an ``nn.Linear``."""
    if not isinstance(base, nn.Linear):
        raise ValueError(f"base must be an nn.Linear, got {type(base).__name__}")


def _check_input(x: Tensor, in_features: int) -> None:
    """ValueError unless the last dim of ``x`` is ``in_features``."""
    if x.dim() < 1 or x.shape[-1] != in_features:
        raise ValueError(f"x must have last dim in_features={in_features}, got shape {tuple(x.shape)}")


def _check_targets(model: nn.Module, target_modules: Sequence[str]) -> None:
    """ValueError for a bare-string ``target_modules`` or when no module of ``model`` has one of its names."""
    if isinstance(target_modules, str):
        raise ValueError(f"target_modules must be a sequence of names, not the string {target_modules!r}")
    targets = set(target_modules)
    if not any(name.rpartition(".")[2] in targets for name, _ in model.named_modules()):
        raise ValueError(f"no module of the model is named as in target_modules={sorted(targets)}")
