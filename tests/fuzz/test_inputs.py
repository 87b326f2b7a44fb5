"""Property-based fuzzing of four kinds of input: shape flags beside a model, numbers in a
sweep file, extreme timings in results files, and device names.

Each property holds whatever hypothesis draws: no traceback, an exit code the docs promise,
one `error:` line per problem (test_fuzz.invoke), and each its own rule: a model's shape is
never silently overridden; a sweep file's numbers read as the flags read them; compare
never prints an infinity or a NaN; a device is auto, cpu, cuda or cuda:<ASCII digits>.
"""

from __future__ import annotations

import copy
import json
import re
from unittest import mock

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attnbench.cli.flags import parse_field
from attnbench.errors import FieldError, UsageError
from attnbench.measure import devices
from attnbench.study.sweep import load_config, resolve
from tests.fuzz.test_flags import invoke
from tests.gate.test_compare import decode_records, document

# --- shape flags beside a model ------------------------------------------------------------

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "torch_dtype": "float32",
}
#: Values each shape flag may take, valid alone and together (heads divide the widths, the
#: KV heads divide the heads of the model and of any layer shape).
SHAPE_VALUES = {
    "--d-model": ["8", "16", "32,16"],
    "--heads": ["2", "4"],
    "--head-dim": ["4", "8,16"],
    "--layers": ["1", "3,2"],
    "--kv-heads": ["1", "2", "mqa", "1,mha"],
}
#: The flags of a model's own shape: each refused unless a whole layer shape is given.
MODEL_OWN = ("--d-model", "--heads", "--head-dim", "--layers")


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def shape_flags(names: list[str]):
    """Some of the flags `names`, each with one of its values."""
    chosen = st.lists(st.sampled_from(names), unique=True, max_size=len(names))
    return chosen.flatmap(
        lambda flags: st.tuples(*(st.sampled_from(SHAPE_VALUES[f]) for f in flags)).map(
            lambda values: dict(zip(flags, values, strict=True))
        )
    )


def check_overrides(command: str, model: list[str], given: dict[str, str], extra: list[str]):
    args = [command, *model, *(x for pair in given.items() for x in pair), *extra, "-q"]
    result = invoke(args, command, codes={0, 2})
    whole_shape = "--d-model" in given and "--heads" in given
    refused = [] if whole_shape else [f for f in MODEL_OWN if f in given]
    if not refused:
        assert result.exit_code == 0, (args, result.output)
        return
    assert result.exit_code == 2, (args, result.output)
    named = [line.split(":")[1].strip() for line in result.stderr.splitlines()]
    assert named == [f"{flag} {given[flag]}" for flag in refused], (args, result.stderr)
    assert all("has its own" in line for line in result.stderr.splitlines())


@given(
    st.sampled_from(["params", "kvmem"]),
    st.booleans(),
    shape_flags(list(SHAPE_VALUES)),
)
def test_a_models_shape_is_applied_or_refused(tiny_config, command, preset, given_flags):
    if command == "params":
        given_flags.pop("--layers", None)  # kvmem's alone
    model = ["--model", "llama-2-7b"] if preset else ["--hf-config", tiny_config]
    extra = ["--no-measure", "--seq-len", "16"] if command == "kvmem" else []
    check_overrides(command, model, given_flags, extra)


@given(shape_flags(["--d-model", "--heads", "--kv-heads"]), st.sampled_from(["4", "8,16"]))
def test_decode_refuses_a_models_shape_before_it_runs(tiny_config, given_flags, head_dim):
    given_flags.pop("--d-model" if "--heads" in given_flags else "--heads", None)
    check_overrides(
        "decode-speed", ["--hf-config", tiny_config], {**given_flags, "--head-dim": head_dim}, []
    )


# --- numbers in sweep files ----------------------------------------------------------------

#: Numeric fields of a decode section (the flag parser's too), their type.
NUMERIC = {
    "max_time": float,
    "target_rel_ci": float,
    "batch": int,
    "prompt_len": int,
    "warmup": int,
    "min_repeats": int,
    "gen_len": int,
    "tp": int,
}
YAML_WORDS = [
    "true",
    "false",
    "True",
    "FALSE",
    "yes",
    "no",
    "on",
    "off",
    "null",
    "~",
    ".inf",
    "-.inf",
    ".nan",
    ".NaN",
    "nan",
    "inf",
    "0x10",
    "0o17",
    "010",
    "1_000",
    "1:30",
    "1.2.3",
    "v1.0",
    "1e",
    "e3",
    "1e+",
    "٣",
    "²",
    "+-1",
    "0.",
    ".",
]


def spellings(value: float) -> st.SearchStrategy[str]:
    """`value` as YAML and a flag may write it: 0.02, 2e-2, 2E-02, +2.0e-2, .02..."""
    mantissa, exponent = f"{value:e}".split("e")
    forms = [
        repr(value),
        f"{value:g}",
        f"{value:e}",
        f"{value:E}",
        f"{mantissa}e{int(exponent)}",
        f"+{value:g}",
        f"{value:.3e}".replace("e-0", "e-").replace("e+0", "e"),
        f"{value:f}".rstrip("0"),
    ]
    if value == int(value):
        forms += [str(int(value)), f"{int(value)}e0", f"{int(value)}.0"]
    if 0 < value < 1:
        forms.append(f"{value:f}".rstrip("0").removeprefix("0"))
    return st.sampled_from(forms)


numbers = st.one_of(
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False),
    st.integers(min_value=-3, max_value=10_000).map(float),
    st.sampled_from([0.02, 1e3, 0.5, 1.0, 3600.0, 3601.0, 0.0, 1e-300]),
)
texts = st.one_of(numbers.flatmap(spellings), st.sampled_from(YAML_WORDS))


def outcome(fn) -> tuple[str, object]:
    try:
        return "ok", fn()
    except UsageError:
        return "refused", None


@given(st.sampled_from(sorted(NUMERIC)), texts)
def test_a_sweep_files_number_reads_as_the_flag_reads(tmp_path_factory, field, text):
    path = tmp_path_factory.mktemp("numbers") / "study.yaml"
    path.write_text(f"decode:\n  d_model: 8\n  num_heads: 2\n  {field}: {text}\n")

    def from_file():
        section = resolve(load_config(path), "decode")
        value = section.options.get(field, section.values.get(field))
        return value[0] if isinstance(value, list) else value

    def from_flag():
        value = parse_field(field, text)
        return value[0] if isinstance(value, list) else value

    file, flag = outcome(from_file), outcome(from_flag)
    assert file == flag, (field, text)
    if file[0] == "ok":
        assert type(file[1]) is NUMERIC[field], (field, text, file)


def yaml_value(value: str | list[str]) -> str:
    """A value as a sweep file writes it: as typed, or a list of such: [1e3, 2]."""
    return f"[{', '.join(value)}]" if isinstance(value, list) else value


KVMEM_NUMERIC = [
    "batch",
    "seq_len",
    "num_layers",
    "tp",
    "page_size",
    "kv_scale_group",
    "sliding_window",
]


@given(
    st.dictionaries(
        st.sampled_from(KVMEM_NUMERIC),
        st.one_of(texts, st.lists(texts, min_size=1, max_size=3)),
        max_size=3,
    )
)
def test_a_sweep_files_numbers_exit_0_or_name_the_key(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("sweep") / "study.yaml"
    keys = "".join(f"  {k}: {yaml_value(v)}\n" for k, v in body.items())
    path.write_text(f"kvmem:\n  d_model: 8\n  num_heads: 2\n{keys}")
    result = invoke(["kvmem", "--config", str(path), "--no-measure", "-q"], "kvmem")
    for line in result.stderr.splitlines():
        assert re.match(rf"error: kvmem\.\w+: .* \({re.escape(str(path))}\): ", line), line


# --- extreme timings in results files ------------------------------------------------------

EXTREMES = [
    1e308,
    1.7976931348623157e308,
    5e-324,
    1e-310,
    2.2250738585072014e-308,
    1e-9,
    1e9,
    1e-10,
    1e10,
    0.0,
    0.05,
    1.0,
]
timings = st.one_of(
    st.sampled_from(EXTREMES), st.floats(min_value=0, allow_nan=False, allow_infinity=False)
)
TIMING_FIELDS = [
    "step_ms_median",
    "step_ms_p25",
    "step_ms_p75",
    "samples_ms",
    "gen_ms_median",
    "prefill_samples_ms",
    "gen_samples_ms",
]
BASE_RECORDS = decode_records()
NOT_FINITE = re.compile(r"\b(inf|infinity|nan)\b", re.IGNORECASE)


def set_timing(record: dict, field: str, value: float, count: int) -> None:
    """`value` for a timing, or `count` samples of it before the record's own."""
    if field.endswith("samples_ms"):
        record[field] = [value] * count + record[field]
    elif record.get(field) is not None:
        record[field] = value


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, len(BASE_RECORDS) - 1),
            st.sampled_from(TIMING_FIELDS),
            timings,
            st.integers(1, 1000),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["table", "markdown", "json"]),
)
@example([(False, 0, "samples_ms", 0.0, 40), (False, 0, "step_ms_median", 1.0, 1)], "table")
def test_compare_of_extreme_timings_prints_no_infinity(tmp_path_factory, changes, fmt):
    records = {True: copy.deepcopy(BASE_RECORDS), False: copy.deepcopy(BASE_RECORDS)}
    for in_base, index, field, value, count in changes:
        set_timing(records[in_base][index], field, value, count)
    folder = tmp_path_factory.mktemp("compare")
    paths = []
    for in_base in (True, False):
        path = folder / f"{'base' if in_base else 'cur'}.json"
        path.write_text(json.dumps(document("decode-speed", records[in_base])))
        paths.append(str(path))
    result = invoke(["compare", *paths, "--all", "--format", fmt], "compare")
    assert not NOT_FINITE.search(result.output), result.output


# --- device names --------------------------------------------------------------------------

DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
device_names = st.one_of(
    st.sampled_from(
        [
            "auto",
            "cpu",
            "cuda",
            "cuda:0",
            "cuda:1",
            "CUDA:1",
            " cpu ",
            "cuda:²",
            "cuda:٣",
            "cuda:１",
            "cuda:",
            "cuda:-1",
            "cuda:+1",
            "cuda:0x1",
            "cuda:1.0",
            "cuda:1 ",
            "cuda :1",
            "cpu:0",
            "mps",
            "ｃｐｕ",
            "",
        ]
    ),
    st.builds(
        "cuda:{}".format,
        st.text(st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=3),
    ),
    st.text(max_size=8),
)


@given(device_names)
def test_a_device_is_auto_cpu_cuda_or_cuda_ascii_digits(name):
    with (
        mock.patch.object(torch.cuda, "is_available", return_value=True),
        mock.patch.object(torch.cuda, "device_count", return_value=2),
        mock.patch.object(torch.cuda, "current_device", return_value=0),
    ):
        try:
            device = devices.resolve_device(name)
        except FieldError as error:
            assert error.field == "device" and error.value == name
            return
    assert DEVICE.fullmatch(name.strip().lower()), name  # an empty name is no device
    assert device.type in ("cpu", "cuda") and device.index in (None, 0, 1)


@given(device_names)
def test_a_device_flag_exits_0_or_names_the_flag(name):
    args = ["kvmem", "--d-model", "8", "--heads", "2", "--seq-len", "4", "--no-measure", "-q"]
    result = invoke([*args, "--device", name], "kvmem")
    if result.exit_code == 2:
        assert result.stderr.startswith("error: --device "), result.stderr


#: The characters of the batch grammar, so that most draws come close to a real spec.
BATCH_ALPHABET = "0123456789qskvK_@./ x-"


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=BATCH_ALPHABET, max_size=30) | st.text(max_size=20))
def test_a_batch_spec_is_read_or_refused_in_one_line(text):
    from attnbench.model.batches import parse_batch

    try:
        spec = parse_batch(text)
    except FieldError as error:
        assert error.field == "batch_spec" and "\n" not in str(error)
        return
    assert parse_batch(spec.text) == spec and spec.batch_size >= 1
    assert all(1 <= s.q_len <= s.kv_len for s in spec.sequences)
