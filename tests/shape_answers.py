"""One wrong answer per shape drill: the mistake its trap names. The checker must reject every one.

Each value is the body of ``solve`` (its parameters are the problem's inputs, in order)."""

TRAPS = {
    "row-normalise": "return x / x.sum(dim=-1)",
    "scale-each-sequence": "return x * scale",
    "masked-mean": "return (x * mask.unsqueeze(-1)).mean(dim=1)",
    "split-heads": "B, T, D = x.shape; return x.view(B, n_heads, T, D // n_heads)",
    "merge-heads": "B, H, T, d = x.shape; return x.reshape(B, T, H * d)",
    "batched-outer-product": "return a[:, None, :] * c[:, :, None]",
    "pairwise-squared-distances": "return ((x[None, :, :] - y[:, None, :]) ** 2).sum(-1)",
    "attention-scores": "return q @ k.transpose(-2, -1) / q.shape[1] ** 0.5",
    "gather-token-logprobs": "return torch.log_softmax(logits, -1).gather(-1, tokens)",
    "next-token-loss": ("logp = torch.log_softmax(logits, -1)[:, 1:]; "
                        "return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)"),
    "causal-softmax": ("T = scores.shape[-1]; m = torch.triu(torch.ones(T, T, dtype=torch.bool)); "
                       "return torch.softmax(scores.masked_fill(m, -1e9), -1)"),
    "key-padding-mask": "return scores.masked_fill(key_padding[:, None, :], torch.finfo(scores.dtype).min)",
    "batched-matrix-vector": "return (W @ v.unsqueeze(-1)).squeeze()",
    "bilinear-form": "return x @ W @ y.T",
    "one-hot": "return F.one_hot(labels).float()",
    "one-row-per-example": "return x[:, idx]",
    "top-k-rows": "return x.gather(1, scores.argsort(-1)[:, :k, None].expand(-1, -1, x.shape[-1]))",
    "patchify": "B, C, H, W = image.shape; return image.reshape(B, (H // patch) * (W // patch), -1)",
    "keys-for-a-matmul": "return k.transpose(1, 3)",
    "repeat-kv-heads": "return k.repeat(1, groups, 1, 1)",
    "drop-the-singleton": "return x.squeeze()",
    "batchnorm-normalise": ("m = x.mean(dim=(0, 2, 3)); v = x.var(dim=(0, 2, 3), correction=0); "
                            "return (x - m) / torch.sqrt(v + 1e-5)"),
    "layernorm-normalise": "return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5)",
    "batched-diagonal": "return x.diagonal()",
    "stable-log-softmax": "return torch.log(torch.softmax(logits, dim=-1))",
    "sequence-cross-entropy": "return F.cross_entropy(logits, targets)",
    "rotate-half": "h = x.shape[-1] // 2; return torch.stack([-x[..., h:], x[..., :h]], -1).flatten(-2)",
    "class-counts": "return torch.bincount(labels)",
    "cluster-means": ("s = torch.zeros(k, x.shape[1]); s[assign] += x; "
                      "n = torch.bincount(assign, minlength=k).clamp(min=1); return s / n[:, None]"),
    "group-relative-advantages": ("r = rewards.view(group_size, -1); "
                                  "return ((r - r.mean(0, keepdim=True)) / (r.std(0, keepdim=True) + 1e-6)).view(-1)"),
}

# Correct answers written differently from the annotated one: the checker must accept each.
ALTERNATIVES = {
    "row-normalise": "return x / x.sum(-1)[:, None]",
    "masked-mean": "m = mask.float(); return torch.einsum('btd,bt->bd', x, m) / m.sum(1, keepdim=True)",
    "split-heads": "B, T, D = x.shape; return x.reshape(B, T, n_heads, -1).permute(0, 2, 1, 3)",
    "merge-heads": "B, H, T, d = x.shape; return x.permute(0, 2, 1, 3).contiguous().view(B, T, -1)",
    "pairwise-squared-distances": "return torch.cdist(x, y) ** 2",
    "attention-scores": "return torch.einsum('bhtd,bhsd->bhts', q, k) / (q.shape[-1] ** 0.5)",
    "gather-token-logprobs": "return (F.one_hot(tokens, logits.shape[-1]) * torch.log_softmax(logits, -1)).sum(-1)",
    "causal-softmax": ("T = scores.shape[-1]; keep = torch.tril(torch.ones(T, T)).bool(); "
                       "return torch.softmax(scores.masked_fill(~keep, float('-inf')), dim=-1)"),
    "bilinear-form": "return ((x @ W) * y).sum(-1)",
    "one-hot": "return torch.eye(num_classes)[labels]",
    "one-row-per-example": "return x.gather(1, idx[:, None, None].expand(-1, 1, x.shape[-1])).squeeze(1)",
    "keys-for-a-matmul": "return k.transpose(1, 2).transpose(2, 3)",
    "repeat-kv-heads": ("B, H, T, d = k.shape; "
                        "return k[:, :, None].expand(B, H, groups, T, d).reshape(B, H * groups, T, d)"),
    "layernorm-normalise": "return F.layer_norm(x, x.shape[-1:], eps=1e-5)",
    "batched-diagonal": "return torch.einsum('bii->bi', x)",
    "stable-log-softmax": "return torch.log_softmax(logits, dim=-1)",
    "sequence-cross-entropy": "return F.cross_entropy(logits.transpose(1, 2), targets)",
    "cluster-means": ("oh = F.one_hot(assign, k).float(); "
                      "return (oh.T @ x) / oh.sum(0).clamp(min=1)[:, None]"),
    "group-relative-advantages": ("r = rewards.reshape(-1, group_size); "
                                  "z = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-6); "
                                  "return z.flatten()"),
}
