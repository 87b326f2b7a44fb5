"""What a timed number is, and the one definition of each statistic attnbench takes of one.

A `Measurement` holds raw samples and their summary: the median with p25..p75, the
distribution-free 95% interval of the median, and why sampling stopped. The Timer returns
one (measure.timing), a record stores its summary and samples in the columns it declares
(records.flattened), and the gate, the history and the gate's simulation read one back
(`Measurement.of_record`, `Measurement.of_samples`).

Every percentile is `percentile` (linear interpolation between order statistics, numpy's
default method) and every median is `median`. The bootstraps draw thousands of
resamples at once, so they take the same definition vectorised: `bootstrap_medians` (the
middle order statistic of each resample, or the mean of the two middle ones) and
`bootstrap_bounds` (numpy's linear quantiles of the resampled estimates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np


#: IQR / median above which a measurement is flagged noisy.
NOISY_IQR_FRACTION = 0.10
#: The fewest samples whose spread can be judged: with fewer, the 95% interval of their
#: median (median_interval) spans every one of them, so a few samples that all met the same
#: stall (a scheduler tick, say) read as a spread of nothing. Such a measurement is noisy
#: until shown otherwise.
MIN_SPREAD_SAMPLES = 11
#: z of a two-sided 95% interval.
Z_95 = 1.959963984540054
#: Why sampling stopped: the interval reached its target, the time budget ran out, the
#: most samples allowed were taken, or a fixed count was asked for.
CONVERGED, OUT_OF_TIME, MOST_SAMPLES, FIXED = "target_ci", "max_time", "max_repeats", "repeats"
#: The least share of the CPU time its threads needed a sampling process should have
#: (measure.timing.CpuShare): one that had less waited while another process held the
#: CPU, and its times are the host's as much as its own.
BUSY_CPU_SHARE = 0.8
#: Resamples of a bootstrap interval, and its seed (the same samples give the same interval).
RESAMPLES, BOOTSTRAP_SEED = 2000, 0
#: Student's t at 97.5% (a two-sided 95% interval) by degrees of freedom, 1 to 12; Z_95
#: beyond.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179)
#: Memory layouts whose medians lie further apart than this at one gap (their ratio), and
#: further than twice the spread on either side of it, fall into two modes, of at least
#: MODE_LAYOUTS layouts each: one layout apart is an outlier, as likely a stall of the
#: host during its rounds (taken one after another) as a layout of its own.
MODE_GAP, MODE_LAYOUTS = 1.15, 2


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    """The 50th `percentile`: the middle value, or the mean of the two middle ones."""
    return percentile(values, 50)


def median_interval(values: Sequence[float], z: float = Z_95) -> tuple[float, float]:
    """The confidence interval of the median from order statistics: the sorted values at
    ranks n/2 -+ z*sqrt(n)/2 (the normal approximation of the binomial, widened to whole
    ranks). With few values it spans them all."""
    ordered = sorted(values)
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    lo = max(math.floor(n / 2 - half), 1)
    hi = min(math.ceil(n / 2 + half) + 1, n)
    return ordered[lo - 1], ordered[hi - 1]


def relative_half_width(center: float, lo: float, hi: float) -> float:
    """The larger side of an interval around `center`, relative to it (inf at 0)."""
    return max(center - lo, hi - center) / center if center > 0 else math.inf


def bootstrap_medians(
    samples: Sequence[float], rng: np.random.Generator, n: int, layouts: int = 1
) -> np.ndarray:
    """The `median` of each of `n` resamples with replacement, vectorised. Resampling
    indices into the sorted samples and sorting the indices keeps each resample sorted:
    cheaper than np.median per row, whose result it equals. Samples taken over several
    memory layouts (layout_chunks) are resampled in two stages, layouts and then the
    rounds of each, so that what a layout's rounds share is drawn as one."""
    import numpy as np  # only a bootstrap needs it; the tables and plans that read this do not

    chunks = layout_chunks(samples, layouts)
    if len(chunks) > 1:
        x = np.asarray(chunks, dtype=float)
        count, size = x.shape
        rows = x[rng.integers(0, count, size=(n, count))]
        picked = np.take_along_axis(rows, rng.integers(0, size, size=rows.shape), axis=2)
        return np.median(picked.reshape(n, count * size), axis=1)
    x = np.sort(np.asarray(samples, dtype=float))
    idx = np.sort(rng.integers(0, x.size, size=(n, x.size)), axis=1)
    return (x[idx[:, (x.size - 1) // 2]] + x[idx[:, x.size // 2]]) / 2


def bootstrap_bounds(estimates: np.ndarray, lower: float, upper: float) -> tuple[float, float]:
    """The `lower` and `upper` quantiles (fractions, 0..1) of a bootstrap's resampled
    estimates: `percentile`'s definition, vectorised (numpy's linear method)."""
    import numpy as np

    lo, hi = np.quantile(estimates, [lower, upper])
    return float(lo), float(hi)


def bootstrap_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """The seeded percentile-bootstrap `confidence` interval of the median of `values`."""
    import numpy as np

    medians = bootstrap_medians(values, np.random.default_rng(BOOTSTRAP_SEED), RESAMPLES)
    return bootstrap_bounds(medians, (1 - confidence) / 2, (1 + confidence) / 2)


def layout_chunks(values: Sequence[float], layouts: int) -> list[Sequence[float]]:
    """The samples of each memory layout: `layouts` equal consecutive runs of `values`
    (a layout's rounds are taken one after another), or all of them as one when they do
    not split evenly (a record from before layouts were sampled)."""
    if layouts <= 1 or len(values) < layouts or len(values) % layouts:
        return [values]
    size = len(values) // layouts
    return [values[i : i + size] for i in range(0, len(values), size)]


def t_975(df: int) -> float:
    """Student's t quantile of a two-sided 95% interval with `df` degrees of freedom."""
    return T_975[df - 1] if df <= len(T_975) else Z_95


def next_run_interval(values: Sequence[float], layouts: int = 1) -> tuple[float, float]:
    """The 95% interval the median of a next run of `values` falls in, taken over several
    memory layouts (layout_chunks). Rounds within one layout share where its buffers
    landed; a next run is built elsewhere, later, on a host whose speed has moved since.
    Back-to-back runs measured this: their medians moved about as far as one layout's
    median moves within a run (the layouts of one run share its stretch of the host's
    time), not the 1/sqrt(L) of that a mean of L independent layouts would. So the next
    run's median is one more draw of a layout's, and the interval is the prediction
    interval of one new draw: on the log scale of the layout medians m_1..m_L, with
    standard deviation s, +- t(L - 1) s sqrt(1 + 1/L). The within-run bootstrap interval
    of the median, widened by sqrt(2) (this run's median and the next are both drawn),
    is its least width. With one layout, nothing shows how far layouts move: the
    bootstrap interval of the median."""
    chunks = layout_chunks(values, layouts)
    lo, hi = bootstrap_interval(values)
    center = median(values)
    if len(chunks) == 1 or min(values) <= 0:
        return lo, hi
    logs = [math.log(median(c)) for c in chunks]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    between = t_975(len(logs) - 1) * sd * math.sqrt(1 + 1 / len(logs))
    below = max(between, math.sqrt(2) * math.log(center / lo))
    above = max(between, math.sqrt(2) * math.log(hi / center))
    return center * math.exp(-below), center * math.exp(above)


def layout_modes(values: Sequence[float], layouts: int) -> tuple[list[float], list[float]] | None:
    """The layout medians split in two modes, low and high, when the layouts fall into two
    groups of MODE_LAYOUTS or more: at the widest gap between their sorted medians that
    leaves as many on each side, a ratio over MODE_GAP and over twice the spread of
    either group; None otherwise."""
    medians = sorted(median(c) for c in layout_chunks(values, layouts))
    gaps = range(MODE_LAYOUTS, len(medians) - MODE_LAYOUTS + 1)
    if not gaps or medians[0] <= 0:
        return None
    at = max(gaps, key=lambda i: medians[i] / medians[i - 1])
    low, high = medians[:at], medians[at:]
    gap = medians[at] / medians[at - 1]
    spread = max(low[-1] / low[0], high[-1] / high[0])
    if gap < MODE_GAP or math.log(gap) < 2 * math.log(spread):
        return None
    return low, high


class Summary(NamedTuple):
    """The median and quartiles a record states (p25, p75: None where it has none)."""

    median: float
    p25: float | None = None
    p75: float | None = None


@dataclass
class Measurement:
    """A timed number: its raw samples (in ms, each the mean of `calls_per_sample`
    consecutive calls; unitless for a ratio of two timings), why sampling stopped, and
    their robust summary: the median, p25..p75, and the 95% interval of the median.

    The summary follows from the samples, unless the measurement was read back from a
    record (`of_record`), which states its own: a record may carry a median without
    samples (a CSV), or quartiles without samples."""

    samples_ms: list[float]
    stop_reason: str = FIXED
    calls_per_sample: int = 1
    recorded: Summary | None = None
    #: The memory layouts the samples were taken over, one after another (layout_chunks).
    layouts: int = 1

    @classmethod
    def of_samples(cls, samples: Sequence[float]) -> Measurement:
        """The measurement of these samples, its summary taken from them."""
        return cls(list(samples))

    @classmethod
    def of_record(
        cls, record: Mapping[str, Any], metric: str, roles: Mapping[str, str]
    ) -> Measurement:
        """The sampled metric `metric` (a gated timing or ratio) of a record, with the
        statistics it carries: `roles` maps each role ('p25', 'p75', 'samples') to its
        field, as records.gated_timing gives them."""
        samples = record.get(roles.get("samples", "")) or []
        stated = Summary(
            record[metric], record.get(roles.get("p25", "")), record.get(roles.get("p75", ""))
        )
        return cls(list(samples), recorded=stated, layouts=record.get("layouts") or 1)

    @property
    def median_ms(self) -> float:
        return self.recorded.median if self.recorded is not None else median(self.samples_ms)

    @property
    def p25_ms(self) -> float | None:
        return self.recorded.p25 if self.recorded is not None else percentile(self.samples_ms, 25)

    @property
    def p75_ms(self) -> float | None:
        return self.recorded.p75 if self.recorded is not None else percentile(self.samples_ms, 75)

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms  # type: ignore[operator]

    @property
    def rel_iqr(self) -> float:
        """(p75 - p25) / median, from the stated quartiles or else the samples; 0 when
        neither is known (the spread then cannot widen the gate's threshold)."""
        p25, p75 = self.p25_ms, self.p75_ms
        if (p25 is None or p75 is None) and self.samples_ms:
            p25, p75 = percentile(self.samples_ms, 25), percentile(self.samples_ms, 75)
        if p25 is None or p75 is None:
            return 0.0
        return (p75 - p25) / self.median_ms

    @property
    def noisy(self) -> bool:
        return self.iqr_ms > NOISY_IQR_FRACTION * self.median_ms

    @property
    def spread_known(self) -> bool:
        """Enough samples to judge their spread (MIN_SPREAD_SAMPLES)."""
        return len(self.samples_ms) >= MIN_SPREAD_SAMPLES

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% interval of the median: over several memory layouts, the one the next
        run's median falls in (next_run_interval); over one, from the samples' order
        statistics."""
        if len(layout_chunks(self.samples_ms, self.layouts)) > 1:
            return next_run_interval(self.samples_ms, self.layouts)
        return median_interval(self.samples_ms)

    @property
    def modes(self) -> tuple[list[float], list[float]] | None:
        """The layouts' medians in two modes, when they fall into two (layout_modes)."""
        return layout_modes(self.samples_ms, self.layouts)

    @property
    def ci_rel(self) -> float:
        """Half-width of the 95% interval of the median, relative to the median (its
        larger side)."""
        return relative_half_width(self.median_ms, *self.interval)


def in_run_ratio(measurements: Sequence[Measurement]) -> Measurement:
    """The first measurement over the sum of the others, sample by sample (the samples
    of one round of `Timer.sample_interleaved`): a ratio measurement, unitless."""
    first, *rest = measurements
    ratios = [
        sample / sum(others)
        for sample, *others in zip(first.samples_ms, *(m.samples_ms for m in rest), strict=True)
    ]
    return Measurement(ratios, first.stop_reason, first.calls_per_sample, layouts=first.layouts)
