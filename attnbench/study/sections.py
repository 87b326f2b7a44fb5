"""The kinds of section a study can hold, and what the runner needs to know of each.

A kind is built from its experiment module when its section is first used (KINDS): the
modules of decode and params import torch, a second of start-up that a command which
only computes (kvmem without measuring, fit, predict) does without."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..experiments.kvmem import KIND_RECORDS, LayerKindRecord
from ..experiments.whole_model import PART_RECORDS, ModelPartRecord
from ..model.shapes import shape_label, variant_label
from ..model.weights import WeightFormat
from ..model.what_if import OWN_MARK, is_own
from ..records import ColumnSpec
from .schema import DEFAULT_MAX_TIME_S

if TYPE_CHECKING:
    import torch

    from ..experiments.decode import DecodeOptions, DecodePoint
    from ..experiments.kvmem import KvmemOptions, KvmemPoint


class Experiment(Protocol):
    """What every experiment module gives the study: `check(point)` raises for a point
    that cannot run, before anything runs (and runs nothing); `run(point, context)`
    measures one point into its record; `order(points, options)` gives the run order of
    a section's points with its typed options (and may leave points out);
    `link(points, options)` says which of the points run together are compared with
    which (decode's Pair: the step of one over another's, sampled in the same rounds),
    none for a section that compares nothing."""

    def check(self, point: Any) -> None: ...

    def run(self, point: Any, context: Any) -> Any: ...

    def order(self, points: list, options: Any) -> list: ...

    def link(self, points: list, options: Any) -> list: ...


def decode_options(options: Mapping[str, Any], device: torch.device | None) -> DecodeOptions:
    """A decode section's resolved scalar options, typed: `max_time` unset is the
    schema's default for `device`."""
    from ..experiments.decode import DecodeOptions

    given = {name: options[name] for name in DecodeOptions.__dataclass_fields__}
    if given["max_time"] is None:
        given["max_time"] = DEFAULT_MAX_TIME_S[device.type if device is not None else "cpu"]
    return DecodeOptions(**given)


def kvmem_options(options: Mapping[str, Any], device: torch.device | None) -> KvmemOptions:
    from ..experiments.kvmem import KvmemOptions

    return KvmemOptions(measure=options["measure"])


def point_name(point: Any) -> str:
    """A point's model, with its variant when it is one of a what-if set ('llama-3-70b
    MQA', 'llama-3-70b GQA-8 (own)'), or its layer shape: 'd512 h8/2'."""
    if not point.model:
        return shape_label(point.d_model, point.num_heads, point.num_kv_heads)
    if point.published_kv_heads is None:
        return point.model
    spec = point.spec if getattr(point, "spec", None) else None
    num_heads = spec.num_heads if spec else point.num_heads
    variant = variant_label(num_heads, point.num_kv_heads)
    own = OWN_MARK if is_own(point.num_kv_heads, point.published_kv_heads) else ""
    return f"{point.model} {variant}{own}"


def describe_kvmem(point: KvmemPoint) -> str:
    """'llama-2-7b batch 1 context 4096 float16'."""
    return f"{point_name(point)} batch {point.batch} context {point.seq_len} {point.dtype}"


def describe_decode(point: DecodePoint) -> str:
    """'d512 h8/8 attnbench float32 batch 1 context 64 gen 4 cache graph', with
    'sequences 8q1s1k' for a batch spec and 'block 16' for a paged cache."""
    gen = f" gen {point.gen_len}" if point.gen_len else ""
    graph = " graph" if point.cuda_graph else ""
    block = f" block {point.block_size}" if point.block_size is not None else ""
    batch = f"batch {point.batch} context {point.prompt_len}"
    if point.batch_spec is not None:
        batch = f"sequences {point.batch_spec}"
    name = point_name(point)
    return f"{name} {point.provider} {point.dtype} {batch}{gen} {point.mode}{graph}{block}"


@dataclass(frozen=True)
class SectionKind:
    """`run(point, context)` measures one point; `check(point)` raises for a point that
    cannot run, before anything runs; `failed(point, status)` is the record of a point that
    ran out of memory (None: such a point stops the study). A section that `keeps_going`
    records any other failure of a point as an `error: ...` status and goes on.
    `check_section(values, options, given)` raises for options that do not fit the axes;
    `order(points, options)` gives the run order (and may leave points out);
    `groups(points, options, device)` puts the points, in run order, into groups that
    `run_group(points, context, number, link)` runs together, returning their records, with
    the comparisons `link(points, options)` names among them (decode:
    the points compared with each other, sampled in turn); `together(point)` is what the
    points of a group share (a study shared among workers keeps them on one);
    `pre_pass(points, options, device)` measures what is measured for all the points at
    once before any runs (decode: instruction counts, in one valgrind process), which each
    point finds in its context's `counts`. `options(resolved, device)` types a section's
    resolved scalar options, once per section, with its device (None where it uses none):
    every `options` above is that object.
    `beside` makes, by name, the record sets the section writes beside its points'
    records, each from the resolved section (params: its models' whole-model parts; kvmem:
    its models' layer kinds, as its points store them).
    `wants_peaks(point)` says whether a point of a section that is not timed needs the
    peaks measured all the same (predict: on this machine). `whole_model`: the section
    counts its models whole (a type without formulas is counted by transformers).
    `on_device(resolved)` says whether a section's points, with its resolved scalar
    options, use its device at all (kvmem: only when it measures); a device is resolved
    (which needs torch) only for a section that uses it. `measures`: the section allocates
    or times on its device, which the run's environment is then recorded for (a timed
    section's first); `counts_on_torch`: its points are counted on torch modules (params:
    built on the meta device), so that its results depend on torch, whose facts the run's
    environment then records as a measuring run's does. `describe(point)` names a point in
    one line (a progress line); `title` says what the section holds (its table's title in
    a report; None: its name); `providers`: its points are timed per provider, whose steps
    are set side by side (render.providers). `columns`: its table's columns
    (records.ColumnSpec), which render.columns makes; none for a section whose columns
    depend on its rows (kvmem, decode: render.columns.ROW_COLUMNS). `scaled(point)` names
    the formats of a point that carry scales ("weights", "kv"): a scale group given for a
    format that no point of the section quantises has no effect, and is refused.
    `model_defaults(spec, point)`: the values a model gives the fields of a point that
    sets none of them (None: its dtype; predict on a named GPU and fit: the dtype and
    weights an engine serves its checkpoint in).
    `cuda_only`: switches that act on a CUDA device alone (decode: CUDA graphs, the L2
    flush), refused when a flag sets them for a section on another device (a sweep file's
    may serve a run on a GPU)."""

    name: str
    point: type
    record: type
    run: Callable[..., Any]
    check: Callable[[Any], None]
    failed: Callable[[Any, str], Any] | None = None
    order: Callable[[list, Any], list] | None = None
    link: Callable[[list, Any], list] | None = None
    groups: Callable[[list, Any, torch.device], list[list[int]]] | None = None
    together: Callable[[Any], Any] | None = None
    run_group: Callable[[list, Any, int, Callable], list] | None = None
    check_section: Callable[[dict, Any, set], None] | None = None
    pre_pass: Callable[[list, Any, torch.device], dict] | None = None
    options: Callable[[Mapping[str, Any], torch.device | None], Any] | None = None
    beside: Mapping[str, Callable[[Any], list]] = field(default_factory=dict)
    wants_peaks: Callable[[Any], bool] | None = None
    on_device: Callable[[Mapping[str, Any]], bool] | None = None
    describe: Callable[[Any], str] = point_name
    title: str | None = None
    providers: bool = False
    timed: bool = False
    measures: bool = False
    keeps_going: bool = False
    whole_model: bool = False
    cuda_only: tuple[str, ...] = ()
    counts_on_torch: bool = False
    columns: Sequence[ColumnSpec] = ()
    scaled: Callable[[Any], frozenset[str]] | None = None
    model_defaults: Callable[[Any, Mapping[str, Any]], Mapping[str, Any]] | None = None

    @classmethod
    def of(cls, name: str, experiment: Experiment, **more: Any) -> SectionKind:
        """The kind of section that runs `experiment` (a module of experiments/), with
        its table's COLUMNS where it declares them."""
        point, record = more.pop("point"), more.pop("record")
        return cls(
            name,
            point,
            record,
            experiment.run,
            experiment.check,
            order=experiment.order,
            link=experiment.link,
            columns=getattr(experiment, "COLUMNS", ()),
            scaled=getattr(experiment, "scaled", None),
            **more,
        )


def _params() -> SectionKind:
    from ..experiments import params  # a module built on the meta device: torch

    return SectionKind.of(
        "params",
        params,
        point=params.ParamsPoint,
        record=params.ParamsRecord,
        beside=params.BESIDE,
        title="Attention parameters per layer",
        whole_model=True,
        counts_on_torch=True,
    )


def _kvmem() -> SectionKind:
    from ..experiments import kvmem

    return SectionKind.of(
        "kvmem",
        kvmem,
        point=kvmem.KvmemPoint,
        record=kvmem.KvmemRecord,
        failed=kvmem.failed,
        options=kvmem_options,
        on_device=kvmem.on_device,
        beside=kvmem.BESIDE,
        describe=describe_kvmem,
        check_section=kvmem.check_section,
        title="KV-cache memory (K and V)",
        measures=True,
    )


def _decode() -> SectionKind:
    from ..experiments import decode, instructions, interleave  # timing: torch

    return SectionKind.of(
        "decode",
        decode,
        point=decode.DecodePoint,
        record=decode.DecodeRecord,
        failed=decode.failed,
        options=decode_options,
        cuda_only=("cuda_graph", "flush_l2"),
        groups=interleave.sampling_groups,
        run_group=interleave.run_group,
        together=decode.context_of,
        check_section=decode.check_section,
        pre_pass=instructions.section_counts,
        describe=describe_decode,
        title="Decode speed",
        providers=True,
        timed=True,
        measures=True,
        keeps_going=True,
    )


def describe_predict(point: Any) -> str:
    """'llama-2-7b on h100-sxm tp 1 batch 1 context 2048 float16 weights int8 per channel':
    the weights as the records name them, their options included."""
    weights = f" weights {point.weights.describe()}" if point.weights_dtype else ""
    where = f"on {point.gpu} tp {point.tp} batch {point.batch} context {point.seq_len}"
    return f"{point_name(point)} {where} {point.dtype}{weights}"


def describe_fit(point: Any) -> str:
    """'llama-3-70b on 8 x h100-sxm tp 8 context 8192 tpot 50ms', or with the memory
    given: 'on 8 x 80GiB'; 'batch 64' where it asks for the longest context; the weights
    as the records name them where the point sets them ('weights int4 in groups of 128')."""
    device = point.memory or point.gpu
    count = f"{point.gpus} x " if point.gpus else ""
    on = f" on {count}{device}" if device else ""
    tp = f" tp {point.tp}" if point.tp else ""
    asked = f"context {point.seq_len}" if point.seq_len is not None else f"batch {point.batch}"
    targets = "".join(
        f" {name} {getattr(point, name)}" for name in ("tpot", "ttft") if getattr(point, name)
    )
    dtype = point.weights_dtype
    weights = f" weights {WeightFormat.of_point(dtype, point).describe()}" if dtype else ""
    return f"{point_name(point)}{on}{tp} {asked}{targets}{weights}"


def _fit() -> SectionKind:
    from ..experiments import fit, target

    return SectionKind.of(
        "fit",
        fit,
        point=fit.FitPoint,
        record=fit.FitRecord,
        describe=describe_fit,
        model_defaults=target.checkpoint_weights,
        title="What fits",
        whole_model=True,
    )


def _predict() -> SectionKind:
    from ..experiments import predict

    return SectionKind.of(
        "predict",
        predict,
        point=predict.PredictPoint,
        record=predict.PredictRecord,
        wants_peaks=predict.wants_peaks,
        model_defaults=predict.model_defaults,
        describe=describe_predict,
        whole_model=True,
    )


T = TypeVar("T")


class Registry(MutableMapping[str, T]):
    """Values by name, each made by its builder when it is first looked up, then kept:
    the names are known at once (iterating, `in`), and what a value's builder imports is
    imported only for the values looked up. A value is registered, or replaced, by name,
    as in a dict: a section kind of one's own joins KINDS so."""

    def __init__(self, builders: Mapping[str, Callable[[], T]]) -> None:
        self._builders = dict(builders)
        self._built: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        if name not in self._built:
            self._built[name] = self._builders[name]()
        return self._built[name]

    def __setitem__(self, name: str, value: T) -> None:
        self._builders[name] = lambda: value
        self._built[name] = value

    def __delitem__(self, name: str) -> None:
        del self._builders[name]
        self._built.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._builders

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


#: Every kind of section by name, each built (its experiment module imported) when its
#: section is first looked up.
KINDS: Registry[SectionKind] = Registry(
    {"params": _params, "kvmem": _kvmem, "decode": _decode, "fit": _fit, "predict": _predict}
)
#: The command that runs a section alone, where it is not the section's name: known
#: before any kind is built, since a results file names the command that wrote it.
COMMANDS = {"decode": "decode-speed"}


#: The record sets a section writes beside its points' records, by name: the whole-model
#: parts of `params`, the layer kinds of `kvmem`.
BESIDE_RECORDS: dict[str, type] = {PART_RECORDS: ModelPartRecord, KIND_RECORDS: LayerKindRecord}


class _RecordTypes(Mapping[str, type]):
    """Every record type by the name of the records it holds: each section kind's (its
    kind built when asked), then BESIDE_RECORDS; a kind registered in KINDS joins it."""

    def __getitem__(self, name: str) -> type:
        return KINDS[name].record if name in KINDS else BESIDE_RECORDS[name]

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(KINDS, BESIDE_RECORDS)

    def __len__(self) -> int:
        return len(KINDS) + len(BESIDE_RECORDS)


RECORD_TYPES: Mapping[str, type] = _RecordTypes()


def describe_task(task: Any) -> str:
    """One line naming a task's point, after its section: 'kvmem llama-2-7b batch 1
    context 4096 float16'."""
    return f"{task.section} {KINDS[task.section].describe(task.point)}"


def command_of(section: str) -> str:
    """The command that runs a section alone: 'decode-speed' for decode."""
    return COMMANDS.get(section, section)


def title_of(section: str) -> str:
    """What a section holds, in words (its name for a section without a title)."""
    kind = KINDS.get(section)
    return kind.title if kind is not None and kind.title else section


def sets_providers_side_by_side(section: str) -> bool:
    """Whether a section's points are timed per provider, set side by side (decode)."""
    kind = KINDS.get(section)
    return kind is not None and kind.providers


def record_type(section: str) -> type | None:
    """The record dataclass of a section (None for a section this version does not know)."""
    return RECORD_TYPES.get(section)


def record_sets(document: Mapping[str, Any]) -> dict[str, tuple[list, type]]:
    """Every record set of a study's document with its record type, each written to a CSV
    of its name: the sections' records, then the sets written beside them (the
    whole-model parts of `params`)."""
    sets = {name: (s["records"], KINDS[name].record) for name, s in document["sections"].items()}
    beside = {n: (document[n], rtype) for n, rtype in BESIDE_RECORDS.items() if document.get(n)}
    return {**sets, **beside}
