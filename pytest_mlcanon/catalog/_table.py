"""The sixty items of the canon, as one table.

Generated once from the index and the per-item tables of canon-spec.md; edit here, not there.
Columns: number, slug, title, level, block, modules, test files, from-memory minutes, taught in,
depends on (item numbers), forbidden shortcuts (dotted names: a module prefix or a callable),
framework.

Depends on: the items whose modules this item's reference imports (the GPT imports the KV cache).
:data:`AFTER` adds the seed's learning order (section 3), which no import shows: IoU before NMS
before anchors; RNN and LSTM, then the tokenizer, then attention in its exact order; the KV cache,
RoPE and the LLM variants after the GPT; the RL chain dynamic programming, Q-learning, DQN,
REINFORCE, actor-critic, GAE, PPO; reward model, DPO, GRPO; the capstone after #31, #39, #42, #54,
#55, #56 and #59. ``mlcanon plan`` proposes an item only once the earlier items of both have passed."""

from __future__ import annotations

# fmt: off
ROWS: tuple[tuple, ...] = (
    (1, 'classical/linear_regression', 'Linear regression (normal equations + GD)', 'A', 1, ('classical/linear_regression',), ('test_classical_linear.py',), 15, 'II, Linear regression', (), ('sklearn', 'torch'), 'NumPy'),
    (2, 'classical/logistic_regression', 'Logistic regression', 'A', 1, ('classical/logistic_regression',), ('test_classical_logistic.py',), 20, 'II, Logistic & softmax', (), ('sklearn', 'scipy.special.expit', 'torch'), 'NumPy'),
    (3, 'classical/softmax_regression', 'Softmax regression', 'A', 1, ('classical/softmax_regression',), ('test_classical_logistic.py',), 20, 'II, Logistic & softmax', (), ('sklearn', 'scipy.special.softmax', 'torch'), 'NumPy'),
    (4, 'classical/knn', 'KNN with vectorised distances', 'B', 1, ('classical/knn',), ('test_classical_knn_kmeans.py',), 15, 'II, KNN & K-means', (), ('sklearn', 'scipy.spatial', 'torch'), 'NumPy'),
    (5, 'classical/kmeans', 'K-means', 'B', 1, ('classical/kmeans',), ('test_classical_knn_kmeans.py',), 20, 'II, KNN & K-means', (4,), ('sklearn', 'scipy.cluster', 'torch'), 'NumPy'),
    (6, 'classical/decision_tree', 'Decision tree (CART, Gini)', 'B', 1, ('classical/decision_tree',), ('test_classical_trees.py',), 35, 'II, Trees & ensembles', (), ('sklearn', 'torch'), 'NumPy'),
    (7, 'classical/pca', 'PCA', 'A', 1, ('classical/pca',), ('test_classical_pca.py',), 15, 'II, Dimensionality reduction', (), ('sklearn', 'torch'), 'NumPy'),
    (8, 'classical/gmm', 'GMM with EM', 'B', 1, ('classical/gmm',), ('test_classical_prob_em.py',), 35, 'II, Probabilistic models & EM', (5,), ('sklearn', 'torch'), 'NumPy'),
    (9, 'optim/sgd_momentum', 'SGD with momentum', 'A', 1, ('optim/optimizers',), ('test_optim_optimizers.py',), 10, 'I, Math', (), ('torch',), 'NumPy'),
    (10, 'optim/adam', 'Adam and AdamW', 'A', 1, ('optim/optimizers',), ('test_optim_optimizers.py',), 15, 'I, Math', (), ('torch',), 'NumPy'),
    (11, 'nn/mlp', 'MLP forward and backward in NumPy', 'A', 1, ('nn/mlp',), ('test_nn_mlp.py',), 30, 'III, MLPs & activations', (), ('torch',), 'NumPy (seed)'),
    (12, 'nn/autograd', 'Autograd engine', 'A', 1, ('nn/autograd',), ('test_nn_autograd.py',), 45, 'III, Autograd engine', (), ('torch',), 'pure Python (scalars); tests compare with torch'),
    (13, 'nn/batchnorm', 'BatchNorm forward and backward', 'A', 2, ('nn/normalization',), ('test_nn_normalization.py',), 25, 'III, Neural nets', (), ('torch',), 'NumPy'),
    (14, 'nn/layernorm', 'LayerNorm forward and backward', 'A', 2, ('nn/normalization',), ('test_nn_normalization.py',), 20, 'III, Neural nets', (), ('torch',), 'NumPy'),
    (15, 'nn/rmsnorm', 'RMSNorm', 'A', 2, ('nn/normalization_torch',), ('test_nn_normalization.py',), 10, 'III, Neural nets', (), ('torch.nn.RMSNorm', 'torch.nn.functional.rms_norm'), 'torch (seed)'),
    (16, 'vision/conv', 'Convolution via im2col', 'A', 2, ('vision/conv',), ('test_vision_conv.py',), 30, 'IV, Convolutions', (), ('torch', 'scipy.signal', 'scipy.ndimage'), 'NumPy'),
    (17, 'vision/tiny_cnn', 'Tiny CNN trained end to end', 'A', 2, ('vision/tiny_cnn',), ('test_vision_models.py',), 20, 'IV, CNN architectures', (), ('torchvision.models',), 'torch'),
    (18, 'detection/boxes', 'IoU and box conversions', 'B', 2, ('detection/boxes',), ('test_detection_boxes.py',), 10, 'IV, Vision', (), ('torchvision.ops',), 'torch (so DETR, #40, can back-propagate through GIoU)'),
    (19, 'detection/nms', 'NMS', 'B', 2, ('detection/nms',), ('test_detection_nms.py',), 15, 'IV, Vision', (18,), ('torchvision.ops',), 'torch'),
    (20, 'detection/anchors', 'Anchor generation and matching', 'B', 2, ('detection/anchors',), ('test_detection_anchors.py',), 25, 'IV, Vision', (18,), ('torchvision.models.detection', 'torchvision.ops'), 'torch'),
    (21, 'detection/focal_loss', 'Focal loss', 'B', 2, ('detection/focal_loss',), ('test_detection_losses.py',), 10, 'IV, Vision', (), ('torchvision.ops.sigmoid_focal_loss',), 'torch'),
    (22, 'sequence/rnn', 'RNN cell with BPTT', 'B', 3, ('sequence/rnn',), ('test_sequence_rnn.py',), 20, 'V, Sequences & Transformers', (), ('torch',), 'NumPy'),
    (23, 'sequence/lstm', 'LSTM cell with BPTT', 'B', 3, ('sequence/lstm',), ('test_sequence_lstm.py',), 30, 'V, Sequences & Transformers', (), ('torch',), 'NumPy'),
    (24, 'transformer/tokenizer_bpe', 'BPE tokenizer (train and encode)', 'A', 3, ('transformer/tokenizer_bpe',), ('test_transformer_tokenizers.py',), 30, 'V, Sequences & Transformers', (), ('tiktoken', 'tokenizers', 'sentencepiece', 'torch'), 'pure Python (byte-level)'),
    (25, 'transformer/attention', 'Scaled dot-product attention', 'A', 3, ('transformer/attention',), ('test_transformer_attention.py',), 10, 'V, Sequences & Transformers', (), ('torch.nn.functional.scaled_dot_product_attention', 'torch.nn.functional.multi_head_attention_forward', 'torch.nn.MultiheadAttention'), 'torch'),
    (26, 'transformer/multihead', 'Multi-head attention', 'A', 3, ('transformer/multihead',), ('test_transformer_multihead.py',), 20, 'V, Sequences & Transformers', (25, 27), ('torch.nn.functional.scaled_dot_product_attention', 'torch.nn.functional.multi_head_attention_forward', 'torch.nn.MultiheadAttention'), 'torch'),
    (27, 'transformer/masks', 'Causal and padding masks', 'A', 3, ('transformer/masks',), ('test_transformer_masks.py',), 10, 'V, Sequences & Transformers', (), ('torch.nn.Transformer.generate_square_subsequent_mask',), 'torch'),
    (28, 'transformer/cross_attention', 'Cross-attention', 'A', 3, ('transformer/multihead',), ('test_transformer_multihead.py',), 15, 'V, Sequences & Transformers', (26,), ('torch.nn.functional.scaled_dot_product_attention', 'torch.nn.functional.multi_head_attention_forward', 'torch.nn.MultiheadAttention'), 'torch'),
    (29, 'transformer/encoder_block', 'Transformer encoder block', 'A', 3, ('transformer/blocks',), ('test_transformer_blocks.py',), 20, 'V, Sequences & Transformers', (26, 36, 15, 35), ('torch.nn.TransformerEncoderLayer', 'torch.nn.MultiheadAttention', 'torch.nn.functional.scaled_dot_product_attention'), 'torch'),
    (30, 'transformer/decoder_block', 'Transformer decoder block', 'A', 3, ('transformer/blocks',), ('test_transformer_blocks.py',), 20, 'V, Sequences & Transformers', (26, 36, 15, 35), ('torch.nn.TransformerDecoderLayer', 'torch.nn.MultiheadAttention', 'torch.nn.functional.scaled_dot_product_attention'), 'torch'),
    (31, 'transformer/gpt', 'Tiny GPT end to end', 'A', 3, ('transformer/gpt',), ('test_transformer_gpt.py',), 45, 'V, Sequences & Transformers', (29, 30, 27, 33, 34), ('transformers', 'torch.nn.TransformerDecoderLayer', 'torch.nn.TransformerEncoderLayer'), 'torch'),
    (32, 'transformer/generation', 'Generation: greedy, temperature, top-k, top-p', 'A', 3, ('transformer/generation',), ('test_transformer_gpt.py',), 20, 'V, Sequences & Transformers', (31,), ('transformers',), 'torch'),
    (33, 'transformer/kv_cache', 'KV cache', 'B', 3, ('transformer/kv_cache',), ('test_transformer_multihead.py',), 20, 'VI, Efficient attention & KV cache', (), ('transformers',), 'torch'),
    (34, 'transformer/positional', 'RoPE', 'A', 3, ('transformer/positional',), ('test_transformer_positional.py',), 25, 'V, Sequences & Transformers', (), ('transformers', 'rotary_embedding_torch'), 'torch'),
    (35, 'llm/gqa', 'Grouped-query attention', 'B', 4, ('llm/gqa',), ('test_llm_gqa.py',), 15, 'VI, Large-model architecture', (25, 27), ('torch.nn.functional.scaled_dot_product_attention',), 'torch'),
    (36, 'transformer/ffn', 'SwiGLU feed-forward', 'B', 4, ('transformer/ffn',), ('test_transformer_blocks.py',), 10, 'VI, Large-model architecture', (), ('transformers',), 'torch'),
    (37, 'llm/moe', 'Tiny MoE with a top-k router', 'B', 4, ('llm/moe',), ('test_llm_moe.py',), 30, 'VI, Large-model architecture', (36,), ('transformers',), 'torch'),
    (38, 'finetune/lora', 'LoRA wrapper', 'A', 4, ('finetune/lora',), ('test_finetune_lora.py',), 15, 'VI, Fine-tuning & LoRA', (), ('peft',), 'torch'),
    (39, 'multimodal/vit', 'Tiny ViT', 'A', 5, ('multimodal/vit',), ('test_multimodal_vit.py',), 30, 'VIII, Vision Transformers', (29,), ('timm', 'torchvision.models'), 'torch'),
    (40, 'multimodal/detr', 'Hungarian matching + DETR set loss', 'B', 5, ('multimodal/hungarian', 'multimodal/detr_loss'), ('test_multimodal_detr.py',), 35, 'VIII, DETR', (18,), ('scipy.optimize', 'torchvision.ops'), 'NumPy (Hungarian), torch (loss)'),
    (41, 'multimodal/clip', 'CLIP-style contrastive training', 'A', 5, ('multimodal/clip',), ('test_multimodal_clip.py',), 20, 'VIII, CLIP', (), ('open_clip', 'transformers'), 'torch'),
    (42, 'multimodal/projectors', 'VLM projector', 'B', 5, ('multimodal/projectors',), ('test_multimodal_projectors.py',), 15, 'VIII, Multimodal', (28,), ('transformers',), 'torch'),
    (43, 'generative/vae', 'VAE with the reparameterisation trick', 'B', 5, ('generative/vae',), ('test_generative_vae.py',), 25, 'Part IX, Autoencoders & VAEs', (), ('diffusers',), 'torch'),
    (44, 'generative/ddpm', 'DDPM training and sampling', 'B', 5, ('generative/ddpm',), ('test_generative_ddpm.py',), 35, 'Part IX, Diffusion', (), ('diffusers',), 'torch'),
    (45, 'retrieval/ann', 'ANN retrieval: IVF, HNSW, PQ', 'B', 6, ('retrieval/ivf', 'retrieval/hnsw', 'retrieval/pq'), ('test_retrieval_ivf.py', 'test_retrieval_hnsw.py', 'test_retrieval_pq.py'), 40, 'XIII, Retrieval & RAG', (5,), ('faiss', 'hnswlib', 'annoy', 'sklearn', 'torch'), 'NumPy'),
    (46, 'retrieval/rag', 'RAG pipeline', 'B', 6, ('retrieval/rag',), ('test_retrieval_rag.py',), 25, 'XIII, Retrieval & RAG', (), ('faiss', 'langchain', 'llama_index', 'torch'), 'NumPy + stdlib'),
    (47, 'rl/dynamic_programming', 'Value iteration and policy iteration', 'A', 6, ('rl/dynamic_programming',), ('test_rl_dynamic_programming.py',), 15, 'Part XII, MDPs & Bellman', (), ('gymnasium', 'gym', 'torch'), 'NumPy'),
    (48, 'rl/q_learning', 'Q-learning on a gridworld', 'A', 6, ('rl/q_learning',), ('test_rl_q_learning.py',), 20, 'Part XII, Classical RL', (), ('gymnasium', 'gym', 'torch'), 'NumPy'),
    (49, 'rl/dqn', 'DQN with replay and a target net', 'B', 6, ('rl/dqn',), ('test_rl_dqn.py',), 35, 'Part XII, Deep RL & DQN', (), ('stable_baselines3',), 'torch'),
    (50, 'rl/reinforce', 'REINFORCE with a baseline', 'A', 6, ('rl/reinforce',), ('test_rl_reinforce.py',), 20, 'Part XII, Policy gradients', (), ('stable_baselines3', 'torch'), 'NumPy (as seed 003)'),
    (51, 'rl/actor_critic', 'Actor-critic', 'A', 6, ('rl/actor_critic',), ('test_rl_actor_critic.py',), 25, 'Part XII, Policy gradients', (), ('stable_baselines3',), 'torch'),
    (52, 'rl/gae', 'GAE', 'A', 6, ('rl/gae',), ('test_rl_gae.py',), 15, 'Part XII, Policy gradients', (), ('stable_baselines3', 'torch'), 'NumPy'),
    (53, 'rl/ppo', 'PPO update step', 'A', 6, ('rl/ppo',), ('test_rl_ppo.py',), 30, 'Part XII, Policy gradients', (), ('stable_baselines3',), 'torch'),
    (54, 'posttrain/reward_model', 'Reward model with a pairwise head', 'A', 7, ('posttrain/reward_model',), ('test_posttrain_reward_model.py',), 20, 'VII, Reward models', (31,), ('trl',), 'torch'),
    (55, 'posttrain/dpo', 'DPO loss', 'A', 7, ('posttrain/dpo',), ('test_posttrain_dpo.py',), 15, 'VII, DPO and its relatives', (31,), ('trl',), 'torch'),
    (56, 'posttrain/grpo', 'Simplified GRPO / RLVR', 'B', 7, ('posttrain/grpo',), ('test_posttrain_grpo.py',), 25, 'VII, Post-training', (55, 32), ('trl',), 'torch'),
    (57, 'systems/ddp', 'DDP by hand + a tensor-parallel linear', 'B', 7, ('systems/ddp_example', 'systems/tensor_parallel_toy'), ('test_systems_ddp.py', 'test_systems_tensor_parallel.py'), 35, 'XIV, Distributed training', (), ('torch.nn.parallel.DistributedDataParallel',), 'torch (ranks simulated in one process; optional gloo test)'),
    (58, 'quant/qlinear', 'int8 weight-only quantized matmul', 'B', 7, ('quant/qlinear',), ('test_quant_qlinear.py',), 20, 'VI, Quantization', (), ('torch.ao.quantization', 'torch.quantization', 'bitsandbytes'), 'torch'),
    (59, 'evaluation/harness', 'Evaluation harness with bootstrap CIs', 'A', 7, ('evaluation/harness',), ('test_evaluation_harness.py',), 40, 'XIII, Retrieval, eval & reliability', (), ('scipy.stats.bootstrap', 'sklearn', 'torch'), 'NumPy + stdlib'),
    (60, 'capstone/agent', 'Tiny end-to-end multimodal agent', 'B', 8, ('capstone/synthetic_task', 'capstone/tiny_vision_encoder', 'capstone/projector', 'capstone/tiny_lm', 'capstone/multimodal_model', 'capstone/optimizer', 'capstone/sft_stage', 'capstone/reward_stage', 'capstone/preference_stage', 'capstone/tool_loop', 'capstone/pipeline'), ('test_capstone_pipeline.py', 'test_capstone_components.py'), 180, '§6 of the canon chapter', (), ('transformers',), 'torch'),
)
# fmt: on

# Item number -> the earlier items it comes after in the seed's order, beyond what it imports.
AFTER: dict[int, tuple[int, ...]] = {
    2: (1,), 3: (2,), 10: (9,), 11: (9,), 12: (11,),  # block 1: regression, then the optimizers, the MLP, autograd
    13: (11,), 14: (13,), 15: (14,), 16: (11,), 17: (16,), 20: (19,), 21: (2,),  # block 2: IoU, NMS, anchors
    22: (11,), 23: (22,), 25: (23, 24), 27: (26,), 28: (27,), 29: (28,), 30: (29,),  # block 3: the attention order
    33: (31, 32), 34: (31,),  # the KV cache and RoPE once the model they attach to works
    35: (31,), 36: (31,), 37: (31,), 38: (31,),  # block 4: small edits to the GPT
    41: (3,), 42: (39,),  # CLIP reuses softmax cross-entropy; the projector sits on the ViT
    46: (45,), 59: (46,),  # the retrieval chain into evaluation
    48: (47,), 49: (48,), 50: (49,), 51: (50,), 52: (51,), 53: (52,),  # the RL chain
    55: (54,), 56: (53,),  # reward model, DPO, GRPO (on PPO's clip)
    60: (31, 39, 42, 54, 55, 56, 59),  # the capstone
}
