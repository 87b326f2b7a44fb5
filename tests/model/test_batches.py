"""Batch specs: vLLM's grammar of sequences, ragged draws, and every refusal."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from attnbench.errors import FieldError
from attnbench.model.batches import MAX_TOKENS, BatchSpec, Sequence, parse_batch
from attnbench.model.capacity import MAX_SEQUENCES


def counted(text: str) -> dict[tuple[int, int], int]:
    """{(q_len, kv_len): how many sequences} of a spec."""
    return dict(Counter((s.q_len, s.kv_len) for s in parse_batch(text).sequences))


# --- the grammar --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, sequences",
    [
        ("q2k", {(2048, 2048): 1}),  # one prefill
        ("8q1s1k", {(1, 1024): 8}),  # eight decodes
        ("q4s1k", {(4, 1024): 1}),  # a speculative step
        ("2q2k_32q1s1k", {(2048, 2048): 2, (1, 1024): 32}),
        ("q512s2k_16q1s1k", {(512, 2048): 1, (1, 1024): 16}),  # a prefill chunk + decodes
        ("q1kv1k", {(1, 1024): 1}),  # kv<kv_len> spells s<kv_len>
        ("3q5", {(5, 5): 3}),
        ("1q7s7", {(7, 7): 1}),  # kv_len == q_len: nothing cached before
        ("q1s16k", {(1, 16384): 1}),
    ],
)
def test_vllm_examples(text, sequences):
    assert counted(text) == sequences


def test_k_suffix_and_case():
    assert counted("q1k") == counted("q1024") == counted("Q1K") == {(1024, 1024): 1}
    upper, lower = parse_batch("2Q2K_32Q1KV1K"), parse_batch("2q2k_32q1s1k")
    assert upper.sequences == lower.sequences


def test_segments_keep_their_order():
    spec = parse_batch("q3s9_2q1s4")
    assert spec.sequences == (Sequence(3, 9), Sequence(1, 4), Sequence(1, 4))


@pytest.mark.parametrize(
    "text", ["q2k", "2q2k_32q1s1k", "8Q1S1K", "8q1s128..4k@3", "8q1s512/1k/2k", "4q1..8s16..32"]
)
def test_round_trip(text):
    spec = parse_batch(text)
    assert str(spec) == spec.text == text
    assert parse_batch(str(spec)) == spec


def test_surrounding_spaces_are_dropped():
    assert parse_batch(" 8q1s1k\n") == parse_batch("8q1s1k")


def test_batch_properties():
    spec = parse_batch("2q2k_32q1s1k")
    assert spec.batch_size == 34
    assert spec.query_tokens == 2 * 2048 + 32  # 4128
    assert spec.kv_tokens == 2 * 2048 + 32 * 1024  # 36,864
    assert spec.max_kv_len == 2048
    assert not spec.is_uniform and not spec.is_decode_only
    decode = parse_batch("8q1s1k")
    assert decode.is_uniform and decode.is_decode_only
    assert parse_batch("q1s1k_q1s2k").is_decode_only
    assert not parse_batch("q1s1k_q1s2k").is_uniform
    assert parse_batch("q4s8_q4s8").is_uniform


def test_sequence():
    s = Sequence(512, 2048)
    assert s.context_len == 1536
    assert Sequence(1, 1).context_len == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.q_len = 2  # type: ignore[misc]
    for q_len, kv_len in [(0, 4), (4, 3), (1, 0)]:
        with pytest.raises(ValueError):
            Sequence(q_len, kv_len)
    with pytest.raises(ValueError):
        BatchSpec("", ())


# --- ragged batches -----------------------------------------------------------------------


def kv_lens(text: str) -> list[int]:
    return [s.kv_len for s in parse_batch(text).sequences]


def test_ragged_range_is_deterministic_and_within_bounds():
    lens = kv_lens("2000q1s128..4k")
    assert lens == kv_lens("2000q1s128..4k") == kv_lens("2000q1s128..4k@0")
    assert min(lens) >= 128 and max(lens) <= 4096
    assert min(lens) < 256 and max(lens) > 3968  # uniform over the whole range
    assert len(set(lens)) > 1000


def test_ragged_draws_are_pinned():
    # the same spec draws the same lengths on every run and every machine
    assert kv_lens("8q1s128..4k") == [1152, 2327, 2223, 1058, 2416, 400, 4024, 1974]
    assert kv_lens("8q1s512/1k/2k") == [1024, 2048, 2048, 512, 2048, 512, 1024, 1024]


def test_ragged_seed_and_position_change_the_draws():
    assert kv_lens("8q1s128..4k@3") != kv_lens("8q1s128..4k")
    assert kv_lens("8q1s128..4k@3") == kv_lens("8q1S128..4K@3")
    both = kv_lens("8q1s128..4k_8q1s128..4k")
    assert both[:8] == kv_lens("8q1s128..4k")
    assert both[8:] != both[:8]  # the second segment draws from its own generator


def test_ragged_list_draws_from_the_list():
    lens = kv_lens("3000q1s512/1k/2k@7")
    assert set(lens) == {512, 1024, 2048}
    assert min(Counter(lens).values()) > 800  # about 1000 each
    assert kv_lens("4q1s1k/1k") == [1024] * 4


def test_ragged_range_of_one_value_and_q_ranges():
    assert kv_lens("4q1s1k..1k") == [1024] * 4
    spec = parse_batch("500q1..8s16..32@1")
    assert {s.q_len for s in spec.sequences} == set(range(1, 9))
    assert {s.kv_len for s in spec.sequences} == set(range(16, 33))
    prefill = parse_batch("100q128..1k")
    assert all(s.kv_len == s.q_len for s in prefill.sequences)
    assert {s.q_len for s in parse_batch("100q1/2/4s8").sequences} == {1, 2, 4}


def test_max_sequences_fit():
    spec = parse_batch(f"{MAX_SEQUENCES}q1s{MAX_TOKENS}")
    assert spec.batch_size == MAX_SEQUENCES and spec.max_kv_len == MAX_TOKENS


# --- refusals -----------------------------------------------------------------------------

FORM = (
    "expected [<count>]q<q_len>[s<kv_len>] segments joined by _, e.g. 8q1s1k, q2k or 2q2k_32q1s1k"
)
POSITIVE = "counts and lengths must be >= 1"
TOO_LONG = "lengths must be <= 16,777,216 tokens"
TOO_MANY = "more than 1,000,000 sequences in one batch"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", f"batch_spec: '': empty; {FORM}"),
        ("  ", f"batch_spec: '  ': empty; {FORM}"),
        ("8q1s", f"batch_spec: 8q1s: {FORM}"),
        ("abc", f"batch_spec: abc: {FORM}"),
        ("8x1s1k", f"batch_spec: 8x1s1k: {FORM}"),
        ("8q1s1k_", f"batch_spec: 8q1s1k_: in segment '': {FORM}"),
        ("2q2k_32q1s", f"batch_spec: 2q2k_32q1s: in segment '32q1s': {FORM}"),
        ("q1s1k x", f"batch_spec: q1s1k x: {FORM}"),
        ("q1s1m", f"batch_spec: q1s1m: {FORM}"),
        ("q1s1..", f"batch_spec: q1s1..: {FORM}"),
        ("q1s1k@", f"batch_spec: q1s1k@: {FORM}"),
        ("q1s1..2..3", f"batch_spec: q1s1..2..3: {FORM}"),
        ("0q1s1k", f"batch_spec: 0q1s1k: {POSITIVE}"),
        ("-1q1s1k", f"batch_spec: -1q1s1k: {POSITIVE}"),
        ("q0", f"batch_spec: q0: {POSITIVE}"),
        ("q1s0", f"batch_spec: q1s0: {POSITIVE}"),
        ("q1s-4", f"batch_spec: q1s-4: {POSITIVE}"),
        ("q1s0..4", f"batch_spec: q1s0..4: {POSITIVE}"),
        ("q1s0/4", f"batch_spec: q1s0/4: {POSITIVE}"),
        (
            "q4s2",
            "batch_spec: q4s2: kv_len 2 < q_len 4: kv_len counts every key attended, "
            "the q_len new tokens included",
        ),
        (
            "8q1..16s8..1k",
            "batch_spec: 8q1..16s8..1k: kv_len 8 < q_len 16: kv_len counts every key "
            "attended, the q_len new tokens included",
        ),
        ("q1s4k..1k", "batch_spec: q1s4k..1k: range 4k..1k: LOW must be <= HIGH"),
        ("q1s4K..1K", "batch_spec: q1s4K..1K: range 4k..1k: LOW must be <= HIGH"),
        ("2000000q1", f"batch_spec: 2000000q1: {TOO_MANY}"),
        ("9" * 40 + "q1", f"batch_spec: {'9' * 40}q1: {TOO_MANY}"),
        ("600000q1_600000q1", f"batch_spec: 600000q1_600000q1: {TOO_MANY} (1,200,000)"),
        ("q16385k", f"batch_spec: q16385k: {TOO_LONG}"),
        (f"q{MAX_TOKENS + 1}", f"batch_spec: q{MAX_TOKENS + 1}: {TOO_LONG}"),
        ("q1s" + "9" * 5000, f"batch_spec: q1s{'9' * 5000}: {TOO_LONG}"),
        (
            "q1s1k@" + "9" * 19,
            f"batch_spec: q1s1k@{'9' * 19}: seeds must be <= 999999999999999999",
        ),
        ("q1s1k\n_q1", f"batch_spec: 'q1s1k\\n_q1': in segment 'q1s1k\\n': {FORM}"),
    ],
)
def test_refusals(text, message):
    with pytest.raises(FieldError) as info:
        parse_batch(text)
    error = info.value
    assert str(error) == message
    assert error.field == "batch_spec"
    assert "\n" not in str(error)


def test_refusal_names_what_was_typed_when_located():
    with pytest.raises(FieldError) as info:
        parse_batch("8q1s")
    assert str(info.value.located("--batch 8q1s")) == f"--batch 8q1s: {FORM}"


def test_too_many_sequences_are_refused_before_any_is_built(monkeypatch):
    import attnbench.model.batches as batches

    def never(*args):
        raise AssertionError("a sequence was built")

    monkeypatch.setattr(batches, "Sequence", never)
    with pytest.raises(FieldError, match="more than 1,000,000"):
        parse_batch("999999q1_2q1s128..4k")
