"""Whole-model parameter counts of any model type transformers builds, split into
attnbench's parts: for a config.json of a model type that attnbench has no formulas for.

attnbench's own formulas (model/model_params.py) cover the model types it knows, and
tests hold them to transformers. Any other type is counted here as transformers builds
it: AutoModelForCausalLM.from_config on the `meta` device (nothing allocated), its
parameters and the buffers its checkpoints store, each tensor once (a tied head is the
embeddings' weight). A multimodal config's ForConditionalGeneration model counts its
language model and output head, without the vision tower.

Each tensor's part follows from its name (`_part`). A token mixer that holds a
convolution or SSM or decay parameters (Mamba, gated DeltaNet, lightning and linear
attention, short convolutions, RWKV, RG-LRU) is a "state layer", all its tensors with it.
Otherwise the first of `_RULES` that matches names the part: the module a tensor is in
(attention with its q/k norms, experts, router, MLP with the shared experts), then, where
no module says, the projection's own name (q_proj, up_proj...), then norms. What no rule
places (layer scales, AltUp, adapters) is "other".
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from ..errors import UsageError, closest
from ..model.model_params import COUNTED_PARTS

#: The parts of a count: attnbench's PARTS, with the token mixers of the layers that are
#: not attention and what no rule places.
HF_PARTS: tuple[str, ...] = COUNTED_PARTS

#: The name of a module that mixes tokens in a layer: attention, or a state layer's mixer.
_MIXER = re.compile(r"self_attn|attention|mixer|conv|temporal_block|mlstm_layer")
#: The name of a tensor or module that makes the token mixer holding it a state layer: an
#: SSM's A_log, a convolution, the decay of a linear attention or recurrence (RWKV,
#: lightning attention), an mLSTM's forget gate.
_STATE_MARK = re.compile(r"A_log|conv(_?1d)?|time_decay|slope_rate|fgate_preact")
#: A query's norm's weight (self_attn.q_norm.weight), as most model types with one name
#: it (Persimmon's, Phi's and StableLM's q_layernorm are not read).
_Q_NORM = re.compile(r"(^|\.)q_norm\.weight$")
#: (part, pattern searched in "." + name): the first that matches places a tensor.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (part, re.compile(pattern))
    for part, pattern in (
        ("output head", r"^\.(lm_head|cls)\."),  # around the head: BERT's transform
        ("state layers", r"\.(mamba|linear_attn)\."),
        ("attention", r"\.(\w*_)?(attn|attention)s?\."),  # self_attn, attention, cross_attn...
        ("experts", r"\.experts\."),
        ("router", r"\.(gate|router)\.|\.(e_score_correction_bias|expert_bias)$"),
        (  # the dense MLP, or a MoE layer's shared experts and their gate
            "mlp",
            r"\.(mlp|feed_forward|ffns?|ff|shared_mlp)\.|\.(intermediate|output)\.dense\.",
        ),
        ("embeddings", r"\.(?!\w*norm)(\w*embed\w*|wte|wpe)\.[^.]+$"),
        # in a module whose name does not say (NemotronH's mixer, BART's layer): the
        # projection's own name
        ("attention", r"\.[qkvo]_proj\.[^.]+$"),
        ("mlp", r"\.((up|down|gate|gate_up)_proj|fc1|fc2)\.[^.]+$"),
        ("norms", r"(?i)\.(\w*norm\w*|ln\w*|\w*_ln)\."),
    )
)


@dataclass(frozen=True)
class TransformersCount:
    """A model's parameters (and stored buffers) per part, as transformers builds it."""

    parts: dict[str, int]  # every name of HF_PARTS, zeros included
    total: int
    model_class: str
    transformers_version: str
    note: str | None  # what the count leaves out of the model built, or None
    vocab_size: int  # the output head's rows
    tied_embeddings: bool  # the head's weight is the embeddings' (counted there)
    #: The values the language model's first q norm normalises together (its weight's,
    #: where it has one of one dimension): head_dim where each head is normalised on its
    #: own, all the query heads' where it spans them; None: no q norm with such a weight.
    q_norm_width: int | None = None


def transformers_parts(cfg: dict[str, Any], where: str) -> TransformersCount:
    """The parameters per part of the model transformers builds from `cfg`, a parsed
    config.json that `where` names in errors. A process builds each config once."""
    try:
        count = _count(json.dumps(cfg, sort_keys=True))
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    return replace(count, parts=dict(count.parts))  # the cached dict stays as it is


@lru_cache(maxsize=64)
def _count(cfg_json: str) -> TransformersCount:
    cfg = json.loads(cfg_json)
    model_type = cfg.get("model_type")
    try:
        import transformers
    except ImportError:
        raise UsageError(
            f"model_type {model_type!r} is counted by transformers, which is not installed: "
            "pip install attnbench[hf]"
        ) from None
    auto = _auto_class(model_type)
    model, config = _build(cfg, auto)
    name, head, language = type(model).__name__, model.get_output_embeddings(), None
    for attribute in ("language_model", "text_model"):  # as multimodal models name it
        if language is None:
            language = getattr(model.base_model, attribute, None)
    # A type of the image-text mapping may build a causal LM itself (Mistral-4)
    causal = auto is transformers.AutoModelForCausalLM or name.endswith("ForCausalLM")
    if head is None or (language is None and not causal):
        raise UsageError(f"transformers builds {name} of {model_type!r}: not a causal LM")
    stored, note = _stored(model), None
    if language is not None:  # a ForConditionalGeneration model: its vision tower left out
        kept = _stored(language).keys() | _stored(head).keys()
        left = sum(n for key, (_, n) in stored.items() if key not in kept)
        stored = {key: value for key, value in stored.items() if key in kept}
        if left:
            note = (
                f"{name}'s language model and output head, without its vision or audio "
                f"encoder and projector ({left:,} parameters)"
            )
    elif getattr(config, "text_config", None) is not None:
        note = f"{name} of the text_config: the language model alone"
    head_name = next(n for n, module in model.named_modules() if module is head)
    state = _state_mixers([n for n, _ in stored.values()])
    parts = dict.fromkeys(HF_PARTS, 0)
    for n, numel in stored.values():
        parts[_part(n, head_name, state)] += numel
    tied = not stored[id(head.weight)][0].startswith(f"{head_name}.")
    return TransformersCount(
        parts,
        sum(parts.values()),
        name,
        transformers.__version__,
        note,
        vocab_size=head.weight.shape[0],
        tied_embeddings=tied,
        q_norm_width=_q_norm_width(language if language is not None else model),
    )


def _q_norm_width(model: nn.Module) -> int | None:
    """The elements of the first q norm's weight (a parameter named q_norm.weight) of
    `model` (a multimodal model's language model: not its vision tower's), where it has
    one dimension: a weight of (heads, D) normalises each head apart (Cohere's)."""
    for name, p in model.named_parameters():
        if _Q_NORM.search(name) and p.dim() == 1:
            return p.numel()
    return None


#: The transformers mappings whose model of a type holds a language model to count, in the
#: order tried, each with the Auto class that builds it: a causal LM, then the conditional
#: generation models around one (image-text-to-text, then any multimodal one: audio too).
_GENERATIVE = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "AutoModelForImageTextToText"),
    ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "AutoModelForMultimodalLM"),
)


def _auto_class(model_type: Any) -> Any:
    """The transformers Auto class that builds a causal LM of `model_type`: for a
    multimodal model type, its ForConditionalGeneration model."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        hint = closest(model_type, CONFIG_MAPPING.keys()) if isinstance(model_type, str) else ""
        raise UsageError(
            f"transformers {transformers.__version__} does not know model_type {model_type!r}{hint}"
        )
    if (found := _generative(model_type)) is None:
        raise UsageError(f"transformers builds no causal LM of model_type {model_type!r}")
    return getattr(transformers, found[0])


def _generative(model_type: Any) -> tuple[str, Any] | None:
    """(the Auto class, the class its mapping names) of the first of _GENERATIVE's
    mappings that has `model_type`, by their names: no model class imported; None where
    none has it."""
    from transformers.models.auto import modeling_auto

    for mapping, auto in _GENERATIVE:
        names = getattr(modeling_auto, mapping, {})
        if model_type in names:
            return auto, names[model_type]
    return None


def builds_generative(model_type: Any) -> bool:
    """Whether transformers builds a model of `model_type` that _auto_class takes."""
    return _generative(model_type) is not None


def generative_class(model_type: Any) -> type | None:
    """The class that _auto_class's Auto class builds of `model_type`, imported, not
    built; None where transformers builds none."""
    import transformers

    found = _generative(model_type)
    return getattr(transformers, found[1], None) if found and isinstance(found[1], str) else None


def _build(cfg: dict[str, Any], auto: Any) -> tuple[nn.Module, Any]:
    """The model and config that `auto` builds from `cfg`, on the meta device, with
    transformers' logging and warnings silenced."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity(transformers.logging.CRITICAL)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            config = CONFIG_MAPPING[cfg["model_type"]].from_dict(cfg)
            return auto.from_config(config), config
    except Exception as e:  # transformers refuses the config, in its own words
        raise UsageError(
            f"transformers cannot build {cfg['model_type']!r}: {_first_line(e)}"
        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def _refuses_a_value(error: Exception) -> bool:
    """Whether transformers refused a value of the config, in its words: a ValueError, or
    the validation errors of its configuration dataclasses (huggingface_hub's)."""
    from huggingface_hub.errors import StrictDataclassError

    return isinstance(error, (ValueError, StrictDataclassError))


def _first_line(error: Exception) -> str:
    """The first line of an error's message, and the next when the first is a heading
    (ends in a colon, as huggingface_hub's validation errors do); an error other than a
    refusal of a value (KeyError, TypeError: transformers' code failing on a field the
    config leaves out or sets to null) named by its type, and said to be so."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = (" ".join(lines[:2]) if lines[0].endswith(":") else lines[0]) if lines else ""
    if _refuses_a_value(error) and text:
        return text
    if isinstance(error, ImportError):  # a backbone from another package (timm)
        return f"its code needs a package that is not installed ({text or type(error).__name__})"
    raised = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return f"its code raised {raised} (a field the config leaves out or sets to null, perhaps)"


def _stored(module: nn.Module) -> dict[int, tuple[str, int]]:
    """{id: (name, elements)} of what a checkpoint of `module` stores, its parameters and
    persistent buffers, each tensor once under its first name (a tied head's weight is
    the embeddings')."""
    stored = {id(p): (name, p.numel()) for name, p in module.named_parameters()}
    for prefix, sub in module.named_modules():
        for name, buffer in sub._buffers.items():
            if buffer is not None and name not in sub._non_persistent_buffers_set:
                stored.setdefault(id(buffer), (f"{prefix}.{name}".lstrip("."), buffer.numel()))
    return stored


def _state_mixers(names: list[str]) -> set[str]:
    """The token mixers (module names) that are state layers: those holding, as their own,
    a tensor or module that _STATE_MARK names (deeper down it is a part of what holds it,
    as a short convolution on an attention's keys)."""
    mixers = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts)):
            if _MIXER.fullmatch(parts[i - 1]) and _STATE_MARK.fullmatch(parts[i]):
                mixers.add(".".join(parts[:i]))
    return mixers


def _part(name: str, head: str, state_mixers: set[str]) -> str:
    """The part of the tensor `name`: the output head (in the module named `head`), a
    state layer (in one of `state_mixers`), else the first of _RULES that matches, else
    other."""
    parts = name.split(".")
    prefixes = {".".join(parts[:i]) for i in range(1, len(parts))}
    if head in prefixes:
        return "output head"
    if prefixes & state_mixers:
        return "state layers"
    return next((part for part, rule in _RULES if rule.search(f".{name}")), "other")
