"""The kinds of section: each is built from an experiment module that implements the one
protocol (check, run, order, link), and a study's record sets are its sections' and the
sets written beside them."""

from __future__ import annotations

import inspect
from dataclasses import replace

from attnbench.experiments import decode, fit, kvmem, params, predict
from attnbench.records import Status
from attnbench.study.plan import Task
from attnbench.study.sections import (
    KINDS,
    Experiment,
    command_of,
    describe_task,
    record_sets,
    sets_providers_side_by_side,
    title_of,
)
from tests.experiments.options import decode_options, decode_point


def test_every_kind_runs_an_experiment_of_the_one_protocol():
    modules = {"params": params, "kvmem": kvmem, "decode": decode, "fit": fit, "predict": predict}
    assert set(KINDS) == set(modules)
    members = [n for n, _ in inspect.getmembers(Experiment, inspect.isfunction) if n[0] != "_"]
    assert sorted(members) == ["check", "link", "order", "run"]
    for name, module in modules.items():
        kind = KINDS[name]
        assert (kind.run, kind.check, kind.order, kind.link) == tuple(
            getattr(module, m) for m in ("run", "check", "order", "link")
        )


def test_only_decode_links_its_points():
    points = [
        decode_point(
            d_model=64, num_heads=4, num_kv_heads=kv, batch=1, dtype="float32", prompt_len=8
        )
        for kv in (4, 1)
    ]
    pairs = KINDS["decode"].link(points, decode_options())
    assert [(p.name, p.of, p.over) for p in pairs] == [("x_of_narrowest", 0, 1)]
    for name in ("params", "kvmem", "fit"):
        assert KINDS[name].link(points, None) == []


def test_record_sets_are_the_sections_then_the_sets_beside_them():
    record = {"variant": "MHA"}
    document = {
        "sections": {"params": {"records": [record]}},
        "model_parts": [{"part": "total"}],
        "unknown": [1],
    }
    sets = record_sets(document)
    assert list(sets) == ["params", "model_parts"]
    assert sets["params"] == ([record], KINDS["params"].record)
    assert sets["model_parts"][0] == [{"part": "total"}]
    assert record_sets({"sections": {}, "model_parts": []}) == {}


def test_a_section_kind_names_its_points_and_says_what_it_holds():
    """Each kind describes its points (a progress line), states its title and command,
    and whether its providers are set side by side: nothing outside it branches on its
    name."""
    point = decode_point(
        d_model=64, num_heads=4, num_kv_heads=1, batch=1, dtype="float32", prompt_len=8
    )
    task = Task("decode", 0, point)
    assert describe_task(task) == f"decode {KINDS['decode'].describe(point)}"
    assert describe_task(task).startswith("decode d64 h4/1 attnbench float32 batch 1 context 8")
    predicted = predict.PredictPoint(
        gpu="h100-sxm", batch=1, dtype="float16", d_model=64, num_heads=4, num_kv_heads=1
    )
    predicted = replace(predicted, seq_len=2048, weights_dtype="int8")
    assert describe_task(Task("predict", 0, predicted)) == (
        "predict d64 h4/1 on h100-sxm tp 1 batch 1 context 2048 float16 weights int8 per channel"
    )
    # two points that differ only in their weights' options are told apart
    marlin = replace(predicted, weight_only_kernel="tensor-cores")
    assert describe_task(Task("predict", 0, marlin)).endswith(
        "weights int8 per channel, on the tensor cores"
    )
    asked = fit.FitPoint(model="llama-3-70b", reserve="5%", scale_dtype="float32")
    on_gpus = replace(asked, gpu="h100-sxm", gpus=8, seq_len=8192, tpot="50ms")
    assert KINDS["fit"].describe(on_gpus) == "llama-3-70b on 8 x h100-sxm context 8192 tpot 50ms"
    in_memory = replace(asked, memory="80GiB", tp=4, batch=64)
    assert KINDS["fit"].describe(in_memory) == "llama-3-70b on 80GiB tp 4 batch 64"
    quantised = replace(on_gpus, weights_dtype="int4", weight_only_kernel="tensor-cores")
    assert (
        KINDS["fit"]
        .describe(quantised)
        .endswith("tpot 50ms weights int4 in groups of 128, on the tensor cores")
    )
    assert [command_of(n) for n in ("params", "decode")] == ["params", "decode-speed"]
    assert [title_of(n) for n in ("kvmem", "predict")] == ["KV-cache memory (K and V)", "predict"]
    assert [n for n in KINDS if sets_providers_side_by_side(n)] == ["decode"]


def test_a_status_is_its_word_and_its_reason():
    assert Status.of(None) == Status("ok")
    assert Status.of("skipped: needs 4 GiB") == Status("skipped", "needs 4 GiB")
    assert [Status.of(s).failed for s in ("oom", "error: ValueError: x", "wrong: 1", "ok")] == [
        True,
        True,
        False,
        False,
    ]
