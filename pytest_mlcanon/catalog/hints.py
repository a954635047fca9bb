"""Three escalating hints for each of the sixty items (``mlcanon hint ITEM --level 1|2|3``).

* Level 1, **the one equation and the shapes**: what to compute, on which shapes; enough to start
  from a blank file if the maths has slipped.
* Level 2, **the pitfall**: the numerics or indexing trap the item's tests (and interviewers)
  probe: the off-by-one, the mask value, the eps placement, the degenerate case.
* Level 3, **the skeleton**: signatures and the shape line of every intermediate, with the bodies
  left out. It is generated from the reference (``stubs.skeleton``) when the installed canon has
  one, so it always matches the API; :data:`SKELETONS` holds hand-written ones for items whose
  reference may be missing from an installed canon.

Each level costs something: asking is recorded on the running attempt (``hints`` in
``progress.json``), so a pass with a level-3 hint reads differently from a clean one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_mlcanon.catalog import Item

LEVELS = (1, 2, 3)
LEVEL_TITLES = {1: "the one equation and the shapes", 2: "the pitfall", 3: "the skeleton"}

# Items sharing a module: the level-3 skeleton shows only the item's own names.
SKELETON_NAMES: dict[int, tuple[str, ...]] = {
    9: ("SGD", "clip_grad_norm"),
    10: ("Adam", "AdamW"),
    13: ("batchnorm_forward", "batchnorm_backward"),
    14: ("layernorm_forward", "layernorm_backward"),
    26: ("MultiHeadAttention",),
    28: ("CrossAttention",),
    29: ("EncoderBlock",),
    30: ("DecoderBlock",),
}


@dataclass(frozen=True)
class ItemHints:
    """Levels 1 and 2 of one item (level 3 is a skeleton, see :func:`pytest_mlcanon.catalog.hints`)."""

    equation: str
    pitfall: str


HINTS: dict[int, ItemHints] = {
    # -- block 1: foundations ---------------------------------------------------------------------------
    1: ItemHints(
        "Minimise L = (1/2n)||Xw + b - y||^2 + (l2/2)||w||^2 (intercept not penalised).\n"
        "Closed form on centred data: (Xc^T Xc + n*l2*I) w = Xc^T yc, then b = mean(y) - mean(X) @ w.\n"
        "Gradient: dL/dw = X^T r / n + l2*w, dL/db = mean(r) with r = Xw + b - y.\n"
        "Conventions: loss_history_ holds one objective value per GD iteration, taken before its update "
        "(empty for method='normal'); fit_intercept=False keeps intercept_ == 0.0; a singular system "
        "(duplicated column) raises nothing and any least-squares w is accepted.\n"
        "Shapes: X (n, d), y (n,), Xc (n, d), Gram (d, d), rhs (d,), residual r (n,), grad (d,).",
        "Never form inv(X^T X): solve the system with np.linalg.solve and fall back to lstsq when it is "
        "singular (a duplicated column). Centre X and y first so the intercept drops out and is not "
        "penalised by l2; with fit_intercept=False skip the centring and keep intercept_ == 0.0. The ridge "
        "term is n*l2*I because the loss averages over n.",
    ),
    2: ItemHints(
        "p = sigmoid(Xw + b); L = mean(logaddexp(0, z) - y*z) + (l2/2)||w||^2 with z = Xw + b.\n"
        "Gradient: dL/dw = X^T (p - y) / n + l2*w, dL/db = mean(p - y).\n"
        "Conventions: GD starts from w = 0, b = 0; loss_history_ is the objective before each update; "
        "predict = 1[p >= threshold] as int64; sigmoid saturates to 0.0 and 1.0 with no overflow warning.\n"
        "Shapes: X (n, d), z (n,), p (n,), residual p - y (n,), grad_w (d,).",
        "Write sigmoid as exp(-logaddexp(0, -z)) and the loss with logaddexp, never log(sigmoid(z)): "
        "sigmoid(1000) must be exactly 1.0 and sigmoid(-1000) exactly 0.0 with no overflow warning, and a "
        "logit of 1e4 with label 0 costs exactly 1e4. Labels must be 0/1; predict returns int64.",
    ),
    3: ItemHints(
        "P = softmax(XW + b) row-wise; L = -mean(log P[i, y_i]) + (l2/2)||W||^2.\n"
        "Gradient: dW = X^T (P - Y) / n + l2*W, db = mean(P - Y, axis=0), Y the one-hot labels.\n"
        "Conventions: inputs converted to float64; GD starts from W = 0, b = 0; K = n_classes, else "
        "max(y) + 1; predict ties go to the lower class index; softmax finite with no warning at +-1e4.\n"
        "Shapes: logits (n, K), P (n, K), Y (n, K), dW (d, K), db (K,).",
        "Subtract the row max before exp (keepdims=True so it broadcasts back) and compute log_softmax as "
        "z - logsumexp(z); log(softmax(z)) is -inf at logits of +-1e4. Build the one-hot with "
        "np.arange(n) indexing, not a loop. K comes from n_classes, else max(y) + 1; a class absent from y "
        "must not produce NaN.",
    ),
    4: ItemHints(
        "||a - b||^2 = ||a||^2 - 2 a.b + ||b||^2 for all pairs at once: "
        "(A**2).sum(1)[:, None] - 2 A @ B.T + (B**2).sum(1)[None, :].\n"
        "Then the k smallest per query row, and a vote over the neighbours' labels.\n"
        "Conventions: squared distances clipped at 0; equal distances keep the lower training index; a vote "
        "tie goes to the smallest label; distance weights are 1/max(dist, 1e-12); C = max(y) + 1.\n"
        "Shapes: norms (n, 1) and (1, m), cross term (n, m), neighbour indices (m, k), vote counts (m, C).",
        "The expansion can dip slightly below 0 by cancellation: clip at 0 before sqrt. Ties: use a stable "
        "argsort (kind='stable') so equal distances keep the lower index, and break vote ties towards the "
        "smallest label (argmax does). Distance weights 1/max(dist, 1e-12) so an exact duplicate dominates "
        "instead of dividing by zero.",
    ),
    5: ItemHints(
        "Lloyd: assign each point to its nearest centroid (argmin over the (n, K) squared distances), then "
        "move each centroid to the mean of its points; stop when the largest move <= tol.\n"
        "inertia = sum of squared distances to the assigned centroid; the returned labels and inertia belong "
        "to the returned centroids. Distance ties go to the lower centroid index.\n"
        "Convention: an empty cluster keeps its previous centroid or is re-seeded at a data point (either is "
        "accepted), never NaN.\n"
        "Shapes: X (n, d), distances (n, K), labels (n,), centroids (K, d).",
        "An empty cluster makes its mean 0/0 = NaN: keep its old centroid, or re-seed it with the point "
        "farthest from its current centroid. Assign once more after the last update, or the labels are "
        "stale. k-means++ samples each next centre with probability proportional to D(x)^2 from the "
        "generator you were given (never the global RNG), so the same seed gives the same result. Reuse "
        "#4's pairwise distances instead of a loop.",
    ),
    6: ItemHints(
        "gini(y) = 1 - sum_c p_c^2. Split decrease = gini(parent) - (n_L/n) gini(L) - (n_R/n) gini(R), "
        "left branch x[f] <= threshold, thresholds at midpoints of consecutive distinct sorted values.\n"
        "Per feature: sort once, cumulative class counts give every split's left/right counts.\n"
        "Conventions: a split needs a decrease > 1e-12; ties (within 1e-12) go to the lowest feature, then "
        "the lowest threshold; the midpoint satisfies lo <= t < hi; Node.value holds class counts (C,), "
        "C = max(y) + 1; predict ties go to the lower class.\n"
        "Shapes: order (n,), cumulative counts (n-1, C), left/right gini (n-1,).",
        "Only cut between distinct values (equal neighbours give no threshold), respect min_samples_leaf on "
        "both sides, and split only when the decrease is > 1e-12. Ties go to the lowest feature, then the "
        "lowest threshold: compare with a tolerance, not with >. A scan that recounts classes per threshold "
        "is O(n^2): use cumsum of one-hot labels.",
    ),
    7: ItemHints(
        "Centre X, take the SVD Xc = U S Vt; components = the first k rows of Vt, "
        "explained_variance = S^2 / (n - 1), Z = Xc @ components.T, X_hat = Z @ components + mean.\n"
        "Conventions: ddof = 1; each component's largest-|.| entry is positive; explained_variance_ratio_ is "
        "zeros for constant data; components_ are orthonormal rows in descending variance.\n"
        "Shapes: Xc (n, d), U (n, r), S (r,), Vt (r, d), components (k, d), Z (n, k).",
        "Use full_matrices=False. Variance uses ddof=1 (n - 1). Fix the sign of each component so its "
        "largest-|.| entry is positive, or comparisons flip at random; transform new data with the "
        "training mean, never its own.",
    ),
    8: ItemHints(
        "E-step: log r_nk = log w_k + log N(x_n | mu_k, S_k) - logsumexp_k(...); "
        "M-step: N_k = sum_n r_nk, w = N_k/n, mu_k = r_k^T X / N_k, S_k = sum_n r_nk (x_n - mu_k)(x_n - mu_k)^T / N_k + reg*I.\n"
        "log N via Cholesky L: -0.5 ||L^-1 (x - mu)||^2 - sum log diag(L) - (d/2) log 2pi.\n"
        "Conventions: covariances are ML (divide by N_k) plus reg_covar*I; an empty component stays finite "
        "(covariance reg_covar*I); log_likelihood_history_ has one mean log-likelihood per E-step and fit "
        "stops (converged_) when two successive entries differ by less than tol.\n"
        "Shapes: log-probs (n, K), logsumexp (n, 1), resp (n, K), N_k (K,), means (K, d), covs (K, d, d).",
        "Normalise responsibilities with logsumexp (keepdims) or a point 1e4 away underflows every "
        "component to 0 and divides 0/0. Never inv or det: solve_triangular with the Cholesky factor. Add "
        "reg_covar*I to every covariance so a zero-variance axis stays positive definite; covariances are "
        "ML (divide by N_k, not N_k - 1).",
    ),
    9: ItemHints(
        "torch semantics: g <- g + wd*p; v <- mu*v + g (v starts at 0, so the first step uses v = g); "
        "nesterov update = g + mu*v; p <- p - lr*update.\n"
        "clip_grad_norm: total = sqrt(sum of every grad's squared norm); if total > max_norm scale every "
        "grad by max_norm/total (torch's max_norm/(total + 1e-6) is accepted too); return total measured "
        "before clipping.\n"
        "Conventions: dampening 0; lr is a public attribute read at every step; params are updated in place "
        "and grads are never modified by step.\n"
        "Shapes: one velocity buffer per parameter, same shape as it.",
        "Update the arrays in place (p -= ..., not p = p - ...), or the caller's parameters never move. The "
        "clip is one global norm across all arrays, not per array, and a cap, not a normalisation: "
        "[0.3, 0.4] with max_norm 1 stays unchanged. Read self.lr at every step so a schedule can change it.",
    ),
    10: ItemHints(
        "m <- b1*m + (1-b1)*g; v <- b2*v + (1-b2)*g^2; m_hat = m/(1 - b1^t); v_hat = v/(1 - b2^t); "
        "p <- p - lr*m_hat/(sqrt(v_hat) + eps).\n"
        "Adam: coupled decay g <- g + wd*p. AdamW: decoupled, p <- p*(1 - lr*wd) before the Adam update.\n"
        "Conventions: eps outside the sqrt (torch); t counts steps taken (1 after the first); lr is read at "
        "every step; grads are never modified.\n"
        "Shapes: m and v like each parameter; t is the shared step count.",
        "Increment t before the bias correction (the first step uses t = 1, so m_hat = g and the first "
        "move is lr*g/(|g| + eps)). eps sits outside the sqrt here, as in torch. AdamW's decay multiplies "
        "the parameter, it is not added to the gradient: with zero gradients the parameter shrinks by "
        "exactly (1 - lr*wd) per step.",
    ),
    11: ItemHints(
        "Forward: h_l = a_l @ W_l + b_l, a_{l+1} = act(h_l), no activation after the last layer.\n"
        "Loss: softmax cross-entropy, dlogits = (softmax - onehot)/n.\n"
        "Backward: dW_l = a_l^T dh_l, db_l = dh_l.sum(0), da_l = dh_l @ W_l^T, dh_{l-1} = da_l * act'(h_{l-1}).\n"
        "Conventions: relu'(0) = 0 (inside backward too); He normal init N(0, 2/fan_in) for relu, Xavier "
        "normal N(0, 2/(fan_in + fan_out)) for tanh, zero biases; float32 logits are upcast; train_mlp "
        "returns the loss before each update, minibatches drawn without replacement by default_rng(seed).\n"
        "Shapes: a_l (n, d_l), W_l (d_l, d_{l+1}), h_l (n, d_{l+1}), dW_l (d_l, d_{l+1}), db_l (d_{l+1},).",
        "The 1/n lives in dlogits once; do not divide again in dW. relu'(0) = 0. Cache the "
        "pre-activations in forward, and raise RuntimeError when backward runs before forward. Subtract "
        "the row max in the softmax so logits of +-1e4 stay finite. He init N(0, 2/fan_in) for relu, "
        "Xavier for tanh, zero biases.",
    ),
    12: ItemHints(
        "Each op creates a Value(out, children) with a _backward closure applying the local chain rule: "
        "for c = a*b, a.grad += b.data*c.grad and b.grad += a.data*c.grad.\n"
        "backward(): topological order (inputs before outputs), self.grad = 1, then run _backward in "
        "reverse order.\n"
        "Conventions (torch's): backward resets interior grads, lets leaf grads accumulate across calls, "
        "and seeds the root with += 1; relu'(0) = 0; works for graphs deeper than the recursion limit; "
        "sigmoid(+-1000) is 1.0 / 0.0 with no OverflowError.\n"
        "No tensors: scalars only.",
        "Accumulate with +=, never =: a node used twice (a*a, a diamond) sums its contributions. Build the "
        "topological order iteratively (an explicit stack), or a chain of 10 000 additions hits "
        "RecursionError. Reset interior grads at the start of backward but let leaf grads accumulate. "
        "sigmoid(+-1000) must not overflow: branch on the sign.",
    ),
    # -- block 2: layers, convolution, detection ----------------------------------------------------------
    13: ItemHints(
        "Train: mu, var over every axis but 1 (var biased); xhat = (x - mu)/sqrt(var + eps); "
        "y = gamma*xhat + beta; running stats rm <- (1-m) rm + m mu, rv <- (1-m) rv + m var_unbiased.\n"
        "Backward: dxhat = dy*gamma; dx = (1/N) rstd (N dxhat - sum dxhat - xhat sum(dxhat*xhat)) per channel.\n"
        "Conventions (torch's): normalise with the biased variance, update running_var with the unbiased one; "
        "momentum weights the new statistic; eps inside the sqrt; in eval the running stats are constants.\n"
        "Shapes: x (N, C) or (N, C, H, W); mu, var (C,) viewed as (1, C, 1, 1); xhat like x.",
        "eps goes inside the sqrt. Normalise with the biased variance but update the running variance "
        "with the unbiased one (N/(N-1)). Eval mode uses the running stats and its backward is just "
        "dy*gamma/sqrt(rv + eps). Reduce over axes (0, 2, 3) for 4-D input, not just axis 0.",
    ),
    14: ItemHints(
        "Per row over the last axis D: mu = mean(x), var = mean((x - mu)^2), rstd = 1/sqrt(var + eps), "
        "xhat = (x - mu)*rstd, y = gamma*xhat + beta.\n"
        "Backward: dxhat = dy*gamma; dx = rstd*(dxhat - mean(dxhat) - xhat*mean(dxhat*xhat)); "
        "dgamma = sum(dy*xhat), dbeta = sum(dy) over every leading axis.\n"
        "Conventions: biased variance, eps inside the sqrt; inputs converted to float64.\n"
        "Shapes: x (..., D), mu/var/rstd (..., 1), gamma/beta (D,).",
        "keepdims=True on every reduction, or (..., ) will not broadcast back against (..., D). eps inside "
        "the sqrt. dgamma and dbeta sum over all leading axes (reshape to (-1, D)), not only axis 0. A "
        "constant row has var 0: the output must equal beta, finite.",
    ),
    15: ItemHints(
        "y = x / sqrt(mean(x^2, dim=-1, keepdim=True) + eps) * weight; no mean subtraction, no bias.\n"
        "Conventions: float16/bfloat16 computed in float32 and cast back, float32/float64 in their own dtype; "
        "the module's only parameter is `weight` (d,), float32, initialised to ones; eps default 1e-6.\n"
        "Shapes: x (..., d), mean square and rstd (..., 1), weight (d,), y (..., d).",
        "Upcast float16/bfloat16 to float32 before squaring (1000^2 overflows fp16's 65504) and cast the "
        "result back to x.dtype; float64 stays float64. Use torch.rsqrt(ms + eps): eps inside the root.",
    ),
    16: ItemHints(
        "im2col unrolls every receptive field into a column: cols (N, C*kh*kw, L) with L = H_out*W_out; "
        "the convolution is one matmul w.reshape(C_out, -1) @ cols -> (N, C_out, L) -> (N, C_out, H_out, W_out).\n"
        "H_out = (H + 2p - kh)//s + 1. Backward: dcols = W^T @ dy, dx = col2im(dcols) (overlaps summed), "
        "dW = sum_n dy_n @ cols_n^T.\n"
        "Conventions: cross-correlation as torch (no kernel flip); im2col rows in (c, i, j) order, columns "
        "oh*W_out + ow; inputs (integer images too) converted to float64; db is None without a bias; FLOPs "
        "count 2 per multiply-add; receptive_field = 1 + sum_l (k_l - 1) * prod_{j<l} s_j.",
        "Row order inside a column must be (c, i, j), the order of w.reshape(C_out, -1). Loop over the "
        "kh*kw kernel offsets with strided slices, never over N or output positions. col2im must ADD "
        "overlapping contributions (np.add.at or +=), not assign. Cross-correlation, as torch: no kernel flip.",
    ),
    17: ItemHints(
        "conv3x3(C->w, pad 1) - ReLU - maxpool2 - conv3x3(w->2w, pad 1) - ReLU - global average pool - "
        "Linear(2w, n_classes); train with AdamW on F.cross_entropy(logits, y).\n"
        "Conventions: both convs 3x3 with padding 1, one nn.Linear head, logits out; train_cnn returns a dict "
        "with 'losses' (one float per step, extra keys allowed), draws batches from a private generator "
        "seeded with seed, and restores the model's train/eval mode, as evaluate does.\n"
        "Shapes: (B, C, H, W) -> (B, w, H, W) -> (B, w, H/2, W/2) -> (B, 2w, H/2, W/2) -> (B, 2w) -> (B, n_classes).",
        "Return logits: no softmax before cross_entropy. Pool globally (mean over dims (2, 3)) so any input "
        "size works. Draw the batch order from a torch.Generator seeded from seed, never the global RNG, "
        "and restore model.training after evaluate.",
    ),
    18: ItemHints(
        "IoU = inter / union with lt = max(b1[:, None, :2], b2[None, :, :2]), rb = min(b1[:, None, 2:], b2[None, :, 2:]), "
        "wh = (rb - lt).clamp(min=0), inter = wh[..., 0]*wh[..., 1], union = area1[:, None] + area2[None, :] - inter.\n"
        "GIoU = IoU - (C - union)/C with C the area of the smallest enclosing box.\n"
        "Conventions: float16/bfloat16 boxes are computed in float32 and the result cast back; a pair whose "
        "union (or enclosing box) has zero area gives 0, not NaN.\n"
        "Shapes: boxes (N, 4), (M, 4); lt, rb, wh (N, M, 2); inter, union, IoU (N, M).",
        "Subtract the intersection from the union. Clamp wh at 0 so disjoint boxes give 0, not a positive "
        "product of two negatives. Divide by union.clamp_min(finfo(dtype).eps) so degenerate boxes stay "
        "finite. cxcywh -> xyxy uses half-widths: x1 = cx - w/2.",
    ),
    19: ItemHints(
        "Sort by score (descending, stable); repeatedly keep the best remaining box and drop every box "
        "whose IoU with it is > threshold.\n"
        "batched_nms: offset each class's boxes by class_id * (max coordinate + 1) so classes never "
        "overlap, then one nms.\n"
        "Conventions: suppress when IoU > threshold (strict); equal scores go lower index first, however "
        "many are tied; the result is sorted by decreasing score.\n"
        "Shapes: boxes (N, 4), scores (N,), order (N,), IoU (N, N) or one row (N,), keep mask (N,), result (K,) long.",
        "Threshold 1.0 keeps everything, 0 suppresses any overlap. torch.sort without stable=True orders "
        "more than 16 ties arbitrarily on CPU: sort with stable=True. A suppressed box must not suppress "
        "others. Empty input returns an empty long tensor of shape (0,).",
    ),
    20: ItemHints(
        "Anchors: per cell centre ((x + 0.5)*stride, (y + 0.5)*stride), per size s and ratio r = h/w: "
        "w = s/sqrt(r), h = s*sqrt(r). Matching: IoU (N_a, M), best gt per anchor; >= pos_iou -> gt index, "
        "< neg_iou -> -1, between -> -2.\n"
        "Encode: dx = (g_cx - a_cx)/a_w, dw = log(g_w/a_w).\n"
        "Conventions: anchors ordered by cell row-major (y then x), then sizes outer, ratios inner; IoU "
        "exactly pos_iou is positive, exactly neg_iou is ignore; low-quality rule: every anchor achieving a "
        "gt's max IoU (> 0, ties included) becomes positive, assigned to its OWN best gt; decode clamps "
        "dw, dh at log(1000/16); no gt: every anchor is -1.\n"
        "Shapes: shifts (H_f*W_f, 1, 4) + base anchors (A, 4) -> (N_a, 4); IoU (N_a, M); max/argmax (N_a,).",
        "The low-quality rule is what gives a small or thin object any positive anchor at all; assigning "
        "the promoted anchor to the gt that promoted it (instead of its own argmax) is the common slip. "
        "exp of an unclamped size delta overflows (exp(89) is inf in float32). Zero anchors or zero gts "
        "must not reach a max over an empty dim.",
    ),
    21: ItemHints(
        "FL = alpha_t * (1 - p_t)^gamma * CE, with CE = BCE-with-logits, p_t = p where target 1 else 1 - p, "
        "alpha_t = alpha where target 1 else 1 - alpha.\n"
        "Softmax version: p_t = exp(log_softmax(logits))[target], CE = -log p_t.\n"
        "Conventions: alpha=None means no alpha weighting; reduction='mean' is the plain mean (over N for "
        "the softmax form, not alpha-weighted); integer or bool targets are accepted (sigmoid form).\n"
        "Shapes: every intermediate has the logits' shape; reduction mean/sum gives ().",
        "Compute CE with binary_cross_entropy_with_logits / log_softmax, not log(sigmoid): logits of "
        "+-1e4 must give finite losses and gradients. alpha=None means no alpha weighting; gamma = 0 "
        "reduces exactly to cross-entropy. The softmax version's mean is a plain mean over N.",
    ),
    # -- block 3: sequences and attention ---------------------------------------------------------------------
    22: ItemHints(
        "h_t = tanh(x_t Wxh + h_{t-1} Whh + bh).\n"
        "BPTT, from t = T-1 down to 0: dh = dhs[:, t] + dh_next; dpre = dh * (1 - h_t^2); "
        "dWxh += x_t^T dpre; dWhh += h_{t-1}^T dpre; dbh += dpre.sum(0); dx_t = dpre Wxh^T; dh_next = dpre Whh^T.\n"
        "Conventions: hs[:, t] is the state after reading x[:, t]; init U(-1/sqrt(H), 1/sqrt(H)) for every "
        "entry, bh standing for torch's bias_ih + bias_hh; inputs converted to float64.\n"
        "Shapes: x (B, T, D), h (B, H), hs (B, T, H), Wxh (D, H), Whh (H, H), dpre (B, H).",
        "The gradient into h_t has two parts: the loss at step t and the future (dh_next); forgetting "
        "dh_next is the classic bug. h_{-1} is h0, so dWhh at t = 0 uses h0 and dh_next after the loop is "
        "d h0. Use (1 - h^2) from the cached output, not tanh' recomputed on something else.",
    ),
    23: ItemHints(
        "gates = x_t Wx + h_{t-1} Wh + b, split [i, f, g, o]: i, f, o = sigmoid, g = tanh; "
        "c_t = f*c_{t-1} + i*g; h_t = o*tanh(c_t).\n"
        "Backward: dc = dc_next + dh*o*(1 - tanh(c)^2); di = dc*g, df = dc*c_prev, dg = dc*i, do = dh*tanh(c); "
        "dc_next = dc*f.\n"
        "Conventions: torch's gate order [i, f, g, o]; weights U(-1/sqrt(H), 1/sqrt(H)), b zeros except "
        "b[H:2H] = forget_bias; h_T == hs[:, -1]; dh_T / dc_T default to zero.\n"
        "Shapes: gates (B, 4H), each gate (B, H), Wx (D, 4H), Wh (H, 4H), b (4H,).",
        "Gate order is torch's [i, f, g, o], so forget_bias goes into b[H:2H]. Multiply each gate's "
        "gradient by its own derivative (sigmoid: s(1 - s), tanh: 1 - t^2) before concatenating into dgates. "
        "Carry both dh_next and dc_next backwards, and add dh_T/dc_T at the last step. Use a stable sigmoid.",
    ),
    24: ItemHints(
        "Start from the UTF-8 bytes (ids 0..255). Repeat: count adjacent pairs, merge the most frequent "
        "pair into a new id 256, 257, ... (merge left to right, non-overlapping), record merges[pair] = id "
        "and vocab[id] = vocab[a] + vocab[b].\n"
        "Encode: repeatedly merge the present pair with the LOWEST rank. Decode: join bytes, "
        "decode('utf-8', errors='replace').\n"
        "Conventions: ties go to the pair that occurs first; training stops early when the best pair occurs "
        "fewer than twice; retraining replaces the previous merges.",
        "max over an insertion-ordered dict gives the first-occurring pair on ties. Encoding merges by rank, "
        "not by frequency in the new text. merge([5, 5, 5], (5, 5), 9) is [9, 5]: skip past a merged pair.",
    ),
    25: ItemHints(
        "out = softmax(q k^T * scale + mask) v with scale = 1/sqrt(d_k).\n"
        "Conventions: a bool mask is an ALLOW mask (True may attend); a False entry gets weight exactly 0 and "
        "a query with no allowed key returns zeros; a float mask is an additive bias; float16/bfloat16 are "
        "computed in float32 and cast back; dropout is inverted (survivors / (1 - p)), drawn from generator.\n"
        "Shapes: q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v); scores and weights (..., T_q, T_k); "
        "out (..., T_q, d_v).",
        "Transpose K with k.transpose(-2, -1) (k.T reverses every axis of a 4-D tensor). A bool mask is an "
        "ALLOW mask: fill False with torch.finfo(scores.dtype).min, never -inf (an all-masked row of -inf "
        "softmaxes to NaN), and zero such rows' weights afterwards. Subtract the row max before exp; run "
        "the softmax in float32 for fp16 input.",
    ),
    26: ItemHints(
        "q, k, v = proj(x); split heads (B, T, d) -> (B, T, H, d_h) -> (B, H, T, d_h); attention per head "
        "(#25); merge (B, H, T, d_h) -> (B, T, H, d_h) -> (B, T, d); out_proj.\n"
        "Conventions: masks are (T_q, T_k), (B, T_q, T_k) or (B, 1|H, T_q, T_k), bool allow or float bias; "
        "with a cache the causal mask and the default RoPE positions start at the cache length, and RoPE "
        "is applied before keys enter the cache; dropout only in training.\n"
        "Shapes: x (B, T_q, d), split (B, H, T, d_h) with d_h = d // H, weights (B, H, T_q, T_k).",
        "After transpose(1, 2) the tensor is not contiguous: merge with .reshape (or .contiguous().view), "
        "never .view. The causal mask of a cached step is offset by the cache length "
        "(causal_mask(T_q, T_k) aligns bottom-right). A 2-D mask is (T_q, T_k); key padding (B, T_k) must "
        "become (B, 1, 1, T_k) first.",
    ),
    27: ItemHints(
        "causal_mask(T_q, T_k)[i, j] = j <= (T_k - T_q) + i (queries are the LAST T_q positions); "
        "padding_mask[b, t] = t < lengths[b] (right padding); mask_to_bias: 0 where True, finfo(dtype).min where False.\n"
        "Shapes: index grids (T_q, 1) and (1, T_k); masks (T_q, T_k), (B, T), (B, 1, 1, T_k), (B, 1, T, T).",
        "Masks are allow-masks (True = may attend). Combine bool masks with AND and convert to a bias "
        "once: adding two finfo.min biases overflows to -inf. float16's min is -65504, not -1e9. Build "
        "from index comparisons (arange) rather than loops; positions_from_mask is cumsum - 1 clamped at 0.",
    ),
    28: ItemHints(
        "Queries from x, keys and values from context: q = W_q x (B, T_q, d), k, v = W_k c, W_v c (B, T_k, d), "
        "then multi-head attention with a context padding mask and no causal mask.\n"
        "Conventions: context_mask (B, T_k) is True/1 for real tokens; a row with no real context token "
        "returns out_proj.bias (zero attention output).\n"
        "Shapes: q (B, H, T_q, d_h), k, v (B, H, T_k, d_h), context mask (B, 1, 1, T_k), output (B, T_q, d).",
        "k_proj and v_proj take d_context inputs, not d_model. A batch row whose context is fully masked "
        "must give zeros before out_proj (so the output is out_proj.bias), not NaN: finite mask value and "
        "zeroed weights. No causal mask: every query sees every real context token.",
    ),
    29: ItemHints(
        "Pre-norm: x = x + drop(attn(norm1(x))); x = x + drop(ffn(norm2(x))). "
        "Post-norm: x = norm1(x + drop(attn(x))); x = norm2(x + drop(ffn(x))).\n"
        "Conventions: key_padding_mask (B, T) is True/1 for real tokens; two separate norms (norm_attn, "
        "norm_ffn); RMSNorm is #15's RMSNorm(d, eps=eps); dropout only in training.\n"
        "Shapes: everything stays (B, T, d); key padding (B, T) -> (B, 1, 1, T).",
        "The residual adds the un-normalised x (pre-norm) - normalising the residual stream itself is the "
        "common bug. Two separate norms (norm_attn, norm_ffn), never one shared. With out_proj and the last "
        "FFN layer zeroed, a pre-norm block must be exactly the identity.",
    ),
    30: ItemHints(
        "x = x + self_attn(norm(x), causal, cache); [x = x + cross_attn(norm(x), memory, memory_mask)]; "
        "x = x + ffn(norm(x)).\n"
        "Conventions: self-attention is always causal; attention_mask (B, T_total) covers cached + new "
        "keys; memory_mask (B, T_m) is True/1 for real memory tokens.\n"
        "Shapes: x (B, T, d), memory (B, T_m, d), attention_mask (B, T_total) over cached + new keys.",
        "Self-attention is always causal, and with a KV cache the causal mask and the positions are offset "
        "by the cache length. attention_mask covers ALL keys self-attention sees (cached and new), so slice "
        "nothing off it. Cross-attention gets memory_mask, never the causal mask.",
    ),
    31: ItemHints(
        "logits = lm_head(norm_f(blocks(tok_emb(idx) + pos_emb(positions)))); "
        "loss = CE(logits[b, t], targets[b, t]) over targets != -100.\n"
        "Targets for next-token training: targets[:, t] = idx[:, t + 1] (shift by one), last column ignored.\n"
        "Conventions: weights N(0, 0.02) and zero biases (GPT-2), lm_head tied to tok_emb; lm_loss with no "
        "active target returns 0 in the graph; train_gpt returns a dict holding 'losses' (one per step; "
        "extra keys allowed).\n"
        "Shapes: idx (B, T), x (B, T, d), logits (B, T, V), flattened (B*T, V) and (B*T,).",
        "The label shift: logits at t predict token t + 1; shifting twice (in the targets and again in "
        "the loss) or not at all still trains, to the wrong thing. Tie lm_head.weight to tok_emb.weight "
        "(the same Parameter, counted once). With a cache, positions start at the cache length. "
        "Init N(0, 0.02), zero biases.",
    ),
    32: ItemHints(
        "logits / T -> top-k (keep >= k-th largest) -> top-p (smallest set of sorted probs with cumulative "
        ">= p) -> softmax -> multinomial; greedy is argmax.\n"
        "generate: loop max_new_tokens times, feed the (cropped) context, append the sampled id.\n"
        "Conventions: order temperature -> top-k -> top-p; top-k keeps ties with the k-th value; top-p drops a "
        "token when the mass before it already reaches p; after eos_id a row keeps emitting eos_id; draws "
        "use the generator given.\n"
        "Shapes: logits (B, V), sorted probs and cumsum (B, V), next ids (B,), idx (B, T + 1) after cat.",
        "In top-p, remove a token when the cumulative probability BEFORE it already reaches p (shift the "
        "mask right by one) so the argmax is always kept. Filter with -inf and keep ties at the k-th value. "
        "Use the generator you were given in multinomial. After a row emits eos_id it keeps emitting eos_id.",
    ),
    33: ItemHints(
        "Preallocate k, v buffers (B, H_kv, max_len, d_h); update writes new keys at [length, length + T_new) "
        "and returns views [:, :, :length] of everything so far.\n"
        "Memory: 2 * layers * B * H_kv * T * d_h * bytes (the 2 is K and V).\n"
        "Conventions: update returns views sharing the buffers' storage; an update that raises (overflow "
        "past max_len is a ValueError) leaves length and the cached positions unchanged.\n"
        "Shapes: k_new, v_new (B, H_kv, T_new, d_h); returned views (B, H_kv, L, d_h).",
        "Validate before writing: an append past max_len must leave the cache unchanged. Return views "
        "(slices) of the buffers, not copies or torch.cat results. The attention that uses the cache must "
        "offset its causal mask and RoPE positions by the cache length before the update.",
    ),
    34: ItemHints(
        "angle[p, i] = p * base^(-2i/d_h) for i < d_h/2; rotate pairs (x_i, x_{i + d_h/2}): "
        "rope(x) = x*cos + rotate_half(x)*sin with rotate_half(x) = cat(-x2, x1) and cos, sin repeated to d_h.\n"
        "Conventions: half-split pairing (i with i + d_h//2); the frequencies and angles are computed in "
        "float64 and the tables cast to dtype; float16/bfloat16 x is rotated in float32 and cast back; "
        "positions are (T,) or (B, T), default arange(T).\n"
        "Shapes: inv_freq (d_h//2,), angles (T, d_h//2), cos/sin broadcast (1, 1, T, d_h//2), halves (B, H, T, d_h//2).",
        "Interleaved pairs (2i, 2i+1) also preserve norms and relative positions, so only a comparison with "
        "a reference catches the wrong layout. float32 angles p*theta are off by ~1e-4 rad at p = 4095 "
        "(cos/sin wrong in the fourth decimal). Position 0 is the identity.",
    ),
    # -- block 4: LLM variants ------------------------------------------------------------------------------------
    35: ItemHints(
        "H query heads share H_kv key/value heads: query head h reads kv head h // (H / H_kv). "
        "repeat_kv(x, n_rep) = x repeated along dim 1 like repeat_interleave.\n"
        "Conventions: the KV cache holds the H_kv un-repeated heads; no biases by default; masks and the "
        "cache offset as in #26; a query with no allowed key gets a zero attention output.\n"
        "Shapes: q (B, H, T, d_h), k, v (B, H_kv, T, d_h), repeated k, v (B, H, T, d_h); k_proj maps d -> H_kv*d_h.",
        "Repeat with interleave semantics ([k0, k0, k1, k1]), not tile ([k0, k1, k0, k1]). Cache the H_kv "
        "heads and repeat after reading the cache: that is the memory saving. n_heads must be divisible by "
        "n_kv_heads.",
    ),
    36: ItemHints(
        "SwiGLU(x) = w2( silu(w1 x) * w3 x ); hidden width int(8d/3) rounded up to a multiple of 8. "
        "The GELU FFN is fc2(gelu(fc1(x))) with d_ff = 4d.\n"
        "Conventions: hidden width int(8d/3) rounded UP to multiple_of (48 -> 128); SwiGLU has no biases by "
        "default; FeedForward uses the exact (erf) GELU; dropout only in training.\n"
        "Shapes: x (..., d), gate and up (..., d_ff), product (..., d_ff), out (..., d).",
        "silu is x*sigmoid(x), applied to the gate (w1) only, not to the up projection (w3). Round the "
        "hidden width UP to multiple_of (48 -> 128). No biases by default; exact (erf) GELU in FeedForward.",
    ),
    37: ItemHints(
        "Router: probs = softmax(x W_g) (N, E); take the top-k experts per token, renormalise their "
        "weights to sum 1; out = sum_j w_j * expert_{idx_j}(x).\n"
        "Load balancing: aux = E * sum_e f_e * P_e, f_e = share of the N*k assignments to e, P_e = mean prob of e.\n"
        "Conventions: equal router probabilities go to the lower expert index; the k weights are renormalised "
        "to sum to 1; the router softmax runs in float32 for float16/bfloat16 input.\n"
        "Shapes: tokens (N, d), probs (N, E), top-k (N, k), per-expert ids (n_e,), expert out (n_e, d).",
        "Loop over experts, never over tokens: gather each expert's tokens with index_select and scatter "
        "back with index_add_ weighted by the router weight. torch.topk does not promise lower-index ties "
        "on CPU: use a stable descending sort and take the first k. An expert with no tokens is simply skipped.",
    ),
    38: ItemHints(
        "y = base(x) + (alpha/r) * dropout(x) @ A^T @ B^T, A (r, in) kaiming-uniform, B (out, r) zeros, "
        "base frozen. merge: W += (alpha/r) * B @ A.\n"
        "Conventions: apply_lora wraps nn.Linear children named in target_modules, freezes every other "
        "parameter and never wraps a LoRALinear (or its base) twice; merging twice is a RuntimeError.\n"
        "Shapes: x (..., in), x A^T (..., r), then (..., out); merged delta (out, in).",
        "B starts at zero so the wrapper equals the base model exactly at init (and A then gets zero "
        "gradient). Freeze every base parameter (requires_grad False). Track merged: forward must skip the "
        "adapter once merged, and merging twice is a RuntimeError.",
    ),
    # -- block 5: multimodal and generative -------------------------------------------------------------------
    39: ItemHints(
        "Patchify with Conv2d(C, d, kernel=p, stride=p) -> flatten(2).transpose(1, 2); prepend a cls token, "
        "add learned positions, run pre-norm encoder blocks, final norm, head on the cls (or mean) token.\n"
        "Conventions: patches row-major, each patch in (c, i, j) order; [CLS] first with pool='cls' (N + 1 "
        "positions), no [CLS] with pool='mean' (N positions); pre-norm EncoderBlocks, then a final LayerNorm.\n"
        "Shapes: images (B, C, H, W) -> (B, d, H//p, W//p) -> (B, N, d); with cls (B, N + 1, d); pooled (B, d); logits (B, n_classes).",
        "patchify orders patches row-major and each patch (c, i, j), the order of conv.weight.reshape(d, -1). "
        "Expand the cls token to the batch (expand, not repeat of the parameter data). pos_emb has N + 1 "
        "rows with cls, N with mean pooling.",
    ),
    40: ItemHints(
        "Hungarian: minimum-cost perfect matching of the (N, M) cost matrix in O(n^3) (potentials u, v "
        "and shortest augmenting paths). DETR: cost = -c_class * p[:, label] + c_bbox * L1(boxes) - c_giou * GIoU; "
        "match, then CE over all queries (unmatched -> 'no object' with weight eos_coef) + L1 + (1 - GIoU) "
        "over matched pairs / max(1, num boxes).\n"
        "Conventions: rows returned ascending, K = min(N, M); the CE is the class-weighted mean of "
        "F.cross_entropy; the matching cost weights of detr_set_loss are your choice (DETR: 1, 5, 2).\n"
        "Shapes: cost (Q, M), matched boxes (sum M, 4), target classes (B, Q), class weights (C + 1,).",
        "Rectangular costs: transpose (or pad) so rows <= columns, and return rows ascending. The matching "
        "runs under no_grad; the losses use the matched indices with gradients. Convert cxcywh to xyxy "
        "before GIoU. An image without targets still gets its 'no object' CE, with zero box losses.",
    ),
    41: ItemHints(
        "Normalise both embeddings, logits = exp(logit_scale).clamp(max=100) * img @ txt^T; "
        "loss = (CE(logits, arange(B)) + CE(logits^T, arange(B))) / 2.\n"
        "Conventions: the scale is min(exp(logit_scale), max_scale); logit_scale starts at ln(1/0.07) in "
        "float32; zero_shot_predict compares cosines (class embeddings normalised too); retrieval_accuracy "
        "returns two Python floats (rows, then columns).\n"
        "Shapes: embeddings (B, d) -> unit (B, d); logits (B, B); labels (B,).",
        "The targets are the diagonal: labels = arange(B), for both directions. Clamp the SCALE (exp of the "
        "parameter) at max_scale, not the parameter. logit_scale starts at ln(1/0.07). L2-normalise with "
        "F.normalize (eps) so a zero embedding does not divide by 0.",
    ),
    42: ItemHints(
        "Project visual tokens to the LM width (linear, MLP, or learned queries cross-attending to them); "
        "splice [visual; text] with N_q leading ones in the mask and positions arange(N_q + T); the logit "
        "that scores text token t sits at N_q + t - 1.\n"
        "Conventions: the spliced mask is long with N_q leading ones; position_ids = arange(N_q + T) for every "
        "row; the resampler's output is norm(queries + cross_attn(queries, v)) and masked visual tokens get "
        "no weight (a fully masked row stays finite).\n"
        "Shapes: v (B, N, d_v) -> (B, N, d) or (B, N_q, d); spliced (B, N_q + T, d); text logits (B, T, V).",
        "The off-by-one: logits[:, i] predicts token i + 1, so text_logits = logits[:, N_q - 1 : N_q - 1 + T]; "
        "slicing from N_q shifts the loss by one token and still trains. Resampler queries are expanded to "
        "the batch, and masked visual tokens are a key padding mask of the cross-attention.",
    ),
    43: ItemHints(
        "Encoder -> mu, logvar; z = mu + exp(0.5*logvar) * eps, eps ~ N(0, I); decoder -> logits.\n"
        "KL(N(mu, s^2) || N(0, I)) = 0.5 * sum(mu^2 + exp(logvar) - 1 - logvar); loss = recon + beta*KL, "
        "each summed over features and averaged over the batch.\n"
        "Shapes: x (B, d_in), hidden (B, d_h), mu, logvar, eps, z (B, z), logits (B, d_in), per-example sums (B,).\n"
        "Conventions: reconstruction and KL are summed per example, then averaged over the batch; eval mode uses "
        "z = mu; reparameterize draws eps from the generator it is given (the global RNG when None); vae_loss "
        "returns at least loss, recon, kl (extra keys allowed); inputs are not modified.",
        "Sample eps, not z, so gradients flow through mu and logvar (the reparameterisation). Reconstruct "
        "with binary_cross_entropy_with_logits on logits, never BCE on sigmoid outputs (logits of +-1e4). "
        "Sum over features before the batch mean. Eval mode uses z = mu (deterministic).",
    ),
    44: ItemHints(
        "alpha_bar_t = prod_{s<=t} (1 - beta_s); q(x_t | x0): x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps; "
        "train MSE(model(x_t, t), eps); sample x_{t-1} = posterior_mean(x0_hat, x_t) + sigma_t z, z = 0 at t = 0.\n"
        "posterior variance = beta_t (1 - abar_{t-1})/(1 - abar_t).\n"
        "Shapes: schedule (T,) float64; gathered abar_t reshaped (B, 1, ...); x_t, eps like x0; time embedding (B, d_t).\n"
        "Conventions: steps are 0-based (t in [0, T)); schedule buffers are float64; alpha_bars_prev[0] = 1 and "
        "posterior_variance[0] = 0; linear_beta_schedule(1, a, b) = [a]; sample() starts from N(0, I) in the "
        "model's parameter dtype (float32 without parameters) and adds no noise at t = 0; inputs are not modified.",
        "Time steps are 0-based: abar_prev[0] = 1 and posterior_variance[0] = 0. Gather abar at t and "
        "reshape to (B, 1, ..., 1) before multiplying, or (B,) broadcasts against the wrong axis. Keep the "
        "schedule in float64 and cast on use. No noise is added at the last step (t = 0).",
    ),
    # -- block 6: retrieval and RL ----------------------------------------------------------------------------------
    45: ItemHints(
        "Brute force: squared L2 via the ||q||^2 - 2 q.x + ||x||^2 expansion, top-k per row. IVF: k-means "
        "coarse centroids, inverted lists, search only the nprobe nearest lists. PQ: split d into m "
        "sub-vectors, k-means per subspace, codes = nearest sub-centroid ids; ADC distance = sum_j table[j, code_j]. "
        "HNSW: layered greedy graph search with a candidate heap of size ef.\n"
        "Shapes: distances (m, n), probe lists (m, nprobe), codebooks (m, ks, d/m), tables (m, ks), codes (n, m) uint8.\n"
        "Conventions: float32 distances and int64 ids; l2 ascending, ip descending, ties to the lower index; "
        "k > n pads with (inf, -1) (ip: (-inf, -1)); default ids follow insertion order; distances must stay "
        "accurate far from the origin; the same seed gives the same index; inputs are not modified.",
        "Use argpartition then sort the k survivors (a full argsort is O(n log n) per query). Pad with "
        "(inf, -1) when k > n. PQ tables are per query: build (m, ks) once and gather, never decode the "
        "database. HNSW: level = floor(-ln U / ln M), keep at most M links (2M on layer 0), and seed from "
        "the generator you were given.",
    ),
    46: ItemHints(
        "Chunk by words with step = size - overlap; embed with feature hashing (stable hash -> bucket and "
        "sign), L2-normalise rows; retrieve by cosine = dot product of unit vectors; build a prompt of "
        "numbered context blocks [1]..[k] plus the question.\n"
        "Shapes: embeddings (n, dim), query (dim,), scores (n,), top-k indices (k,).\n"
        "Conventions: the same text embeds to the same vector in every process; a token-free text embeds to "
        "zeros; search ties keep insertion order; the default answer contains the best-matching retrieved "
        "sentence; answer() returns at least answer, prompt, sources, scores; inputs are not modified.",
        "Never Python's hash() (salted per process): use hashlib so two processes agree. An all-zero "
        "embedding stays zero (do not divide by its 0 norm). Stop chunking after the first chunk that "
        "reaches the end, and rank ties by insertion order (stable sort).",
    ),
    47: ItemHints(
        "Q(s, a) = R(s, a) + gamma * sum_s' P(s, a, s') V(s'). Value iteration: V <- max_a Q until the change "
        "< tol. Policy evaluation: solve (I - gamma P_pi) V = R_pi (or iterate). Policy iteration: evaluate, "
        "act greedily, repeat until the policy is stable.\n"
        "Shapes: P (S, A, S), R (S, A), V (S,), Q (S, A), P_pi (S, S), R_pi (S,).\n"
        "Conventions: value iteration and iterative evaluation start from V = 0; greedy ties go to the lowest "
        "action; policy iteration may start from any policy and stops when no action changes; inputs are not "
        "modified.",
        "P @ V contracts the last axis: (S, A, S) @ (S,) -> (S, A). Greedy ties go to the lowest action "
        "(np.argmax does), and policy iteration stops when the policy does not change, not when V does (or "
        "it can cycle between equal-value policies). The goal is absorbing with reward 0.",
    ),
    48: ItemHints(
        "delta = r + gamma * (1 - done) * max_a Q[s', a] - Q[s, a]; Q[s, a] += alpha * delta. "
        "Behaviour: epsilon-greedy (random with prob epsilon, else argmax).\n"
        "Shapes: Q (S, A); q_values (A,).\n"
        "Conventions: epsilon_greedy breaks ties uniformly at random (any way of drawing from rng); "
        "greedy_policy breaks ties to the lowest index; q_learning_update changes only Q[s, a], in place; a "
        "time-limit cut still bootstraps; the same seed gives the same Q.",
        "Do not bootstrap from a terminal state: (1 - done) zeroes the max. Break argmax ties at random "
        "(a fixed lowest-index tie-break on an all-zero table never explores). Draw every random number "
        "from the one rng seeded from seed.",
    ),
    49: ItemHints(
        "target = r + gamma * (1 - done) * max_a Q_target(s', a) (double DQN: Q_target(s', argmax_a Q_online(s', a))); "
        "loss = Huber(Q(s, a) gathered at the taken actions, target).\n"
        "Replay: a preallocated circular buffer; sample uniformly without replacement.\n"
        "Shapes: obs (B, obs_dim), q (B, A), gathered (B,), next_q (B, A), max/argmax (B,), targets (B,).\n"
        "Conventions: sample() draws without replacement and returns copies; one update per step from "
        "learning_starts on (once the buffer holds batch_size); a time limit is stored as not done; returned "
        "dicts hold at least their documented keys; the same seed gives the same run; inputs are not modified.",
        "Compute the targets under torch.no_grad() with the TARGET net, and gather Q(s, a) with "
        "q.gather(1, actions[:, None]).squeeze(1). The circular write index wraps with % capacity and len "
        "never exceeds capacity. soft_update: theta_t <- tau*theta_s + (1 - tau)*theta_t, in place.",
    ),
    50: ItemHints(
        "grad log pi(a) = onehot(a) - softmax(z); REINFORCE step z <- z + lr * (R - b) * grad log pi(a). "
        "Reward-to-go G_t = r_t + gamma * G_{t+1}.\n"
        "Shapes: logits and probs (A,), gradient (A,), history (steps + 1, A).\n"
        "Conventions: training starts from uniform logits; the baseline is the mean of earlier rewards (the "
        "first step's own reward, so that update is 0); draw arms from default_rng(seed) any way you like; "
        "the history holds at least probs and rewards; inputs are not modified.",
        "The baseline must not depend on the current action (a running mean of PAST rewards): it leaves "
        "the mean gradient unchanged and cuts the variance. The first step's baseline is its own reward, "
        "so its update is zero. Compute discounted returns backwards in one pass.",
    ),
    51: ItemHints(
        "TD target y = r + gamma * (1 - done) * V(s'), detached; advantage = (y - V(s)).detach(); "
        "policy loss = -mean(log pi(a|s) * adv); value loss = mean((V(s) - y)^2); "
        "loss = policy + c_v * value - c_e * entropy.\n"
        "Shapes: logits (B, A), values (B,), log-probs (B, A), chosen (B,), adv (B,), entropy (B,).\n"
        "Conventions: targets and advantages carry no gradient; no bootstrap after a terminal step (a time "
        "limit still bootstraps); the returned dicts hold at least their documented keys; the same seed gives "
        "the same run; inputs are not modified.",
        "Detach both the target and the advantage: the policy loss must give the value head zero gradient, "
        "and the critic must not chase its own moving target. Use log_softmax and gather the chosen action's "
        "log-prob. No bootstrap after a terminal step.",
    ),
    52: ItemHints(
        "delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t; A_t = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}, "
        "computed backwards from A_T = 0 with V_T = last_value; returns = A + V.\n"
        "Shapes: rewards, values, dones (T,) or (N, T); next values, deltas, advantages the same.\n"
        "Conventions: outputs are float64; a done step neither bootstraps nor carries the accumulation; a "
        "truncated step stops the accumulation but bootstraps from truncated_values; inputs are not modified.",
        "Loop backwards in time (vectorised over N), and reset the accumulation at episode ends with "
        "(1 - d_t) in BOTH the delta and the recursion. A truncated step (time limit) resets the recursion "
        "but bootstraps delta from the real next state's value. lambda = 0 gives TD errors, lambda = 1 "
        "discounted returns minus values.",
    ),
    53: ItemHints(
        "rho = exp(new_logp - old_logp); L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)); "
        "value loss 0.5 * mean((V - R)^2); approx_kl = mean((rho - 1) - log rho).\n"
        "Update: epochs x shuffled minibatches, clip the grad norm, stop early when approx_kl > 1.5 * target_kl.\n"
        "Shapes: every per-sample quantity (B,); minibatch indices (M,).\n"
        "Conventions: normalize_advantages = (A - mean) / (std + 1e-8), population or sample std (both "
        "accepted); "
        "ppo_loss and ppo_update return dicts with at least their documented keys (extra keys allowed); "
        "inputs are not modified; the same seed gives the same update.",
        "Compute the ratio from log-probs (exp of a difference), never a ratio of probabilities. old_logp "
        "must carry no gradient. The min is what makes the clip pessimistic: where the clip binds the "
        "gradient is zero, except a negative-advantage ratio above 1 + eps keeps its full penalty. "
        "approx_kl: with d = new_logp - old_logp, expm1(d) - d keeps k3's digits at tiny d ((exp(d) - 1) - d in "
        "float32 is only good to the rounding of rho, ~1e-7, which the tests accept). Normalise a new tensor (adv = (adv - mean) / ...), never in place.",
    ),
    # -- block 7: post-training, systems, evaluation ----------------------------------------------------------------
    54: ItemHints(
        "Bradley-Terry: P(chosen > rejected) = sigmoid(r_c - r_r); loss = -mean log sigmoid(r_c - r_r - margin). "
        "The reward is a linear head on the backbone's hidden state at the LAST real token.\n"
        "Shapes: hidden (B, T, d), last index (B,), gathered states (B, d), rewards (B,), differences (B,).\n"
        "Conventions: Python numbers give float64, float16/bfloat16 are computed in float32; pair_accuracy counts "
        "a tie as wrong; the head may be initialised any way; train_reward_model returns at least losses and "
        "accuracies (extra keys allowed); inputs are not modified.",
        "Write -log sigmoid(x) as softplus(-x) (finite at +-1e4). The last real token of a right-padded row "
        "is mask.sum(1) - 1, not T - 1: pooling at T - 1 reads padding. Pad chosen and rejected "
        "independently to their own longest row.",
    ),
    55: ItemHints(
        "margin = beta * [(log pi(y_c) - log pi_ref(y_c)) - (log pi(y_r) - log pi_ref(y_r))]; "
        "loss = mean softplus(-margin) = -mean log sigmoid(margin).\n"
        "log pi(y|x) = sum over completion tokens of log_softmax(logits)[t, y_{t+1}].\n"
        "Shapes: the four sequence log-probs (B,) or (); margin, losses, weight (B,); loss (); "
        "logits (B, T, V) -> token log-probs (B, T - 1) -> sums (B,).\n"
        "Conventions: margin includes beta; accuracy = margin > 0 (a tie is wrong); Python-number inputs give "
        "float64, float16/bfloat16 are computed in float32; the loss is exact for every finite margin (float32 "
        "included); entries outside the completion mask never affect a sum; the first token is never scored; "
        "inputs are not modified; run_dpo returns at least losses, margins, accuracies (extra keys allowed).",
        "Score logits[:, :-1] against input_ids[:, 1:] with completion_mask[:, 1:]: the first token is never "
        "scored. Replace masked entries with 0 (torch.where) BEFORE summing: multiplying by the mask lets NaN "
        "or -inf through (nan * 0 = nan). softplus(-margin), not -log(sigmoid(margin)), which is -inf at a "
        "margin of -1000. The reference runs under no_grad and stays frozen.",
    ),
    56: ItemHints(
        "Group-relative advantage: A_i = (r_i - mean_group(r)) / (std_group(r) + eps), population std; "
        "clipped surrogate per token: min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A), averaged over "
        "active tokens; plus kl_coef * k3 KL, k3 = exp(ref - logp) - (ref - logp) - 1.\n"
        "Shapes: rewards and advantages (P, G); flattened (P*G,); ratios and token objective (N, T); loss ().\n"
        "Conventions: population std; a degenerate row (std <= min_std) gives exact zeros, or ValueError under "
        "on_degenerate='raise'; masked entries never affect the result; the loss averages over active tokens; "
        "k3 is never negative (float32 included); grpo_step returns at least mean_reward, "
        "informative_group_rate, loss (extra keys allowed); inputs are not modified.",
        "A group whose rewards are all equal has std 0: its advantages are exactly zero (or an error under "
        "on_degenerate='raise'), not 0/0. Mask BEFORE exp: zero the masked log-prob differences so NaN or "
        "+inf there cannot reach the ratio. Divide by the number of active tokens, not T. Write k3 as "
        "expm1(d) - d: exp(d) - d - 1 cancels near d = 0 and can dip below 0 in float32. Centre into a new "
        "tensor, never rewards -= mean (that rewrites the caller's rewards).",
    ),
    57: ItemHints(
        "DDP: each rank runs its shard of the batch, then every gradient is all-reduced to the MEAN, then "
        "every replica takes the same optimizer step. Column-parallel linear: split W's output rows across "
        "ranks (concatenate outputs); row-parallel: split the input columns (sum the partial products, add "
        "the bias once).\n"
        "Shapes: shards (n/world, ...), column outputs (..., out/world) -> (..., out), row partials (..., out).\n"
        "Conventions: all_reduce_mean returns new tensors, equal on every rank, and sums float16/bfloat16 in "
        "float32; shard r is the contiguous block r; the row-parallel bias is added once; one all-reduce per "
        "MLP forward; inputs are not modified.",
        "All-reduce the mean, not the sum (or the effective learning rate is multiplied by world). Add the "
        "row-parallel bias once, after the sum, not on every rank. A Megatron MLP needs exactly one "
        "all-reduce: column (no gather) -> GELU -> row.",
    ),
    58: ItemHints(
        "Per output row: scale = max|w_row| / 127, q = clamp(round(w / scale), -127, 127) as int8; "
        "y = (x @ q^T) * scale (+ bias): scale after the matmul.\n"
        "Conventions: scale is float32 and 1.0 wherever max/127 is 0 (all-zero or subnormal rows); round half "
        "to even; the matmul runs in x.dtype (float64 stays float64); qweight and scale are buffers, bias "
        "the only parameter.\n"
        "Shapes: weight (out, in), row absmax (out, 1), scale (out,), q (out, in) int8, x @ q^T (..., out).",
        "Round, do not truncate (int casts truncate toward zero). Clamp to [-127, 127]: -128 breaks "
        "symmetry. An all-zero row gets scale 1.0, not 0 (no division by zero). Cast q to x's dtype for "
        "the matmul; store it as an int8 buffer, not a parameter.",
    ),
    59: ItemHints(
        "Percentile bootstrap: draw an (R, n) matrix of indices with replacement, apply the statistic along "
        "axis 1, take the alpha/2 and 1 - alpha/2 quantiles. Paired bootstrap: the SAME indices for both "
        "systems, on the per-example difference. Wilson interval: "
        "(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n).\n"
        "Conventions: a statistic taking `axis` is applied once with axis=1; the paired p-value is twice the "
        "share of resampled differences at or beyond 0 on the far side (1.0 when the difference is 0); a "
        "crashed example scores 0 and stays in the denominator; Wilson bounds are clipped to [0, 1]; "
        "punctuation may be deleted or replaced by a space; paired_bootstrap may return extra keys.\n"
        "Shapes: indices (R, n), resampled statistics (R,), quantiles (2,).",
        "Vectorise the resampling (one (R, n) draw, no Python loop over R). Pairing is the point of the "
        "paired bootstrap: independent resamples of the two systems lose the correlation and widen the "
        "interval. Record a predict_fn exception in the row and score it 0; never let one example stop the run.",
    ),
    # -- block 8: the capstone ---------------------------------------------------------------------------------------
    60: ItemHints(
        "Image -> tiny ViT (16 patches, d_v 32) -> projector (8 tokens, d 48) -> causal LM over "
        "[visual; question]; stages SFT -> reward model -> DPO -> GRPO (verifier reward) -> tool loop, with "
        "greedy accuracy after each. The logit scoring text token t sits at N_q + t - 1.\n"
        "Shapes: images (B, 3, 16, 16), visual tokens (B, 16, 32) -> (B, 8, 48), inputs (B, S, d) with "
        "S = N_q + T, logits (B, S, V), rewards (P, G).",
        "Mask with a finite -1e9 (never -inf: a right-padded row of all-masked keys softmaxes to NaN). "
        "Slice text logits at [N_q - 1 : N_q - 1 + T]. A GRPO group whose samples all scored the same has "
        "zero advantage: oversample prompts and keep the informative groups. Sample the group at the "
        "temperature you will decode with.",
    ),
}


# Hand-written level-3 skeletons, used when the installed canon has no reference for the item.
SKELETONS: dict[int, str] = {
    37: '''# llm/moe.py
class TopKRouter(nn.Module):
    def __init__(self, d_model: int, n_experts: int, k: int = 2) -> None:
        self.gate = ...                                  # Linear(d, E, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logits = ...                                     # (N, E)
        router_probs = ...                               # (N, E)
        sorted_probs, order = ...                        # (N, E), (N, E)  stable descending sort
        weights, indices = ...                           # (N, k), (N, k)
        weights = ...                                    # (N, k)  renormalised to sum 1
        return ...                                       # (N, k), (N, k), (N, E)

def load_balancing_loss(router_probs: Tensor, indices: Tensor, n_experts: int) -> Tensor:
    counts = ...                                         # (E,)
    f = ...                                              # (E,)  share of the N*k assignments
    P = ...                                              # (E,)  mean router probability
    return ...                                           # ()

class MoE(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        tokens = ...                                     # (N, d)
        weights, indices, probs = ...                    # (N, k), (N, k), (N, E)
        out = ...                                        # (N, d)
        for e in ...:
            token_ids, slot = ...                        # (n_e,), (n_e,)
            expert_out = ...                             # (n_e, d)
            out.index_add_(...)                          # (N, d)
        return ...                                       # (B, T, d), ()
''',
    38: '''# finetune/lora.py
class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0) -> None:
        self.lora_A = ...                                # (r, in_features)  kaiming_uniform(a=sqrt(5))
        self.lora_B = ...                                # (out_features, r)  zeros
        self.scaling = ...                               # alpha / r

    def forward(self, x: Tensor) -> Tensor:
        y = ...                                          # (..., out)  base(x)
        down = ...                                       # (..., r)
        up = ...                                         # (..., out)
        return ...                                       # (..., out)

    def merge(self) -> None:
        delta = ...                                      # (out, in)

    def unmerge(self) -> None:
        delta = ...                                      # (out, in)

def apply_lora(model: nn.Module, target_modules=("q_proj", "v_proj"), r: int = 8, alpha: float = 16.0,
               dropout: float = 0.0) -> nn.Module:
    ...

def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    ...

def count_trainable_parameters(model: nn.Module) -> int:
    ...
''',
    39: '''# multimodal/vit.py
def patchify(images: Tensor, patch_size: int) -> Tensor:
    x = ...                                              # (B, C, H/p, p, W/p, p)
    x = ...                                              # (B, H/p, W/p, C, p, p)
    return ...                                           # (B, N, C*p*p)

class PatchEmbedding(nn.Module):
    def forward(self, images: Tensor) -> Tensor:
        x = ...                                          # (B, d, H/p, W/p)
        return ...                                       # (B, N, d)

class ViT(nn.Module):
    def forward_features(self, images: Tensor) -> Tensor:
        x = ...                                          # (B, N, d)
        cls = ...                                        # (B, 1, d)
        x = ...                                          # (B, N + 1, d)
        x = ...                                          # (B, N + 1, d)  + pos_emb
        for block in ...:
            x = ...                                      # (B, N + 1, d)
        return ...                                       # (B, N + 1, d)

    def forward(self, images: Tensor) -> Tensor:
        feats = ...                                      # (B, N + 1, d)
        pooled = ...                                     # (B, d)
        return ...                                       # (B, n_classes)
''',
    40: '''# multimodal/hungarian.py
def linear_sum_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    C = ...                                              # (n, m)  transposed so n <= m
    u = ...                                              # (n + 1,)  row potentials
    v = ...                                              # (m + 1,)  column potentials
    p = ...                                              # (m + 1,)  row matched to each column
    for i in ...:
        minv = ...                                       # (m + 1,)
        used = ...                                       # (m + 1,)
        while ...:
            ...
    return ...                                           # (min(N, M),), (min(N, M),)

# multimodal/detr_loss.py
def hungarian_match(pred_logits, pred_boxes, tgt_labels, tgt_boxes, *, cost_class=1.0, cost_bbox=5.0,
                    cost_giou=2.0) -> tuple[Tensor, Tensor]:
    prob = ...                                           # (Q, C + 1)
    c_class = ...                                        # (Q, M)
    c_bbox = ...                                         # (Q, M)
    c_giou = ...                                         # (Q, M)
    cost = ...                                           # (Q, M)
    return ...                                           # (M,), (M,)

def detr_set_loss(pred_logits, pred_boxes, targets, *, num_classes, eos_coef=0.1, w_class=1.0, w_bbox=5.0,
                  w_giou=2.0) -> dict[str, Tensor]:
    target_classes = ...                                 # (B, Q)  filled with num_classes
    class_weights = ...                                  # (C + 1,)
    loss_ce = ...                                        # ()
    matched_pred = ...                                   # (sum M, 4)
    matched_tgt = ...                                    # (sum M, 4)
    loss_bbox = ...                                      # ()
    loss_giou = ...                                      # ()
    return ...
''',
    42: '''# multimodal/projectors.py
class MLPProjector(nn.Module):
    def forward(self, v: Tensor) -> Tensor:
        h = ...                                          # (B, N, d_hidden)
        return ...                                       # (B, N, d)

class ResamplerProjector(nn.Module):
    def forward(self, v: Tensor, vision_mask: Tensor | None = None) -> Tensor:
        q = ...                                          # (B, N_q, d)  queries expanded to the batch
        out = ...                                        # (B, N_q, d)  cross-attention to v
        return ...                                       # (B, N_q, d)

def splice_visual_tokens(visual_embeds: Tensor, text_embeds: Tensor,
                         attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    inputs = ...                                         # (B, N_q + T, d)
    mask = ...                                           # (B, N_q + T)
    position_ids = ...                                   # (B, N_q + T)
    return ...

def text_logits(logits: Tensor, n_visual: int, T: int) -> Tensor:
    return ...                                           # (B, T, V)  logits[:, n_visual - 1 : n_visual - 1 + T]
''',
    43: '''# generative/vae.py
def gaussian_kl(mu: Tensor, logvar: Tensor) -> Tensor:
    return ...                                           # (B,)

def reparameterize(mu: Tensor, logvar: Tensor, generator=None) -> Tensor:
    std = ...                                            # (B, z)
    eps = ...                                            # (B, z)
    return ...                                           # (B, z)

def vae_loss(x, x_logits, mu, logvar, beta=1.0, recon="bce") -> dict[str, Tensor]:
    recon_per_example = ...                              # (B,)
    kl = ...                                             # (B,)
    return ...

class VAE(nn.Module):
    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = ...                                          # (B, d_hidden)
        return ...                                       # (B, z), (B, z)

    def decode(self, z: Tensor) -> Tensor:
        return ...                                       # (B, d_in)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        mu, logvar = ...                                 # (B, z), (B, z)
        z = ...                                          # (B, z)
        return ...                                       # (B, d_in), (B, z), (B, z)
''',
    44: '''# generative/ddpm.py
def linear_beta_schedule(T: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> Tensor:
    return ...                                           # (T,) float64

class DDPM:
    def __init__(self, betas: Tensor) -> None:
        self.alphas = ...                                # (T,)
        self.alpha_bars = ...                            # (T,)
        self.alpha_bars_prev = ...                       # (T,)  [1, abar_0, ..., abar_{T-2}]
        self.posterior_variance = ...                    # (T,)

    def q_sample(self, x0, t, noise=None, generator=None) -> Tensor:
        abar = ...                                       # (B, 1, ...)
        return ...                                       # like x0

    def loss(self, model, x0, generator=None) -> Tensor:
        t = ...                                          # (B,)
        noise = ...                                      # like x0
        x_t = ...                                        # like x0
        return ...                                       # ()

    def sample(self, model, shape, generator=None) -> Tensor:
        x = ...                                          # shape
        for t in ...:
            x = ...                                      # shape
        return ...

class TinyDenoiser(nn.Module):
    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        t_emb = ...                                      # (B, d_t)
        h = ...                                          # (B, d_hidden)
        return ...                                       # (B, d)
''',
    45: '''# retrieval/ivf.py
def brute_force_search(database, queries, k, metric="l2") -> tuple[np.ndarray, np.ndarray]:
    scores = ...                                         # (m, n)
    part = ...                                           # (m, k)  argpartition
    order = ...                                          # (m, k)  sorted within the k
    return ...                                           # (m, k) float32, (m, k) int64

class IVFIndex:
    def search(self, Q, k, nprobe=1) -> tuple[np.ndarray, np.ndarray]:
        coarse = ...                                     # (m, nlist)
        probes = ...                                     # (m, nprobe)
        for i in ...:
            candidates = ...                             # (n_c,)
            dists = ...                                  # (n_c,)
        return ...                                       # (m, k), (m, k)

# retrieval/pq.py
class ProductQuantizer:
    def encode(self, X) -> np.ndarray:
        sub = ...                                        # (n, m, d/m)
        return ...                                       # (n, m) uint8

    def distance_tables(self, q) -> np.ndarray:
        return ...                                       # (m, ks)

    def adc_search(self, Q, codes, k) -> tuple[np.ndarray, np.ndarray]:
        tables = ...                                     # (m_q, m, ks)
        gathered = ...                                   # (m_q, n, m)
        dists = ...                                      # (m_q, n)
        return ...                                       # (m_q, k), (m_q, k)
''',
    46: '''# retrieval/rag.py
def chunk_text(text: str, chunk_size: int = 100, overlap: int = 20) -> list[str]:
    words = ...                                          # list[n]
    starts = ...                                         # range(0, n, chunk_size - overlap)
    return ...

class HashingEmbedder:
    def embed(self, texts) -> np.ndarray:
        out = ...                                        # (n, dim) float32
        for row, text in ...:
            for token in ...:
                bucket, sign = ...                       # from hashlib, never hash()
        norms = ...                                      # (n, 1)
        return ...                                       # (n, dim)

class VectorStore:
    def search(self, query: str, k: int) -> list[tuple[Chunk, float]]:
        q = ...                                          # (dim,)
        scores = ...                                     # (n,)
        top = ...                                        # (k,)  stable descending
        return ...
''',
    49: '''# rl/dqn.py
class ReplayBuffer:
    def __init__(self, capacity: int, obs_dim: int, seed: int = 0) -> None:
        self.obs = ...                                   # (capacity, obs_dim)
        self.actions = ...                               # (capacity,)

    def sample(self, batch_size: int) -> dict[str, Tensor]:
        idx = ...                                        # (B,)  without replacement
        return ...

def dqn_targets(rewards, dones, next_q_target, gamma, next_q_online=None) -> Tensor:
    best = ...                                           # (B,)
    return ...                                           # (B,)

def dqn_loss(q_net, target_net, batch, gamma, *, double=False, huber=True) -> Tensor:
    q = ...                                              # (B, A)
    q_taken = ...                                        # (B,)
    with ...:
        next_q = ...                                     # (B, A)
        targets = ...                                    # (B,)
    return ...                                           # ()

def soft_update(target, source, tau) -> None:
    ...
''',
    53: '''# rl/ppo.py
def ppo_clip_objective(ratio, advantage, eps: float = 0.2) -> Tensor:
    unclipped = ...                                      # (B,)
    clipped = ...                                        # (B,)
    return ...                                           # (B,)

def ppo_loss(new_logp, old_logp, advantages, values, returns, *, old_values=None, entropy=None,
             clip_eps=0.2, value_clip=None, vf_coef=0.5, ent_coef=0.0,
             normalize_advantages=False) -> dict[str, Tensor]:
    ratio = ...                                          # (B,)
    objective = ...                                      # (B,)
    policy_loss = ...                                    # ()
    value_err = ...                                      # (B,)
    value_loss = ...                                     # ()
    approx_kl = ...                                      # ()
    clip_fraction = ...                                  # ()
    return ...

def ppo_update(model, optimizer, batch, *, epochs=4, minibatch_size=64, clip_eps=0.2, vf_coef=0.5,
               ent_coef=0.0, max_grad_norm=0.5, target_kl=None, value_clip=None, seed=0):
    for epoch in ...:
        perm = ...                                       # (B,)
        for start in ...:
            idx = ...                                    # (M,)
            logits, values = ...                         # (M, A), (M,)
            new_logp = ...                               # (M,)
    return ...
''',
    54: '''# posttrain/reward_model.py
def bradley_terry_prob(reward_chosen, reward_rejected) -> Tensor:
    delta = ...                                          # (B,) | ()
    return ...                                           # (B,) | ()

def pairwise_loss(reward_chosen, reward_rejected, margin=None) -> Tensor:
    diff = ...                                           # (B,)
    return ...                                           # ()

def last_token_index(attention_mask: Tensor) -> Tensor:
    return ...                                           # (B,)

class RewardModel(nn.Module):
    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = ...                                     # (B, T, d)
        last = ...                                       # (B,)
        pooled = ...                                     # (B, d)
        return ...                                       # (B,)
''',
    57: '''# systems/ddp_example.py
def shard_indices(n: int, world: int, rank: int) -> Tensor:
    return ...                                           # (n/world,)

def all_reduce_mean(per_rank: list[Tensor]) -> list[Tensor]:
    mean = ...                                           # like per_rank[0]
    return ...                                           # list[world]

class SimulatedDDP:
    def train_step(self, x, y, loss_fn) -> float:
        for rank in ...:
            idx = ...                                    # (n/world,)
            loss = ...                                   # ()
        for params in ...:
            grads = ...                                  # list[world]
        return ...

# systems/tensor_parallel_toy.py
class ColumnParallelLinear(nn.Module):
    def forward(self, x):
        parts = ...                                      # list[world] of (..., out/world)
        return ...                                       # (..., out) when gathered

class RowParallelLinear(nn.Module):
    def forward(self, x):
        partials = ...                                   # list[world] of (..., out)
        y = ...                                          # (..., out)  the all-reduce (sum)
        return ...                                       # (..., out)  + bias once
''',
    60: '''# capstone/multimodal_model.py
class TinyVLM(nn.Module):
    def visual_embeds(self, images: Tensor) -> Tensor:
        patches = ...                                    # (B, N_v, d_v)
        return ...                                       # (B, N_q, d)

    def build_inputs(self, images, input_ids, attention_mask=None):
        visual = ...                                     # (B, N_q, d)
        text = ...                                       # (B, T, d)
        inputs_embeds = ...                              # (B, S, d)
        mask = ...                                       # (B, S)
        position_ids = ...                               # (B, S)
        return ...

    def text_logits(self, images, input_ids, attention_mask=None) -> Tensor:
        logits = ...                                     # (B, S, V)
        return ...                                       # (B, T, V)  [:, N_q - 1 : N_q - 1 + T]

# capstone/preference_stage.py
def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float = 0.1):
    margin = ...                                         # (B,)  without beta
    return ...                                           # (), (B,)

def group_advantages(rewards: Tensor, normalize_std: bool = True, eps: float = 1e-6) -> Tensor:
    mean = ...                                           # (P, 1)
    std = ...                                            # (P, 1)
    return ...                                           # (P, G)

def grpo_loss(logp, logp_old, advantages, logp_ref, clip_eps: float = 0.2, kl_coef: float = 0.02) -> Tensor:
    ratio = ...                                          # (B,)
    surrogate = ...                                      # (B,)
    kl = ...                                             # (B,)
    return ...                                           # ()
''',
}


def hint(item: Item, level: int) -> str:
    """The item's hint at ``level`` (1, 2 or 3); raises ValueError for another level."""
    if level not in LEVELS:
        raise ValueError(f"hint level must be 1, 2 or 3, got {level!r}")
    if level == 1:
        return HINTS[item.number].equation
    if level == 2:
        return HINTS[item.number].pitfall
    return skeleton(item)


def skeleton(item: Item) -> str:
    """Level 3: generated from the item's references when the canon has them all, else hand-written."""
    from pytest_mlcanon import stubs

    if stubs.has_reference(item):
        names = SKELETON_NAMES.get(item.number)
        return "\n".join(stubs.skeleton(module, names) for module in item.modules)
    written = SKELETONS.get(item.number)
    if written is None:
        raise LookupError(f"{item.label} has neither a reference nor a written skeleton")
    return written
