"""A site's day of jobs: the Lublin-Feitelson batch workload model and the hybrid share.

The classical jobs follow U. Lublin and D. G. Feitelson, "The workload on parallel
supercomputers: modeling the characteristics of rigid jobs", J. Parallel Distrib.
Comput. 63(11), 2003, with the model's *batch* parameters as its authors published
them (their reference program, ``m_lublin99.c``):

- size: serial with probability 0.2927; else ``2**x`` nodes, ``x`` from a two-stage
  uniform (``[ulow, umed]`` with probability 0.875, else ``[umed, uhi]``), rounded to a
  power of two with probability 0.6686; ``ulow = 1.2``, ``uhi = log2(machine)``,
  ``umed = uhi - 2`` (the model's 5 and 7 for its 128-node machine);
- run time: ``exp(g)`` seconds, ``g`` hyper-gamma: gamma(6.57, 0.823) with probability
  ``p = -0.003 * nodes + 0.6986`` (clipped to [0, 1]), else gamma(639.1, 0.0156), drawn
  again above 12 (about 45 hours);
- arrivals: inter-arrival ``exp(g)`` seconds at rush hour, ``g`` gamma(6.0415 x 1.0519,
  0.8531), spread over the day by 48 half-hour weights from the gamma(6.1271, 5.2740)
  density (the day starting at bucket 11, as in the model), drawn again above 13.

Only the arrival *rate* is scaled (every inter-arrival divided by one factor, found by
bisection), so that the day's arrivals offer the machine a chosen load within the day
(``offered_load``); sizes, run times and the daily cycle are the model's. Time limits are not in the model: each job asks for the
smallest of the round values users pick (5 min ... 48 h) at or above its run time times
a uniform factor in [1, 3], after D. Tsafrir, Y. Etsion and D. G. Feitelson, "Modeling
user runtime estimates", JSSPP 2005 (estimates are a few popular values, mostly far
above the run time).

A share of the day's jobs (not the backlog) is hybrid: each job draws one uniform
number, and is hybrid when it is below the share, so the 5 % jobs are among the 20 %
ones. A hybrid job keeps its arrival and run time (its classical part), at most
``HYBRID_MAX_NODES`` nodes, and gets a pattern, a device and shots from its own seeded
stream. Everything here is a pure function of the seed: no clock, no I/O, no Flux.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

DAY = 86400.0
BUCKETS = 48
BUCKET_SECONDS = DAY / BUCKETS
CYCLIC_DAY_START = 11  # the model's first bucket of its day
MAX_LOG_RUNTIME = 12.0
MAX_LOG_INTERARRIVAL = 13.0
# Round values users give as time limits (seconds).
POPULAR_LIMITS = tuple(
    m * 60.0 for m in (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720, 1440, 2880)
)
HYBRID_MAX_NODES = 128
MODEL_NODES = 128  # the machine the model was fitted to (its UHI_BATCH = 7)
PATTERNS = (("single", 0.5), ("fan-out", 0.25), ("variational", 0.25))


@dataclass(frozen=True)
class LublinBatch:
    """The batch parameters of the Lublin-Feitelson model for a machine of ``nodes``."""

    nodes: int
    serial_prob: float = 0.2927
    pow2_prob: float = 0.6686
    ulow: float = 1.2
    uprob: float = 0.875
    a1: float = 6.57
    b1: float = 0.823
    a2: float = 639.1
    b2: float = 0.0156
    pa: float = -0.003
    pb: float = 0.6986
    aarr: float = 6.0415 * 1.0519  # rush-hour inter-arrival shape x ARAR
    barr: float = 0.8531
    anum: float = 6.1271
    bnum: float = 5.2740

    @property
    def uhi(self) -> float:
        return math.log2(self.nodes)

    @property
    def umed(self) -> float:
        return self.uhi - 2.0

    def describe(self) -> str:
        return (
            f"Lublin-Feitelson 2003 batch model: serial {self.serial_prob}, pow2 "
            f"{self.pow2_prob}, log2 size two-stage uniform [{self.ulow}, {self.umed:g}, "
            f"{self.uhi:g}] p={self.uprob}; log run time hyper-gamma ({self.a1}, {self.b1}) / "
            f"({self.a2}, {self.b2}), p = {self.pa} x nodes + {self.pb}; log inter-arrival "
            f"gamma({self.aarr:.4f}, {self.barr}), daily cycle gamma({self.anum}, {self.bnum})"
        )


def _gamma_pdf(x: float, shape: float, scale: float) -> float:
    if x <= 0:
        return 0.0
    return math.exp(
        (shape - 1) * math.log(x) - x / scale - math.lgamma(shape) - shape * math.log(scale)
    )


def _gamma_mass(lo: float, hi: float, shape: float, scale: float, steps: int = 64) -> float:
    """The gamma distribution's probability of [lo, hi] (Simpson's rule)."""
    h = (hi - lo) / steps
    total = _gamma_pdf(lo, shape, scale) + _gamma_pdf(hi, shape, scale)
    for k in range(1, steps):
        total += (4 if k % 2 else 2) * _gamma_pdf(lo + k * h, shape, scale)
    return total * h / 3


def day_weights(model: LublinBatch) -> list[float]:
    """The share of arrivals in each half hour (mean 1), the model's daily cycle."""
    weights = [0.0] * BUCKETS
    for i in range(CYCLIC_DAY_START, BUCKETS + CYCLIC_DAY_START):
        weights[(i - 1) % BUCKETS] = _gamma_mass(i - 0.5, i + 0.5, model.anum, model.bnum)
    mean = sum(weights) / BUCKETS
    return [w / mean for w in weights]


class Arrivals:
    """The model's arrival process: rush-hour inter-arrivals paid out in 'points' over
    the half-hour buckets in proportion to their weights; ``rate`` > 1 makes every
    inter-arrival that many times shorter. Starts at ``start`` seconds after midnight."""

    def __init__(
        self, model: LublinBatch, rng: random.Random, rate: float = 1.0, start: float = 0.0
    ) -> None:
        self.model, self.rng, self.rate = model, rng, rate
        self.weights = day_weights(model)
        self.t = start
        self.bucket = int(start // BUCKET_SECONDS) % BUCKETS
        self.points = 0.0
        self.remainder = 0.0

    def __iter__(self) -> Iterator[float]:
        return self

    def __next__(self) -> float:
        while True:
            g = self.rng.gammavariate(self.model.aarr, self.model.barr)
            if g <= MAX_LOG_INTERARRIVAL:
                break
        self.points += math.exp(g) / self.rate / BUCKET_SECONDS
        gap = 0.0
        while self.points > self.weights[self.bucket]:
            self.points -= self.weights[self.bucket]
            self.bucket = (self.bucket + 1) % BUCKETS
            gap += BUCKET_SECONDS
        remainder = self.points / self.weights[self.bucket]
        gap += BUCKET_SECONDS * (remainder - self.remainder)
        self.remainder = remainder
        self.t += gap
        return self.t


def job_size(model: LublinBatch, rng: random.Random) -> int:
    u = rng.random()
    if u <= model.serial_prob:
        return 1
    low, high = (model.ulow, model.umed) if rng.random() <= model.uprob else (model.umed, model.uhi)
    x = rng.uniform(low, high)
    if u <= model.serial_prob + model.pow2_prob:
        x = float(int(x + 0.5))
    return max(1, min(model.nodes, int(2**x + 0.5)))


def run_time(model: LublinBatch, nodes: int, rng: random.Random) -> float:
    p = min(1.0, max(0.0, model.pa * nodes + model.pb))
    while True:
        first = rng.random() <= p
        g = rng.gammavariate(model.a1, model.b1) if first else rng.gammavariate(model.a2, model.b2)
        if g <= MAX_LOG_RUNTIME:
            return max(1.0, math.exp(g))


def time_limit(runtime: float, rng: random.Random) -> float:
    wanted = runtime * rng.uniform(1.0, 3.0)
    k = bisect.bisect_left(POPULAR_LIMITS, wanted)
    return POPULAR_LIMITS[k] if k < len(POPULAR_LIMITS) else max(wanted, POPULAR_LIMITS[-1])


@dataclass(frozen=True)
class Hybrid:
    """The quantum part of a hybrid job: the same for every arm."""

    pattern: str  # single, fan-out, variational
    device: str
    shots: int
    iterations: int = 1  # variational: tasks in a row (the first one before the job runs)
    group: int = 1  # fan-out: jobs sharing the one task


@dataclass(frozen=True)
class TraceJob:
    """One submission: ``submit`` in seconds from the start of the measured day
    (negative: the backlog, submitted at 0), ``runtime`` the classical work."""

    index: int
    submit: float
    nodes: int
    runtime: float
    limit: float
    share_draw: float
    hybrid: Hybrid | None = None
    member: int = 0  # fan-out: which member of its group

    @property
    def backlog(self) -> bool:
        return self.submit < 0


@dataclass(frozen=True)
class Trace:
    jobs: tuple[TraceJob, ...]
    nodes: int
    day: float
    rate: float
    offered_load: float
    model: LublinBatch
    devices: tuple[tuple[str, float], ...] = field(default=())

    @property
    def hybrid_jobs(self) -> list[TraceJob]:
        return [j for j in self.jobs if j.hybrid is not None]


def _draw_jobs(
    model: LublinBatch,
    streams: int,
    seed: int,
    rate: float,
    start: float,
    backlog: float,
    day: float,
) -> list[tuple[float, int, float, float, float]]:
    """(submit, nodes, runtime, limit, share draw) for arrivals in [-backlog, day), the
    ``streams`` arrival processes merged in time order."""
    times: list[float] = []
    for k in range(streams):
        arrivals = Arrivals(model, random.Random(f"{seed}:arrivals:{k}"), rate, start - backlog)
        for t in arrivals:
            if t - start >= day:
                break
            times.append(t - start)
    times.sort()
    sizes, runs = random.Random(f"{seed}:sizes"), random.Random(f"{seed}:runtimes")
    limits, shares = random.Random(f"{seed}:limits"), random.Random(f"{seed}:share")
    out = []
    for submit in times:
        nodes = job_size(model, sizes)
        runtime = run_time(model, nodes, runs)
        out.append((submit, nodes, runtime, time_limit(runtime, limits), shares.random()))
    return out


def offered_load(
    jobs: Sequence[tuple[float, int, float, float, float]], nodes: int, day: float
) -> float:
    """Node-seconds the day's arrivals ask for within the day (a job's work past the
    day's end not counted) over the machine's node-seconds. Unclipped, one job of
    many hours would count whole on a short day, and the rate that meets a load would
    jump past it."""
    work = sum(n * min(r, day - submit) for submit, n, r, _, _ in jobs if 0 <= submit < day)
    return work / (nodes * day)


def make_trace(
    nodes: int,
    day: float,
    load: float,
    share: float,
    devices: Sequence[tuple[str, float]],
    seed: int = 1,
    start_hour: float = 0.0,
    backlog: float = 2 * 3600.0,
    hybrid_max_nodes: int = HYBRID_MAX_NODES,
) -> Trace:
    """The seeded trace: ordinary jobs at offered ``load`` over ``day`` seconds from
    ``start_hour``, plus the arrivals of the ``backlog`` seconds before (queued at the
    start), of which ``share`` of the day's jobs are hybrid on ``devices`` (name,
    weight)."""
    model = LublinBatch(min(nodes, MODEL_NODES))
    streams = max(1, round(nodes / model.nodes))
    start = start_hour * 3600.0
    lo, hi = 0.05, 50.0
    for _ in range(30):  # bisection on the rate (log scale)
        rate = math.sqrt(lo * hi)
        drawn = _draw_jobs(model, streams, seed, rate, start, backlog, day)
        lo, hi = (rate, hi) if offered_load(drawn, nodes, day) < load else (lo, rate)
    rate = hi
    drawn = _draw_jobs(model, streams, seed, rate, start, backlog, day)
    jobs: list[TraceJob] = []
    for index, (submit, n, runtime, limit, draw) in enumerate(drawn):
        if submit < 0 or draw >= share:
            jobs.append(TraceJob(len(jobs), submit, n, runtime, limit, draw))
            continue
        spec = _hybrid(random.Random(f"{seed}:hybrid:{index}"), devices)
        n = min(n, hybrid_max_nodes)
        if spec.group == 1:
            jobs.append(TraceJob(len(jobs), submit, n, runtime, limit, draw, spec))
            continue
        each = max(1, n // spec.group)
        for member in range(spec.group):
            jobs.append(TraceJob(len(jobs), submit, each, runtime, limit, draw, spec, member))
    return Trace(
        tuple(jobs), nodes, day, rate, offered_load(drawn, nodes, day), model, tuple(devices)
    )


def _hybrid(rng: random.Random, devices: Sequence[tuple[str, float]]) -> Hybrid:
    pattern = rng.choices([p for p, _ in PATTERNS], [w for _, w in PATTERNS])[0]
    device = rng.choices([d for d, _ in devices], [w for _, w in devices])[0]
    shots = 100 * rng.randint(1, 10)
    if pattern == "fan-out":
        return Hybrid(pattern, device, shots, group=rng.randint(2, 4))
    if pattern == "variational":
        return Hybrid(pattern, device, shots, iterations=rng.randint(3, 5))
    return Hybrid(pattern, device, shots)
