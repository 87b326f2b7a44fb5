"""The `hf` provider: Hugging Face transformers' LlamaAttention with a StaticCache, the
attention layer most users run, given the weights and cached K/V of attnbench's layer.

transformers is an optional extra (`pip install attnbench[hf]`); without it the provider
is unsupported, never an error. Rotary embeddings are given as the identity (cos 1,
sin 0), so the layer computes the same attention as the others: it still pays for
applying them, as it does in a model.
"""

from __future__ import annotations

import inspect

import torch

from .workload import DecodeInputs, Workload, in_turn

#: The oldest transformers checked whose LlamaAttention takes the cache as `cache=` and
#: whose StaticCache keeps its length in a tensor (what a fixed-context step resets).
MIN_VERSION = "5.24"


def hf_unavailable() -> str | None:
    """Why the hf provider cannot run here, or None."""
    try:
        import transformers
        from transformers.models.llama.modeling_llama import LlamaAttention
    except ImportError:
        return "transformers is not installed (pip install attnbench[hf])"
    if "cache" not in inspect.signature(LlamaAttention.forward).parameters:
        return (
            f"transformers {transformers.__version__} predates the LlamaAttention(cache=) "
            f"API (needs {MIN_VERSION} or newer)"
        )
    return None


def prepare_hf(inputs: DecodeInputs) -> Workload:
    from transformers import LlamaConfig, StaticCache
    from transformers.models.llama.modeling_llama import LlamaAttention

    layer, x, context, gen_len = inputs.layer, inputs.x, inputs.context_len, inputs.gen_len
    batch, dim, kv_heads = x.shape[0], layer.head_dim, layer.num_kv_heads
    config = LlamaConfig(
        hidden_size=layer.d_model,
        num_attention_heads=layer.num_heads,
        num_key_value_heads=kv_heads,
        head_dim=dim,
        attention_bias=layer.shape.bias,
        num_hidden_layers=1,
    )
    config._attn_implementation = "sdpa"
    attention = LlamaAttention(config, layer_idx=0).to(device=x.device, dtype=x.dtype).eval()
    attention.load_state_dict(layer.state_dict())
    ones = torch.ones(batch, x.shape[1], dim, dtype=x.dtype, device=x.device)
    identity = (ones, torch.zeros_like(ones))  # rotary embeddings that change nothing

    def rotary(length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return identity[0][:, :length], identity[1][:, :length]

    def static_cache(length: int) -> tuple[StaticCache, torch.Tensor]:
        """A StaticCache of `length` tokens holding the point's cached K/V, and the tensor
        that holds its length."""
        cache = StaticCache(config=config, max_cache_len=length)
        cache.early_initialization(batch, kv_heads, dim, x.dtype, x.device)
        held = cache.layers[0]
        if inputs.cache is not None:
            held.keys.copy_(inputs.cache.k[:, :, :length])
            held.values.copy_(inputs.cache.v[:, :, :length])
        return cache, held.cumulative_length

    if inputs.cache is None:
        prefix = x[:, : context + 1].contiguous()
        prefix_rotary = rotary(context + 1)

        def generation_step(length: int):
            tokens, embeddings = x[:, :length], rotary(length)
            return lambda: attention(tokens, embeddings, None)[0][:, -1:]

        steps = [generation_step(context + i + 1) for i in range(gen_len)]
        return Workload(
            step=lambda: attention(prefix, prefix_rotary, None)[0][:, -1:],
            generation=in_turn(steps) if steps else None,
        )

    # The step's cache holds exactly context + 1 tokens: a StaticCache attends all of them.
    cache, length = static_cache(context + 1)
    token, token_rotary = x[:, context : context + 1].contiguous(), rotary(1)
    prompt, prompt_rotary = x[:, :context].contiguous(), rotary(context)
    workload = Workload(
        step=lambda: attention(token, token_rotary, None, cache=cache)[0],
        step_setup=lambda: length.fill_(context),
        prefill=lambda: attention(prompt, prompt_rotary, None, cache=cache)[0],
        prefill_setup=lambda: length.fill_(0),
    )
    if gen_len:
        # A generation runs as transformers' generate does: a cache of context + gen_len
        # tokens, masked to the tokens written so far.
        gen_cache, gen_length = static_cache(context + gen_len)
        keys = torch.arange(context + gen_len, device=x.device)

        def masked_step(position: int):
            tok = x[:, position : position + 1].contiguous()
            mask = (keys <= position).view(1, 1, 1, -1)
            return lambda: attention(tok, token_rotary, mask, cache=gen_cache)[0]

        workload.generation = in_turn([masked_step(t) for t in range(context, context + gen_len)])
        workload.generation_setup = lambda: gen_length.fill_(context)
    return workload
