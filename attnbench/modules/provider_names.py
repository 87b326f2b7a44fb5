"""The names of the decode providers (modules.providers), apart from their calls: the
sweep schema and the command line name them without loading torch."""

from __future__ import annotations

#: Every provider, in the order the tables list them (modules.providers.PROVIDERS).
PROVIDER_NAMES = (
    "attnbench",
    "naive",
    "sdpa-math",
    "sdpa-flash",
    "sdpa-efficient",
    "sdpa-cudnn",
    "flex",
    "flash-attn",
    "hf",
)
#: Earlier names of providers (the `backend` of earlier versions).
PROVIDER_ALIASES = {"sdpa": "attnbench"}
