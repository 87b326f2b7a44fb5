"""Files a user names (a sweep file, a config.json) are read within bounds and checked in
full: size and kind of file, duplicate keys, alias bombs, nesting depth, and the type and
range of every config.json field read. Every problem is an exit 2 with one `error:` line
per problem (at most 20 and a count), never a hang, a traceback or a memory blow-up.

Every file is written by the test into tmp_path; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from attnbench.errors import FieldError, UsageError
from attnbench.model.files import json_problem, not_text, read_user_file
from attnbench.model.hf_config import (
    BODY_TRAITS,
    GPT2_POSITIONS,
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    load_hf_config,
    spec_from_hf_config,
)
from attnbench.study.sweep import MAX_SWEEP_FILE_BYTES, load_config
from attnbench.study.yaml_loader import MAX_ALIAS_NODES, load_yaml
from tests.helpers import runner


def invoke(*args: str):
    from attnbench.cli import app  # here: a module being edited must not hide the rest

    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def expect_error_lines(args: list[str], *needles: str, lines: int = 1) -> list[str]:
    """The command exits 2 with `lines` lines, each 'error: ...', naming every needle."""
    result = invoke(*args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    output = result.output.strip().splitlines()
    assert len(output) == lines, output
    assert all(line.startswith("error: ") for line in output), output
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    return output


def kvmem(path: Path) -> list[str]:
    return ["kvmem", "--config", str(path), "--no-measure", "-q"]


def params(path: Path) -> list[str]:
    return ["params", "--hf-config", str(path), "-q"]


def write_json(tmp_path: Path, cfg, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return path


def write_yaml(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def sparse_file(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk space and no time to write."""
    with open(path, "wb") as file:
        file.truncate(size)
    return path


def in_thread(call, fifo: Path | None = None, wait: float = 3.0):
    """`call()` in a thread; a FIFO the call blocks on is opened for writing and closed
    after `wait` seconds (so the call returns), and the test fails: it blocked."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001  (reported to the test)
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(wait)
    blocked = thread.is_alive()
    if blocked and fifo is not None:
        os.close(os.open(fifo, os.O_WRONLY))  # the reader is waiting: this returns at once
        thread.join(wait)
    assert not blocked, "reading the file blocked"
    return outcome


@contextmanager
def memory_guard(extra: int = 1 << 30):
    """At most `extra` more bytes of address space while inside (a read of /dev/zero that
    is not refused fails with MemoryError instead of taking the machine's memory)."""
    try:
        import resource
    except ImportError:  # not POSIX: no guard
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = used + extra if hard == resource.RLIM_INFINITY else min(used + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


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
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "num_hidden_layers": 6,
    "vocab_size": 1000,
    "intermediate_size": 512,
    "kv_lora_rank": 32,
    "q_lora_rank": 48,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "n_routed_experts": 16,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 64,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "torch_dtype": "bfloat16",
}


# ------------------------------------------------------------ 1. size and kind of file


def test_read_user_file_reads_at_most_limit_bytes(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"0123456789")
    assert read_user_file(path, "config", limit=10) == "0123456789"
    with pytest.raises(FieldError, match="too large") as info:
        read_user_file(path, "config", limit=9)
    assert info.value.field == "config" and info.value.value == path


def test_read_user_file_reads_line_ends_as_newlines(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"a\r\nb\rc\n")
    assert read_user_file(path, "config") == "a\nb\nc\n"


def test_the_caps_are_one_and_ten_mib():
    assert MAX_SWEEP_FILE_BYTES == 1 << 20
    assert MAX_CONFIG_BYTES == 10 << 20


@pytest.mark.parametrize("size", [50_000_000, (1 << 20) + 1])
def test_a_sweep_file_over_the_cap_is_refused_before_it_is_read(tmp_path, size):
    path = sparse_file(tmp_path / "study.yaml", size)
    start = time.perf_counter()
    (line,) = expect_error_lines(kvmem(path), "--config", str(path), "too large", "1 MiB")
    assert time.perf_counter() - start < 2
    assert line.startswith(f"error: --config {path}: file too large")
    with pytest.raises(FieldError) as info:
        load_config(path)
    assert info.value.field == "config"


@pytest.mark.parametrize("size", [50_000_000, (10 << 20) + 1])
def test_a_config_json_over_the_cap_is_refused_before_it_is_read(tmp_path, size):
    path = sparse_file(tmp_path / "config.json", size)
    (line,) = expect_error_lines(params(path), "--hf-config", str(path), "10 MiB")
    assert line.startswith(f"error: --hf-config {path}: file too large")
    with pytest.raises(FieldError) as info:
        load_hf_config(path)
    assert info.value.field == "hf_config"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
@pytest.mark.parametrize(("flag", "args"), [("--config", kvmem), ("--hf-config", params)])
def test_dev_zero_is_refused_at_once(flag, args):
    with memory_guard():
        outcome = in_thread(lambda: invoke(*args(Path("/dev/zero"))))
    result = outcome["value"]
    assert result.exit_code == 2, (result.output, result.exception)
    assert (
        result.output == f"error: {flag} /dev/zero: not a regular file (a device, pipe or socket)\n"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize(("flag", "args"), [("--config", kvmem), ("--hf-config", params)])
def test_a_fifo_is_refused_without_blocking(tmp_path, flag, args):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    outcome = in_thread(lambda: invoke(*args(fifo)), fifo=fifo)
    result = outcome["value"]
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output == f"error: {flag} {fifo}: not a regular file (a device, pipe or socket)\n"


@pytest.mark.parametrize(("flag", "args"), [("--config", kvmem), ("--hf-config", params)])
def test_a_directory_is_refused(tmp_path, flag, args):
    folder = tmp_path / "folder"
    folder.mkdir()
    expect_error_lines(args(folder), f"{flag} {folder}: is a directory, not a file")


def test_a_config_json_named_by_a_sweep_file_is_capped_too(tmp_path):
    big = sparse_file(tmp_path / "config.json", (10 << 20) + 1)
    study = write_yaml(tmp_path, f"models: [{big}]\n")
    expect_error_lines(kvmem(study), str(big), "too large", "the limit is 10 MiB")


# ------------------------------------------------------------------ 2. duplicate keys

DUPLICATE_D_MODEL = """\
defaults:
  num_heads: 8
  d_model: 512
  seq_len: 128
  d_model: 256
"""


def test_a_duplicate_key_names_the_key_and_both_lines(tmp_path):
    path = write_yaml(tmp_path, DUPLICATE_D_MODEL)
    (line,) = expect_error_lines(kvmem(path))
    assert line == f"error: {path}: duplicate key 'd_model' at lines 3 and 5"


def test_duplicate_keys_at_any_depth_are_each_reported(tmp_path):
    text = (
        "defaults: {d_model: 64, num_heads: 4}\n"  # 1
        "kvmem:\n"  # 2
        "  batch: 1\n"  # 3
        "  seq_len: [1, 2]\n"  # 4
        "  batch: 2\n"  # 5
        "models: [llama-2-7b]\n"  # 6
        "defaults: {}\n"  # 7: a duplicate section
        "sweep: {x: [{a: 1, a: 2}]}\n"  # 8: inside a list, on one line
    )
    path = write_yaml(tmp_path, text)
    lines = expect_error_lines(kvmem(path), lines=3)
    assert lines == [
        f"error: {path}: duplicate key 'batch' at lines 3 and 5",
        f"error: {path}: duplicate key 'defaults' at lines 1 and 7",
        f"error: {path}: duplicate key 'a' twice at line 8",
    ]


def test_merge_keys_may_be_overridden(tmp_path):
    text = "x: &base {d_model: 64, num_heads: 4}\ndefaults: {<<: *base, d_model: 128}\n"
    data = load_yaml(text)
    assert data["defaults"] == {"d_model": 128, "num_heads": 4}


# -------------------------------------------------------------------- 3. alias bombs

#: "Billion laughs": nine levels of nine aliases, 387,420,489 strings once expanded.
BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_an_alias_bomb_fails_fast_on_one_line(tmp_path):
    path = write_yaml(tmp_path, BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 400
    start = time.perf_counter()
    (line,) = expect_error_lines(kvmem(path))
    assert time.perf_counter() - start < 1
    assert line == (
        f"error: {path}: too many aliases (YAML anchors expand beyond {MAX_ALIAS_NODES} nodes)"
    )


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    path = write_yaml(tmp_path, "sweep: &loop {seq_len: [*loop]}\n")
    expect_error_lines(kvmem(path), "alias refers to its own anchor")


def test_small_aliases_still_work(tmp_path):
    path = write_yaml(
        tmp_path,
        "defaults: {d_model: 64, num_heads: 4}\n"
        "kvmem: {seq_len: &lens [128, 256]}\n"
        "fit: {seq_len: *lens}\n",
    )
    config = load_config(path)
    assert config.sections["kvmem"]["seq_len"] == config.sections["fit"]["seq_len"] == [128, 256]


def test_problems_of_one_file_are_capped_at_20_lines(tmp_path):
    text = "defaults:\n" + "".join(f"  bad_{i}: 1\n" for i in range(50))
    lines = expect_error_lines(kvmem(write_yaml(tmp_path, text)), lines=21)
    assert lines[-1] == "error: ... and 30 more problems"
    many = "".join("k: 1\n" for _ in range(30))
    lines = expect_error_lines(kvmem(write_yaml(tmp_path, many, "dup.yaml")), lines=21)
    assert lines[-1] == "error: ... and 9 more problems"


# ------------------------------------------------------------------- 4. nesting depth


def test_deeply_nested_json_is_one_line(tmp_path):
    path = write_json(tmp_path, "[" * 100_000)
    (line,) = expect_error_lines(params(path), "nested deeper than")
    assert line == f"error: {path}: JSON nested deeper than {MAX_DEPTH} levels"


def test_json_depth_at_the_limit_is_read_and_brackets_in_strings_do_not_count(tmp_path):
    nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    text = json.dumps({**LLAMA, "note": "[" * 500})[:-1] + f', "x": {nested}}}'
    assert load_hf_config(write_json(tmp_path, text)).num_layers == 4
    deeper = text.replace(nested, "[" + nested + "]")
    with pytest.raises(UsageError, match="nested deeper"):
        load_hf_config(write_json(tmp_path, deeper, "deeper.json"))


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200))],
    ids=["flow", "block"],
)
def test_deeply_nested_yaml_is_one_line(tmp_path, text):
    path = write_yaml(tmp_path, text)
    expect_error_lines(kvmem(path), str(path), f"nested deeper than {MAX_DEPTH} levels")


def test_an_integer_of_too_many_digits_is_one_line(tmp_path):
    """A config.json, a calibration or a results file with an integer of thousands of digits
    is refused in one line that says so, not with Python's advice on its conversion limit."""
    digits = "1" * 5000
    huge = write_json(tmp_path, f'{{"hidden_size": {digits}}}')
    for args in (
        params(huge),
        ["predict", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--calibration", str(huge)],
        ["compare", str(huge), str(huge)],
    ):
        (line,) = expect_error_lines(args, "an integer of 5,000 digits: 4,300 at most")
        assert "set_int_max_str_digits" not in line
    yaml_file = write_yaml(tmp_path, f"defaults: {{d_model: {digits}}}\n")
    (line,) = expect_error_lines(kvmem(yaml_file), "an integer of 5,000 digits: 4,300 at most")
    assert "(line 1)" in line and "set_int_max_str_digits" not in line


# ------------------------------------------------------- 5. config.json, field by field


def test_a_string_count_names_the_field(tmp_path):
    path = write_json(tmp_path, {**LLAMA, "num_hidden_layers": "32"})
    (line,) = expect_error_lines(params(path))
    assert line == f"error: {path}: field 'num_hidden_layers' must be a positive integer, got '32'"


def test_negative_first_k_dense_replace(tmp_path):
    path = write_json(tmp_path, {**DEEPSEEK_V3, "first_k_dense_replace": -5})
    (line,) = expect_error_lines(params(path))
    assert line == f"error: {path}: field 'first_k_dense_replace' must be an integer >= 0, got -5"


def test_first_k_dense_replace_beyond_the_layers(tmp_path):
    path = write_json(tmp_path, {**DEEPSEEK_V3, "first_k_dense_replace": 7})
    expect_error_lines(params(path), "'first_k_dense_replace' (7)", "'num_hidden_layers' (6)")
    all_dense = spec_from_hf_config({**DEEPSEEK_V3, "first_k_dense_replace": 6}, "m", "m")
    assert all_dense.body.moe.dense_layers == 6


def test_more_experts_per_token_than_experts(tmp_path):
    path = write_json(tmp_path, {**DEEPSEEK_V3, "num_experts_per_tok": 17})
    expect_error_lines(params(path), "'num_experts_per_tok' (17)", "'n_routed_experts' (16)")
    mixtral = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9}
    with pytest.raises(UsageError, match="'num_experts_per_tok' .9.*'num_local_experts' .8."):
        spec_from_hf_config(mixtral, "m", "m")


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_n_shared_experts_is_an_integer_at_least_zero(tmp_path, bad):
    path = write_json(tmp_path, {**DEEPSEEK_V3, "n_shared_experts": bad})
    expect_error_lines(params(path), "'n_shared_experts' must be an integer >= 0")
    none = spec_from_hf_config({**DEEPSEEK_V3, "n_shared_experts": 0}, "m", "m")
    assert none.body.moe.shared_experts == 0


def test_experts_without_a_count_per_token(tmp_path):
    # DeepseekV2Config has no default for num_experts_per_tok
    cfg = {**LLAMA, "model_type": "deepseek_v2", "n_routed_experts": 8}
    expect_error_lines(params(write_json(tmp_path, cfg)), "missing field 'num_experts_per_tok'")


def test_expert_fields_take_transformers_defaults():
    mixtral = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8}
    assert spec_from_hf_config(mixtral, "m", "m").body.moe.experts_per_token == 2
    bare = {
        k: v
        for k, v in DEEPSEEK_V3.items()
        if k
        not in (
            "num_experts_per_tok",
            "moe_intermediate_size",
            "n_shared_experts",
            "first_k_dense_replace",
        )
    }
    moe = spec_from_hf_config(bare, "m", "m").body.moe
    assert (moe.experts_per_token, moe.intermediate_size, moe.shared_experts) == (8, 2048, 1)
    assert moe.dense_layers == 3
    two_layers = spec_from_hf_config({**bare, "num_hidden_layers": 2}, "m", "m").body.moe
    assert two_layers.dense_layers == 2  # all dense, as in transformers


def test_gpt2_defaults(tmp_path):
    cfg = {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_head": 4,
        "n_layer": 2,
        "vocab_size": 100,
        "n_inner": None,
    }
    spec = load_hf_config(write_json(tmp_path, cfg))
    assert spec.body.position_embeddings == GPT2_POSITIONS == 1024
    assert spec.max_position_embeddings == 1024
    assert spec.body.intermediate_size == 4 * 64


#: transformers' defaults (LlamaConfig 11008, MistralConfig and MixtralConfig 14336,
#: Qwen2Config and Qwen3Config 22016, GemmaConfig 24576, Gemma3TextConfig 9216,
#: DeepseekV2Config 11008, DeepseekV3Config 18432, and those of the other configuration
#: classes of the model types with a whole-model body).
INTERMEDIATE = {
    "llama": 11008,
    "mistral": 14336,
    "mixtral": 14336,
    "qwen2": 22016,
    "qwen3": 22016,
    "gemma": 24576,
    "gemma3_text": 9216,
    "deepseek_v2": 11008,
    "deepseek_v3": 18432,
    "cohere": 22528,
    "cohere2": 22528,
    "exaone4": 16384,
    "glm4": 13696,
    "glm4_moe": 10944,
    "gpt_oss": 2880,
    "granite": 11008,
    "llama4_text": 8192,
    "olmo2": 11008,
    "phi3": 8192,
    "phimoe": 6400,
    "qwen2_moe": 5632,
    "qwen3_moe": 6144,
    "smollm3": 11008,
    "starcoder2": 12288,
}


@pytest.mark.parametrize("model_type", sorted(INTERMEDIATE))
def test_missing_intermediate_size_takes_transformers_default(model_type):
    cfg = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    cfg["num_experts_per_tok"] = 1  # DeepseekV2Config has no default
    body = spec_from_hf_config({**cfg, "model_type": model_type}, "m", "m").body
    # Llama-4's intermediate_size is its experts' width (its dense MLP's: intermediate_size_mlp)
    width = body.moe.intermediate_size if model_type == "llama4_text" else body.intermediate_size
    assert width == INTERMEDIATE[model_type]
    # transformers' defaults of the model types with a body (Gemma-2 has none: its
    # configuration class changed it between releases, so its config.json must give it)
    defaults = {k: t.intermediate for k, t in BODY_TRAITS.items() if t.intermediate is not None}
    assert defaults == INTERMEDIATE


def test_gemma2_must_give_intermediate_size(tmp_path):
    cfg = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    path = write_json(tmp_path, {**cfg, "model_type": "gemma2"})
    expect_error_lines(params(path), "missing field 'intermediate_size'")


def test_model_type_defaults_of_the_attention():
    falcon = {
        "model_type": "falcon",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
    }
    assert spec_from_hf_config(falcon, "f", "f").num_kv_heads == 1  # FalconConfig: multi_query
    gemma = {**LLAMA, "model_type": "gemma"}
    assert spec_from_hf_config(gemma, "g", "g").head_dim == 256  # GemmaConfig: head_dim 256
    assert spec_from_hf_config({**LLAMA, "model_type": "qwen3"}, "q", "q").head_dim == 128
    assert spec_from_hf_config(LLAMA, "l", "l").head_dim == 32  # d_model / heads


def test_unknown_architectures_are_read_for_attention_only(tmp_path):
    cfg = {**LLAMA, "model_type": "mystery", "intermediate_size": "not read", "bias": "x"}
    spec = load_hf_config(write_json(tmp_path, cfg))
    assert spec.body is None and spec.num_kv_heads == 2
    assert invoke(*params(write_json(tmp_path, cfg, "m.json"))).exit_code == 0


#: Every integer field read, in a config that reads it: (config, field, minimum).
INT_FIELDS = [
    *(
        (LLAMA, f, 1)
        for f in (
            "hidden_size",
            "num_attention_heads",
            "num_hidden_layers",
            "num_key_value_heads",
            "head_dim",
            "vocab_size",
            "intermediate_size",
            "max_position_embeddings",
        )
    ),
    (LLAMA, "sliding_window", 0),  # 0: no window
    *(
        ({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 10}, f, 1)
        for f in ("n_embd", "n_head", "n_layer", "n_positions", "n_inner")
    ),
    ({**LLAMA, "model_type": "falcon", "new_decoder_architecture": True}, "num_kv_heads", 1),
    ({**LLAMA, "model_type": "falcon", "new_decoder_architecture": True}, "n_head_kv", 1),
    ({**LLAMA, "model_type": "falcon"}, "ffn_hidden_size", 1),
    (
        {**LLAMA, "model_type": "qwen2", "sliding_window": 64, "use_sliding_window": True},
        "max_window_layers",
        0,
    ),
    ({**LLAMA, "model_type": "gemma3_text", "sliding_window": 64}, "sliding_window_pattern", 1),
    *(
        (DEEPSEEK_V3, f, 1)
        for f in (
            "kv_lora_rank",
            "q_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
            "n_routed_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "moe_layer_freq",
        )
    ),
    *((DEEPSEEK_V3, f, 0) for f in ("n_shared_experts", "first_k_dense_replace")),
    ({**LLAMA, "model_type": "mixtral", "num_experts_per_tok": 2}, "num_local_experts", 1),
]


@pytest.mark.parametrize(("cfg", "field", "minimum"), INT_FIELDS, ids=[f for _, f, _ in INT_FIELDS])
def test_every_integer_field_is_checked(cfg, field, minimum):
    for bad in ("8", 8.0, True, [8], {"a": 8}, minimum - 1, 10**400):
        with pytest.raises(UsageError) as info:
            spec_from_hf_config({**cfg, field: bad}, "f.json", "f.json")
        message = str(info.value)
        assert f"'{field}'" in message and "\n" not in message and len(message) < 200, message


BOOL_FIELDS = [
    *(
        (LLAMA, f)
        for f in (
            "tie_word_embeddings",
            "attention_bias",
            "mlp_bias",
            "multi_query",
            "use_sliding_window",
        )
    ),
    *(
        ({**LLAMA, "model_type": "falcon"}, f)
        for f in ("bias", "parallel_attn", "new_decoder_architecture")
    ),
]


@pytest.mark.parametrize(("cfg", "field"), BOOL_FIELDS, ids=[f for _, f in BOOL_FIELDS])
def test_every_boolean_field_is_checked(cfg, field):
    cfg = {**cfg, "sliding_window": 64} if field == "use_sliding_window" else cfg
    for bad in ("false", 0, 1, [True]):
        with pytest.raises(UsageError, match=f"field '{field}' must be true or false"):
            spec_from_hf_config({**cfg, field: bad}, "f.json", "f.json")


@pytest.mark.parametrize("field", ["model_type", "torch_dtype", "dtype", "_name_or_path"])
def test_every_string_field_is_checked(tmp_path, field):
    cfg = {k: v for k, v in LLAMA.items() if k != "torch_dtype" or field != "dtype"}
    path = write_json(tmp_path, {**cfg, field: 16})
    expect_error_lines(params(path), f"field '{field}' must be a string, got 16")


def test_layer_types_must_be_strings(tmp_path):
    cfg = {**LLAMA, "sliding_window": 64, "layer_types": [1, 2, 3, 4]}
    expect_error_lines(params(write_json(tmp_path, cfg)), "'layer_types' must list 4")


def test_a_layer_type_that_is_no_string_is_an_error_without_the_heads_too(tmp_path):
    """A listed layer type that is a list (unhashable) is a layer of no attention kind,
    in one line, however little of the config there is to tell it by."""
    cfg = {k: v for k, v in LLAMA.items() if k != "num_attention_heads"}
    cfg["model_type"] = "rwkv"  # a type without a default of its heads
    result = invoke(*params(write_json(tmp_path, {**cfg, "layer_types": [[]]})))
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and "has no attention layer" in line


def test_the_cli_reports_config_json_problems_as_a_user_sees_them(tmp_path):
    """No traceback and one short line whatever the value: huge, long, multi-line, nested."""
    for value in (10**400, "x" * 10_000, "a\nb", [[[1]]] * 1000, ""):
        path = write_json(tmp_path, {**LLAMA, "hidden_size": value})
        result = invoke(*params(path))
        assert result.exit_code == 2 and "Traceback" not in result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"error: {path}: field 'hidden_size' must be") and len(line) < 300


def read_back(text: str) -> str | None:
    return not_text(json.loads(text), text)


def test_a_lone_surrogate_escape_is_found_where_it_stands():
    text = '{"records": [{"variant": "ok"}, {"variant": "\\ud800"}], "n": 1}'
    assert read_back(text).startswith("records[1].variant holds a lone surrogate escape")
    assert read_back('{"sections": {"\\udc80": 1}}').startswith("a key of sections")
    assert read_back('{"a": ["x", 1.5, null, {"b": "\\u00e9"}]}') is None
    assert read_back('{"a": "\\ud83d\\ude00"}') is None  # a pair: one character, an emoji
    assert read_back('{"a": "\\\\ud800"}') is None  # an escaped backslash, then text


def test_a_lone_surrogate_is_refused_before_any_output_is_touched(tmp_path):
    """JSON takes "\\ud800", UTF-8 does not: a config, results or calibration file holding
    one is refused as it is read, and the output already there stays as it was."""
    config = {"model_type": "llama", "_name_or_path": "\ud800x", "hidden_size": 256}
    config |= {"num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 100}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))  # ensure_ascii: the escape, as a file holds it
    kept = tmp_path / "kept.csv"
    kept.write_text("KEEP\n")
    result = invoke("kvmem", "--hf-config", str(path), "--seq-len", "64", "--csv", str(kept))
    assert result.exit_code == 2, result.output
    assert "_name_or_path holds a lone surrogate escape" in result.output
    assert "Traceback" not in result.output and kept.read_text() == "KEEP\n"
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"source": "\udc80"}))
    result = invoke("predict", "--model", "llama-2-7b", "--calibration", str(calibration))
    assert result.exit_code == 2 and "source holds a lone surrogate" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("kvmem", "--model", "llama-2-7b", "--csv", ""),
        ("kvmem", "--hf-config", ""),
        ("kvmem", "--config", ""),
        ("predict", "--model", "llama-2-7b", "--calibration", ""),
        ("compare", "a.json", "b.json", "--output", ""),
    ],
)
def test_a_file_name_given_empty_is_refused_not_read_as_left_out(args):
    result = invoke(*args)
    flag = args[args.index("") - 1]
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {flag} '': empty; give a value")


def test_a_config_without_attention_heads_says_what_it_gives_instead(tmp_path):
    """XGLM counts its heads in attention_heads and xLSTM its cells' in num_heads, names
    attnbench does not read: the refusal names them; a config with no field of heads at
    all (RWKV) is refused as having no KV cache to size."""
    cfg = {k: v for k, v in LLAMA.items() if k != "num_attention_heads"}
    for extra, said in (
        ({"attention_heads": 16}, "it gives 'attention_heads', which attnbench does not read"),
        ({"num_heads": 8, "tie_heads": True}, "it gives 'num_heads', which"),
        ({"model_type": "rwkv"}, "without attention heads it has no KV cache"),
    ):
        (line,) = expect_error_lines(params(write_json(tmp_path, {**cfg, **extra})), said)
        assert "missing field 'num_attention_heads' or 'n_head' or 'n_heads'" in line
        assert "tie_heads" not in line


def test_a_small_file_is_read_without_taking_its_limit_in_memory(tmp_path):
    """A results file's limit is 1 GiB: one read of that many bytes allocated all of it
    first, which failed (MemoryError) in a process short of address space."""
    small = tmp_path / "small.json"
    small.write_text('{"records": []}')
    with memory_guard(extra=64 << 20):
        assert read_user_file(small, "results", limit=1 << 30) == '{"records": []}'


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"a": "abc', "unterminated string at line 1, column 7"),
        ('{"a":\n  }', "expecting value at line 2, column 3"),
        ('{"a": 1,}', "expecting property name enclosed in double quotes at line 1, column 9"),
        ('\ufeff{"a": 1}', "a byte-order mark before it: save the file as UTF-8 without one"),
    ],
)
def test_a_json_problem_says_where_and_what_in_one_phrase(text, problem):
    """json's messages leave their position to be appended ('... starting at'): said once,
    with the line and column."""
    with pytest.raises(json.JSONDecodeError) as error:
        json.loads(text)
    assert json_problem(error.value) == problem
