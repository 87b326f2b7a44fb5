"""Property-based fuzzing of everything a user can hand attnbench: flags, sweep files,
config.json files and result files, valid and invalid.

For every input: no traceback, an exit code the docs promise (0, 1 nothing fits or a
regression, 2 bad input, 3 incomparable timings), and for bad input one `error:` line per
problem (at most 21), each naming what the user gave. The default profile keeps this file
under a minute; `make fuzz` runs the long one (HYPOTHESIS_PROFILE=fuzz).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbench.cli import app
from tests.helpers import runner

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: What each command may exit with.
EXIT_CODES = {
    "params": {0, 2},
    "kvmem": {0, 2},
    "fit": {0, 1, 2},
    "predict": {0, 2},
    "compare": {0, 1, 2, 3},
}
MAX_ERROR_LINES = 21  # 20 problems and a line saying how many more

# --- values ------------------------------------------------------------------------------

huge = st.sampled_from([0, -1, -5, 10**12, 10**18, 2**63, 10**400])
small = st.integers(min_value=1, max_value=64)
numbers = st.one_of(small, huge, st.integers(min_value=-(2**70), max_value=2**70))
texts = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "abc",
            "none",
            "1,,2",
            "8x",
            "1e3",
            "float16",
            "int4",
            "nan",
            "-",
            "--",
            "80GiB",
            "10%",
            "linspace:1:9:3",
            "3x64",
            "😀",
            "\x00",
        ]
    ),
    st.text(max_size=12),
)
flag_values = st.one_of(
    numbers.map(str),
    texts,
    st.lists(small, min_size=1, max_size=4).map(lambda xs: ",".join(map(str, xs))),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.floats(allow_nan=True), texts),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)


def invoke(args: list[str], command: str, codes: set[int] | None = None):
    """Run `args`: no traceback, an exit code `command` may give (or one of `codes`), and
    for bad input only one-line `error:` messages. The other fuzz files use it too."""
    result = runner.invoke(app, args, env={"COLUMNS": "100"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.exception,
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output, (args, output)
    allowed = codes if codes is not None else EXIT_CODES[command]
    assert result.exit_code in allowed, (args, result.exit_code, output)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert lines and all(line.startswith("error: ") for line in lines), (args, output)
        assert len(lines) <= MAX_ERROR_LINES, (args, len(lines))
    return result


# --- flags -------------------------------------------------------------------------------

SHAPE_FLAGS = ["--d-model", "--heads", "--kv-heads", "--head-dim"]
KVMEM_FLAGS = [
    *SHAPE_FLAGS,
    "--layers",
    "--batch",
    "--seq-len",
    "--dtype",
    "--kv-dtype",
    "--kv-scale-group",
    "--scale-dtype",
    "--sliding-window",
    "--page-size",
    "--seq-lens",
    "--tp",
]
FIT_FLAGS = [
    "--memory",
    "--gpus",
    "--tp",
    "--ep",
    "--weights-dtype",
    "--kv-dtype",
    "--kv-scale-group",
    "--sliding-window",
    "--page-size",
    "--reserve",
    "--seq-len",
    "--batch",
    "--tpot",
    "--ttft",
    "--calibration",
]
#: Named GPUs only: `this` measures the machine's peaks, seconds a call.
PREDICT_FLAGS = [*SHAPE_FLAGS, "--batch", "--seq-len", "--dtype", "--kv-dtype", "--tp", "--ep"]
NAMED_GPUS = st.sampled_from(["h100-sxm", "a100-80gb,l4", "mi300x"])


def flag_args(flags: list[str]):
    return st.lists(st.tuples(st.sampled_from(flags), flag_values), max_size=5).map(
        lambda pairs: [x for pair in pairs for x in pair]
    )


@given(flag_args(SHAPE_FLAGS), st.sampled_from([[], ["--bias"], ["--model", "llama-2-7b"]]))
def test_params_flags(args, extra):
    invoke(["params", *extra, *args, "-q"], "params")


@given(flag_args(KVMEM_FLAGS), st.sampled_from([[], ["--model", "llama-3-8b"]]))
def test_kvmem_flags(args, extra):
    invoke(["kvmem", *extra, *args, "--no-measure", "-q"], "kvmem")


@given(
    flag_args(FIT_FLAGS),
    st.sampled_from(["llama-3-70b", "mistral-7b", "deepseek-v3"]),
    st.sampled_from(
        [
            [],
            ["--gpu", "h100-sxm"],
            ["--gpu", "l4", "--tpot", "50ms"],
            ["--gpu", "h200", "--gpus", "8", "--dp-attention", "--tpot", "50ms"],
        ]
    ),
)
def test_fit_flags(args, model, gpu):
    invoke(["fit", "--model", model, *gpu, *args, "-q"], "fit")


@given(
    flag_args(PREDICT_FLAGS),
    st.sampled_from(
        [
            [],
            ["--model", "mixtral-8x7b"],
            ["--model", "deepseek-v3"],
            ["--model", "deepseek-v3", "--tp", "8", "--dp-attention"],
        ]
    ),
    NAMED_GPUS,
)
def test_predict_flags(args, extra, gpu):
    invoke(["predict", *extra, "--gpu", gpu, *args, "-q"], "predict")


# --- sweep files -------------------------------------------------------------------------

FIELDS = [
    "d_model",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "num_layers",
    "batch",
    "seq_len",
    "dtype",
    "kv_dtype",
    "tp",
    "ep",
    "dp_attention",
    "page_size",
    "sliding_window",
    "seq_lens",
    "bias",
    "measure",
    "models",
    "prompt_len",
    "unknown_key",
]
field_values = st.one_of(
    numbers, texts, st.booleans(), st.none(), st.lists(st.one_of(small, texts), max_size=3)
)
sections = st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=5)
sweep_files = st.dictionaries(
    st.sampled_from(["defaults", "sweep", "models", "params", "kvmem", "decode", "fit", "x"]),
    st.one_of(sections, field_values),
    max_size=4,
)


@given(sweep_files, st.sampled_from(["params", "kvmem"]))
def test_sweep_files(tmp_path_factory, data, command):
    path = tmp_path_factory.mktemp("sweep") / "study.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    extra = ["--no-measure"] if command == "kvmem" else []
    invoke([command, "--config", str(path), *extra, "-q"], command)


@given(st.binary(max_size=200))
def test_sweep_files_of_any_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "study.yaml"
    path.write_bytes(data)
    invoke(["params", "--config", str(path), "-q"], "params")


# --- config.json -------------------------------------------------------------------------

LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "vocab_size": 1000,
    "intermediate_size": 688,
    "torch_dtype": "bfloat16",
}
CONFIG_KEYS = [
    *LLAMA,
    "head_dim",
    "n_embd",
    "n_head",
    "n_layer",
    "n_positions",
    "n_inner",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "q_lora_rank",
    "n_routed_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "tie_word_embeddings",
    "multi_query",
    "num_kv_heads",
    "max_position_embeddings",
    "attention_bias",
    "mlp_bias",
]
MODEL_TYPES = ["llama", "mistral", "qwen2", "gemma2", "gpt2", "falcon", "deepseek_v3", "xyz"]


@given(
    st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=6),
    st.lists(st.sampled_from(list(LLAMA)), max_size=3),
    st.sampled_from(MODEL_TYPES),
    st.sampled_from(["params", "kvmem"]),
)
def test_config_json(tmp_path_factory, changes, dropped, model_type, command):
    config = {**LLAMA, "model_type": model_type, **changes}
    for key in dropped:
        config.pop(key, None)
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(config, allow_nan=True))
    extra = ["--no-measure"] if command == "kvmem" else []
    invoke([command, "--hf-config", str(path), *extra, "-q"], command)


# --- result files ------------------------------------------------------------------------


def _results(tmp: Path) -> dict:
    path = tmp / "base.json"
    result = runner.invoke(
        app,
        [
            "kvmem",
            "--d-model",
            "64",
            "--heads",
            "4",
            "--kv-heads",
            "4,1",
            "--no-measure",
            "--json",
            str(path),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(path.read_text())


BAD_VALUES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 1e400, "12", None, [], {}, True]),
    json_values,
)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "kv_bytes",
                    "bytes_per_token",
                    "num_kv_heads",
                    "variant",
                    "measured_bytes",
                    "status",
                    "ratio_vs_mha",
                    "tp",
                ]
            ),
            BAD_VALUES,
        ),
        max_size=3,
    ),
    st.sampled_from(["record", "environment", "duplicate", "schema", "command", "nothing"]),
)
def test_result_files(tmp_path_factory, changes, where):
    tmp = tmp_path_factory.mktemp("results")
    base = _results(tmp)
    head = json.loads(json.dumps(base))
    record = head["records"][0]
    for name, value in changes:
        record[name] = value
    if where == "environment":
        head["environment"] = None
    elif where == "duplicate":
        head["records"].append(dict(head["records"][-1]))
    elif where == "schema":
        head["schema_version"] = 2
    elif where == "command":
        head["command"] = "decode"
    (tmp / "head.json").write_text(json.dumps(head, allow_nan=True))
    invoke(["compare", str(tmp / "base.json"), str(tmp / "head.json")], "compare")
