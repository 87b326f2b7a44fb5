"""What transformers' own cache holds after a prefill, per decoder layer, computed on ``meta``.

A reference for attnbench's cache-size formulas. Instead of re-deriving shapes from config
fields, it runs transformers' own code (the model's forward, its decoder layers, their
attention / Mamba / gated-DeltaNet / lightning / short-conv mixers, and the model's own cache
object) on the ``meta`` device, where tensors have shapes and dtypes but no storage, and reads
back what the cache holds.

How it works:

1. The decoder model is built on ``meta`` in the model dtype (the config's, as
   ``from_pretrained`` would load it), with the ``batched_mm`` experts implementation: a
   per-token gather of expert weights, with no data-dependent routing, so MoE layers run on
   ``meta`` in any dtype.
2. One forward runs with ``use_cache=True`` on a short *probe* prefill of
   ``min(tokens, PROBE_TOKENS)`` tokens, and the model creates its own cache
   (``DynamicCache(config=...)``, ``MiniMaxCache``, RecurrentGemma's module-held state). Every
   ``Cache.update`` / ``Cache.update_indexer`` call is recorded (shapes, dtypes, arguments),
   with a copy of that cache layer as it was before the call.
3. Fixed-size states (conv and recurrent, in the dtype transformers keeps them) are read from
   the probe's cache: they do not depend on the prefill length (checked against direct
   prefills, see NOTES). Per-token tensors are *replayed*: the recorded calls are made again
   on the copy of the cache layer, with the sequence dimension (dim -2) set to ``tokens``. So a
   sliding layer's own ``update`` applies its window, an MLA layer caches its latent, and so
   on, exactly as in a prefill of ``tokens`` tokens.
4. Decoder layers with the same structure (class, layer type, parameter and buffer shapes and
   dtypes) give the same per-token shapes and states, so by default only the first layer of
   each structure runs; the others return its output, and their cache entries are taken from
   it (K/V replayed onto each layer's own cache layer, so per-layer windows still apply).
   ``dedup=False`` runs every layer.
5. Submodules that cannot run on ``meta`` because they depend on data (MoE blocks that loop
   over the experts a batch hits, e.g. DBRX's) and are not handed the cache return an empty
   tensor shaped like their input; they write nothing to the cache.

``python scripts/hf_cache_reference.py CONFIG.json [...]`` prints a per-layer-kind summary.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:  # transformers is an optional dependency (the `hf` extra): imported lazily
    from transformers import PretrainedConfig
    from transformers.cache_utils import Cache

__all__ = ["PROBE_TOKENS", "LayerCache", "prefilled_cache", "summarize", "main"]

PROBE_TOKENS = 16
"""Prefill length run through the model; the K/V of longer prefills is replayed."""

_STATE_DICTS = {"conv_states": "conv", "recurrent_states": "recurrent"}
_DATA_DEPENDENT = ("meta tensor", "data-dependent", "nonzero", "item()")
_CACHED = 16  # models and probes kept, per config


@dataclass(frozen=True)
class LayerCache:
    """What one decoder layer's cache holds after a prefill (batch 1).

    Attributes:
        kind: the layer type transformers' cache uses for the layer ("full_attention",
            "sliding_attention", "chunked_attention", "linear_attention", "conv", "hybrid",
            "dummy", ...).
        kv_bytes: bytes of per-token tensors (keys, values, MLA latents, indexer keys).
        conv_bytes: bytes of convolution states.
        recurrent_bytes: bytes of recurrent states (SSM, linear attention, RG-LRU).
        shapes: every tensor the cache holds for the layer, by name.
        dtypes: the dtype of each tensor in ``shapes``.
        cache_class: the class of the layer's entry in the cache ("DynamicLayer", ...).
    """

    kind: str
    kv_bytes: int
    conv_bytes: int
    recurrent_bytes: int
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str] = field(default_factory=dict)
    cache_class: str = ""

    @property
    def total_bytes(self) -> int:
        """All bytes the layer's cache holds."""
        return self.kv_bytes + self.conv_bytes + self.recurrent_bytes


@dataclass
class _Call:
    """One recorded cache write: the method, its tensors' shapes and dtypes, other arguments."""

    method: str
    tensors: list[tuple[tuple[int, ...], torch.dtype]]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class _Probe:
    """What one probe forward found; independent of the token count replayed later."""

    tokens: int
    kinds: list[str]
    cache_classes: list[str]
    representative: list[int]
    calls: list[list[_Call]]
    blank_layers: list[Any]
    states: list[dict[str, tuple[str, torch.Tensor]]]
    skipped: tuple[str, ...]
    seconds: float


_MODELS: dict[tuple[str, torch.dtype], nn.Module] = {}
_PROBES: dict[tuple[str, torch.dtype, int, bool], _Probe] = {}


def _remember(store: dict, key: Any, make: Callable[[], Any]) -> Any:
    """``store[key]``, made on first use; the oldest entries go beyond ``_CACHED``."""
    if key not in store:
        store[key] = make()
        while len(store) > _CACHED:
            del store[next(iter(store))]
    return store[key]


def _text_config(config: PretrainedConfig) -> PretrainedConfig:
    """The decoder's config (the ``text_config`` of multimodal configs such as Qwen3.5's)."""
    return config.get_text_config(decoder=True)


def _config_key(config: PretrainedConfig) -> str:
    """A key identifying a config by its class and full contents."""
    return f"{type(config).__qualname__}:{config.to_json_string(use_diff=False)}"


def _resolve_dtype(config: PretrainedConfig, dtype: torch.dtype | str | None) -> torch.dtype:
    """The model dtype: the one given, else the config's, else float32."""
    value = dtype if dtype is not None else getattr(config, "dtype", None)
    if value is None or value == "auto":
        return torch.float32
    if isinstance(value, str):
        return getattr(torch, value.removeprefix("torch."))
    return value


def _meta_model(config: PretrainedConfig, dtype: torch.dtype) -> nn.Module:
    """The decoder model on ``meta`` (kept: it allocates nothing, but building takes time)."""

    def build() -> nn.Module:
        from transformers import AutoModel

        own = copy.deepcopy(config)  # from_config writes implementation choices into it
        with torch.device("meta"):
            try:
                model = AutoModel.from_config(own, dtype=dtype, experts_implementation="batched_mm")
            except ValueError:  # a model whose experts implementation cannot be chosen
                model = AutoModel.from_config(own, dtype=dtype)
        return model.eval()

    return _remember(_MODELS, (_config_key(config), dtype), build)


def _decoder_layers(model: nn.Module, count: int) -> nn.ModuleList:
    """The model's decoder layers: its ``layers`` list, else the first list of ``count``."""
    layers = getattr(model, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) == count:
        return layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"{type(model).__name__} has no list of {count} decoder layers")


def _layer_kinds(config: PretrainedConfig, count: int) -> list[str]:
    """The per-layer cache types transformers derives from the config ("" if it cannot)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    try:
        kinds, _ = get_layer_types_and_kwargs(config)
    except (AttributeError, TypeError, ValueError):
        return [""] * count
    return [*kinds, *[""] * count][:count]


def _signature(layer: nn.Module, kind: str) -> tuple[Any, ...]:
    """Layers with equal signatures write equally shaped K/V and states."""
    params = tuple((n, tuple(p.shape), p.dtype) for n, p in layer.named_parameters())
    buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in layer.named_buffers())
    return (type(layer).__qualname__, kind, getattr(layer, "layer_type", None), params, buffers)


def _plain_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Tensors a module and its children hold as plain attributes (not parameters/buffers)."""
    found = {}
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if isinstance(value, torch.Tensor) and not name.startswith("_"):
                found[f"{prefix}.{name}" if prefix else name] = value
    return found


def _forward_kwargs(model: nn.Module, hidden: int, tokens: int, dtype: torch.dtype) -> dict:
    """Arguments for a prefill of ``tokens`` tokens through the model's own ``forward``."""
    kwargs: dict[str, Any] = {
        "inputs_embeds": torch.empty(1, tokens, hidden, dtype=dtype, device="meta"),
        "use_cache": True,
    }
    # Given positions, models need not ask the cache for its length (`get_seq_length`).
    if "position_ids" in inspect.signature(model.forward).parameters:
        kwargs["position_ids"] = torch.arange(tokens, device="meta")[None]
    return kwargs


@contextlib.contextmanager
def _recording(calls: list[tuple[Cache, int, _Call, Any]]) -> Iterator[None]:
    """Record every ``Cache.update`` / ``update_indexer`` call, and the layer before the first."""
    from transformers.cache_utils import Cache

    originals = {name: getattr(Cache, name) for name in ("update", "update_indexer")}
    seen: set[tuple[int, int]] = set()

    def recorder(name: str, n_tensors: int) -> Callable[..., Any]:
        original = originals[name]

        def record(self: Cache, *args: Any, **kwargs: Any) -> Any:
            tensors, layer_idx, rest = args[:n_tensors], args[n_tensors], args[n_tensors + 1 :]
            before = None
            if (id(self), layer_idx) not in seen:
                seen.add((id(self), layer_idx))
                if layer_idx < len(self.layers):
                    before = copy.deepcopy(self.layers[layer_idx])
            shapes = [(tuple(t.shape), t.dtype) for t in tensors]
            calls.append((self, layer_idx, _Call(name, shapes, tuple(rest), dict(kwargs)), before))
            return original(self, *args, **kwargs)

        return record

    Cache.update = recorder("update", 2)
    Cache.update_indexer = recorder("update_indexer", 1)
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(Cache, name, original)


@contextlib.contextmanager
def _skipping_data_dependent(layers: nn.ModuleList, skipped: set[str]) -> Iterator[None]:
    """Let submodules of the decoder layers that cannot run on ``meta`` because they depend on
    data (MoE blocks looping over the experts hit) return an empty tensor shaped like their
    first argument. Only modules not handed the cache are skipped: they write nothing to it,
    and here their output is only ever read for its shape."""
    from transformers.cache_utils import Cache

    wrapped = []

    def wrap(module: nn.Module) -> None:
        original = module.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except (RuntimeError, NotImplementedError) as error:
                values = [*args, *kwargs.values()]
                if not (
                    any(part in str(error) for part in _DATA_DEPENDENT)
                    and values
                    and isinstance(values[0], torch.Tensor)
                    and not any(isinstance(value, Cache) for value in values)
                ):
                    raise
                skipped.add(type(module).__name__)
                return torch.empty_like(values[0])

        module.forward = forward
        wrapped.append(module)

    for layer in layers:
        for _, module in layer.named_modules():
            if module is not layer and "forward" not in vars(module):
                wrap(module)
    try:
        yield
    finally:
        for module in wrapped:
            del module.forward


@contextlib.contextmanager
def _deduplicated(layers: nn.ModuleList, kinds: list[str], dedup: bool) -> Iterator[list[int]]:
    """Yield each layer's representative; non-representatives return their representative's
    output instead of running."""
    representative: list[int] = []
    first: dict[tuple[Any, ...], int] = {}
    outputs: dict[int, Any] = {}
    hooks, stubbed = [], []

    def keep(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            outputs[index] = output

        return hook

    def stub(index: int) -> Callable[..., Any]:
        return lambda *args, **kwargs: outputs[index]

    for i, layer in enumerate(layers):
        rep = first.setdefault(_signature(layer, kinds[i]), i) if dedup else i
        representative.append(rep)
        if rep == i:
            hooks.append(layer.register_forward_hook(keep(i)))
        else:
            layer.forward = stub(rep)
            stubbed.append(layer)
    try:
        yield representative
    finally:
        for hook in hooks:
            hook.remove()
        for layer in stubbed:
            del layer.forward


def _run(model: nn.Module, text: PretrainedConfig, kwargs: dict, kinds: list[str]) -> Any:
    """The model's forward; without attention masks when the model cannot build them."""
    try:
        return model(**kwargs)
    except ValueError as error:
        # Mask creation asks the cache for its length, which raises when no layer attends
        # (Bamba / GraniteMoeHybrid configs without attention layers); no mask is needed then.
        if "only contain LinearAttention layers" not in str(error):
            raise
        names = {*kinds, *(getattr(text, "layer_types", None) or ()), "full_attention"}
        return model(**kwargs, attention_mask=dict.fromkeys(names))


def _states(cache: Cache | None, index: int, layer: nn.Module, before: list) -> dict:
    """Fixed-size state of layer ``index``: the cache layer's conv/recurrent states, lists on
    the cache (MiniMax's ``linear_cache``), and tensors the layer's modules came to hold
    (RecurrentGemma's ``conv1d_state`` and ``recurrent_states``)."""
    found: dict[str, tuple[str, torch.Tensor]] = {}
    if cache is not None and index < len(cache.layers):
        for attr, group in _STATE_DICTS.items():
            for state_idx, tensor in (getattr(cache.layers[index], attr, None) or {}).items():
                if isinstance(tensor, torch.Tensor):
                    found[f"{attr}[{state_idx}]"] = (group, tensor)
    for attr, value in (vars(cache) if cache is not None else {}).items():
        entry = value[index] if isinstance(value, list) and index < len(value) else None
        if attr != "layers" and isinstance(entry, torch.Tensor):
            found[f"cache.{attr}"] = ("recurrent", entry)
    for name, tensor in _plain_tensors(layer).items():
        if not any(tensor is old for old in before):
            found[f"module.{name}"] = ("conv" if "conv" in name else "recurrent", tensor)
    return found


def _probe(text: PretrainedConfig, dtype: torch.dtype, tokens: int, dedup: bool) -> _Probe:
    """Run the model's forward on a ``tokens``-long prefill and record what its cache got."""
    start = time.perf_counter()
    model = _meta_model(text, dtype)
    count = text.num_hidden_layers
    layers = _decoder_layers(model, count)
    kinds = _layer_kinds(text, count)
    # Tensors the layers hold before the forward, kept alive so that identity is meaningful.
    held_before = [list(_plain_tensors(layer).values()) for layer in layers]
    recorded: list[tuple[Cache, int, _Call, Any]] = []
    skipped: set[str] = set()
    kwargs = _forward_kwargs(model, text.hidden_size, tokens, dtype)
    with (
        _deduplicated(layers, kinds, dedup) as representative,
        _recording(recorded),
        _skipping_data_dependent(layers, skipped),
        torch.no_grad(),
    ):
        out = _run(model, text, kwargs, kinds)

    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if cache is None and recorded:  # RecurrentGemma returns no cache
        cache = recorded[-1][0]
    calls: dict[int, list[_Call]] = {}
    blank: dict[int, Any] = {}
    for owner, layer_idx, call, before in recorded:
        if owner is not cache:
            continue
        if call.tensors[0][0][-2] != tokens:
            raise ValueError(f"layer {layer_idx}: {call.method}{call.tensors}: not {tokens} at -2")
        calls.setdefault(layer_idx, []).append(call)
        blank.setdefault(layer_idx, before)

    blank_layers, cache_classes, states = [], [], []
    for i in range(count):
        held = cache.layers[i] if cache is not None and i < len(cache.layers) else None
        # A layer stubbed, or never written, is still blank in the cache.
        layer_blank = blank[i] if i in blank else copy.deepcopy(held)
        if layer_blank is None and getattr(cache, "layer_class_to_replicate", None) is not None:
            layer_blank = cache.layer_class_to_replicate()
        blank_layers.append(layer_blank)
        cache_classes.append(type(held if held is not None else layer_blank).__name__)
        rep = representative[i]
        states.append(_states(cache, rep, layers[rep], held_before[rep]))
    return _Probe(
        tokens=tokens,
        kinds=[kind or cls for kind, cls in zip(kinds, cache_classes, strict=True)],
        cache_classes=cache_classes,
        representative=representative,
        calls=[calls.get(representative[i], []) for i in range(count)],
        blank_layers=blank_layers,
        states=states,
        skipped=tuple(sorted(skipped)),
        seconds=time.perf_counter() - start,
    )


def _probe_for(
    config: PretrainedConfig, tokens: int, dtype: torch.dtype | str | None, dedup: bool
) -> _Probe:
    """The probe for a prefill of ``tokens`` tokens (run once per config, dtype and length)."""
    if tokens < 1:
        raise ValueError("tokens must be at least 1")
    text = _text_config(config)
    resolved = _resolve_dtype(text, dtype if dtype is not None else getattr(config, "dtype", None))
    length = min(tokens, PROBE_TOKENS)
    key = (_config_key(text), resolved, length, dedup)
    return _remember(_PROBES, key, lambda: _probe(text, resolved, length, dedup))


def _replay(blank: Any, calls: list[_Call], tokens: int) -> dict[str, torch.Tensor]:
    """Make the recorded cache writes again on a copy of the blank layer, ``tokens`` long:
    the tensors it then holds, but its 0-d bookkeeping."""
    if blank is None or not calls:
        return {}
    layer = copy.deepcopy(blank)
    for call in calls:
        tensors = [
            torch.empty((*shape[:-2], tokens, shape[-1]), dtype=dtype, device="meta")
            for shape, dtype in call.tensors
        ]
        getattr(layer, call.method)(*tensors, *call.args, **call.kwargs)
    # a 0-d tensor is bookkeeping, not cache: transformers 5.25's hybrid layers keep a
    # token count (cumulative_length_linear, int64) beside their keys and values
    return {
        name: value
        for name, value in vars(layer).items()
        if isinstance(value, torch.Tensor) and not name.startswith("_") and value.dim() > 0
    }


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def prefilled_cache(
    config: PretrainedConfig,
    tokens: int,
    *,
    dtype: torch.dtype | str | None = None,
    dedup: bool = True,
) -> list[LayerCache]:
    """Per decoder layer, what transformers' own cache holds after a prefill of ``tokens``
    tokens, batch 1.

    Args:
        config: a transformers config, as ``AutoConfig.from_pretrained`` or
            ``AutoConfig.for_model`` give it; multimodal configs are reduced to their decoder.
        tokens: the prefill length.
        dtype: the model dtype; by default the config's (float32 when it names none), as
            ``from_pretrained`` would load the model.
        dedup: run only the first of each group of structurally identical decoder layers
            (module docstring); ``False`` runs every layer, for checking.

    Returns:
        One ``LayerCache`` per decoder layer, in order.
    """
    probe = _probe_for(config, tokens, dtype, dedup)
    result = []
    for i, kind in enumerate(probe.kinds):
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        sizes = {"kv": 0, "conv": 0, "recurrent": 0}
        per_token = _replay(probe.blank_layers[i], probe.calls[i], tokens)
        tensors = [(name, "kv", t) for name, t in per_token.items()]
        tensors += [(name, group, t) for name, (group, t) in probe.states[i].items()]
        for name, group, tensor in tensors:
            shapes[name] = tuple(tensor.shape)
            dtypes[name] = str(tensor.dtype).removeprefix("torch.")
            sizes[group] += _nbytes(tensor)
        result.append(
            LayerCache(
                kind=kind,
                kv_bytes=sizes["kv"],
                conv_bytes=sizes["conv"],
                recurrent_bytes=sizes["recurrent"],
                shapes=shapes,
                dtypes=dtypes,
                cache_class=probe.cache_classes[i],
            )
        )
    return result


def summarize(layers: list[LayerCache]) -> list[dict[str, Any]]:
    """One row per group of layers with the same kind, cache class and shapes."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for layer in layers:
        key = (layer.kind, layer.cache_class, tuple(sorted(layer.shapes.items())))
        row = groups.setdefault(
            key,
            {
                "kind": layer.kind,
                "cache_class": layer.cache_class,
                "layers": 0,
                "kv_bytes": layer.kv_bytes,
                "conv_bytes": layer.conv_bytes,
                "recurrent_bytes": layer.recurrent_bytes,
                "tensors": {k: (v, layer.dtypes.get(k, "")) for k, v in layer.shapes.items()},
            },
        )
        row["layers"] += 1
    return list(groups.values())


def _mib(n: int) -> str:
    return f"{n / 2**20:,.3f} MiB"


def main(argv: list[str] | None = None) -> int:
    """Print, for each config given, the per-layer-kind summary at two prefill lengths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="config.json files, or model types")
    parser.add_argument("--tokens", type=int, nargs=2, default=(4096, 131072), metavar="T")
    parser.add_argument("--dtype", help="model dtype (default: the config's, else float32)")
    parser.add_argument("--no-dedup", action="store_true", help="run every decoder layer")
    args = parser.parse_args(argv)
    failed = 0
    for path in args.configs:
        try:
            _print_summary(path, args.tokens, args.dtype, not args.no_dedup)
        except Exception as error:  # one config transformers cannot build does not stop the rest
            failed += 1
            print(f"== {path}: FAILED: {type(error).__name__}: {str(error).splitlines()[0]}")
    return 1 if failed else 0


def _print_summary(path: str, lengths: list[int], dtype: str | None, dedup: bool) -> None:
    """Print one config's per-layer-kind summary at each prefill length."""
    from transformers import AutoConfig

    start = time.perf_counter()
    is_file = path.endswith(".json")
    config = AutoConfig.from_pretrained(path) if is_file else AutoConfig.for_model(path)
    text = _text_config(config)
    print(f"== {path}: {text.model_type}, {text.num_hidden_layers} layers")
    for tokens in lengths:
        t0 = time.perf_counter()
        layers = prefilled_cache(config, tokens, dtype=dtype, dedup=dedup)
        took = time.perf_counter() - t0
        total = sum(layer.total_bytes for layer in layers)
        print(f"  {tokens:,} tokens: {_mib(total)} in all ({took:.2f} s)")
        for row in summarize(layers):
            print(
                f"    {row['layers']:3d} x {row['kind']:<18} {row['cache_class']:<37}"
                f" kv {_mib(row['kv_bytes'])}  conv {_mib(row['conv_bytes'])}"
                f"  recurrent {_mib(row['recurrent_bytes'])}"
            )
            for name, (shape, dt) in row["tensors"].items():
                print(f"          {name:<46} {shape} {dt}")
    probe = _probe_for(config, max(lengths), dtype, dedup)
    ran = len(set(probe.representative))
    notes = f"; returned empty on meta: {', '.join(probe.skipped)}" if probe.skipped else ""
    print(
        f"  ({ran} of {len(probe.representative)} layers run, probe {probe.seconds:.2f} s,"
        f" total {time.perf_counter() - start:.2f} s{notes})"
    )


if __name__ == "__main__":
    sys.exit(main())
