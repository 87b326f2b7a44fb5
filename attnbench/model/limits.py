"""The upper bounds of the sizes attnbench reads, from a sweep file, a flag or a model's
config.json: far above any real model or run, low enough that no size computed from them
overflows a tensor's 64-bit element count or takes a list per unit (a layer, a token)
that cannot be held. The sweep schema bounds its fields by them; hf_config the same
quantities as a config.json gives them."""

from __future__ import annotations

MAX_WIDTH = 2**20  # d_model; hidden and MLP widths, latent ranks
MAX_HEADS = 2**16  # num_heads, num_kv_heads, head_dim
MAX_LAYERS = 100_000
MAX_TOKENS = 10**9  # batch, seq_len, prompt_len; windows, pages and scale groups
MAX_EXPERTS = 2**16
MAX_VOCAB = 2**24
MAX_POSITIONS = 2**40  # the context a model declares
MAX_GEN_LEN = 1_000_000  # decode steps run one by one
MAX_REPEATS = 10_000  # warmup, repeats, min_repeats
MAX_TIME_LIMIT_S = 3600.0  # max_time
MAX_GPUS = 1_000_000  # tp, gpus
MAX_MEMORY_BYTES = 2**60  # a GPU's memory: 1 EiB, a million times today's largest
