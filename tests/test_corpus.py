"""The corpus of real models in docs/architectures/, each counted by attnbench and by
transformers on the meta device (scripts/architectures.py): the whole model's parameters,
the KV-cache bytes at 4,096 and 32,768 tokens and the state of a hybrid's state layers
must be equal for every model attnbench does not refuse, and docs/architectures.md must
be the table of today's counts. About half a minute on 2 cores: an integration test."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("transformers")

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
CORPUS = sorted((SCRIPTS.parent / "docs" / "architectures").glob("*.json"))
#: Configs attnbench refuses: models without attention layers, whose caches are states
#: alone (never counted as attention).
REFUSED = {"falcon-mamba-7b-pre-decay.json", "mamba-130m-hf.json"}


@cache
def script():
    sys.path.insert(0, str(SCRIPTS))  # the script imports hf_cache_reference beside it
    spec = importlib.util.spec_from_file_location(
        "architectures_script", SCRIPTS / "architectures.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@cache
def row(name: str):
    return script().compare_all([script().CORPUS / name])[0]


@pytest.mark.parametrize("name", [p.name for p in CORPUS])
def test_both_sides_count_alike(name):
    r = row(name)
    if name in REFUSED:
        assert r.path == "refused" and r.kv_attnbench is None
        assert any("has no attention layer" in note for note in r.notes), r.notes
        return
    assert r.path in ("formulas", "transformers")
    assert r.params_match, r.mismatches()
    assert r.cache_match, r.mismatches()


def test_the_corpus_holds_the_hybrids_and_their_states():
    hybrids = [row(p.name) for p in CORPUS if row(p.name).state_transformers]
    assert len(hybrids) >= 10
    assert all(r.state_attnbench == r.state_transformers for r in hybrids if r.path != "refused")
    qwen3_next = row("qwen3-next-80b-a3b.json")
    assert qwen3_next.layers == "36 gated deltanet, 12 full attention"
    assert qwen3_next.kv_attnbench[32768] == 12 * 2 * 2 * 256 * 2 * 32768
    assert qwen3_next.state_attnbench == 36 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)


def test_the_page_is_todays_table():
    module = script()
    rows = [row(p.name) for p in CORPUS]
    page = module.PAGE.read_text()
    assert module.page_with(rows, page) == page, (
        "docs/architectures.md is out of date: python scripts/architectures.py"
    )
