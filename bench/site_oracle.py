"""The adaptive arm of ``bench/site.py`` against hindsight: how fast its variational jobs
could have got their answers within the idle budget, and what its rule would have done
at other time weights.

From each later step of an adaptive loop as the site day recorded it (``JobRow``, a row
of ``site_*_jobs.csv``): the vendor wait V of its task (the plan, at the end of the step
before, -> the task's end), its N nodes, and the wait C for its nodes (entering the
queue -> allocation; for a step whose iteration ran in place, which never queued, the
plan's forecast). Per step there are two choices in hindsight:

- keep the nodes through the wait: N x V of idle, no delay;
- give them back, the next step entering the queue at the best moment: no idle, the
  result waits max(0, C - V) for nodes.

A loop's time to result is what it was, less the delays its results had, plus those of
the choices. ``frontier`` is every loop's Pareto set of (idle, time) over its steps'
choices; ``best_percentile`` the smallest median or p95 over the loops that a budget of
idle buys (exact: the percentile is one or two order statistics, and for each pair of
thresholds the cheapest loops to bring under them are picked), ``idle_for`` the least
idle that brings it under a target. The budget is the targets' (issue 33): later-task
idle at most 5 % of the in-job loop's (gated-done), against whose median and p95 (+2 %,
+5 %) the times are held.

``replay`` puts ``step_plan.plan_step`` at another time weight on the recorded
forecasts (the wait for nodes at the day's weight's quantile: a higher weight forecasts at a
higher quantile, which the day did not record) or on the observed wait for nodes (a
perfect forecast of the queue), and estimates each step's outcome: a keep holds up to
its bound (the result within it: in place; else it gives up and queues then), a release
early or a give-back that the day also did keeps its recorded delay, one it did not
waits C less the lead (early) or C (give-back). Estimates, all: a kept step changes the
queue every other job saw, and a step released at another moment meets another queue.
The planning step's time limit, which can cap a hold, and the plan's time are in the
CSV since ``plan_s`` and ``plan_limit_s``; in an older one the plan's time is the
step's submit (just after it), and a limit is inferred where the day shows it bound: a
step the rule at the day's weight would keep but the day did not had no room for the
hold (``no_room``). At the day's weight the replay gives the day's plans and figures
back (its ``same`` column). Loops a step's exception ended are left out, as the site's
summary leaves them out.

    python bench/site_oracle.py bench/results/site_adaptive_jobs.csv

reads the arms' CSV beside it (``site_adaptive.csv``: gated-done's median, p95 and
later-task idle) and prints the oracle and the weight sweep per seed and share, and per
loop what it had and could have had. ``bench/site.py`` prints the same for its runs.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib import percentile, read_rows, revision, verdict

from flux_quantum.timing.node_wait import NodeWait
from flux_quantum.timing.step_plan import (
    LIMIT_MARGIN,
    StepAction,
    StepFacts,
    StepPlan,
    VendorForecast,
    lead_quantile,
    plan_step,
)

# The targets, adaptive against gated-done (issue 33): time to result median and p95 at
# most this much longer, later-task idle at most this share of gated-done's.
MEDIAN_SLOWER = 0.02
P95_SLOWER = 0.05
IDLE_SHARE = 0.05
WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
REPO = Path(__file__).resolve().parent.parent
# The weight a plan was made at where the CSV does not say: the committed day's.
RECORDED_WEIGHT = 0.25


@dataclass(frozen=True)
class JobRow:
    """One row of ``site_*_jobs.csv``: a job (or a chain's step) of one arm; times in
    the day's seconds, None where it never happened."""

    share: float
    arm: str
    index: int
    step: int
    kind: str
    pattern: str
    device: str
    nodes: int
    runtime_s: float
    submit_s: float | None
    alloc_s: float | None
    start_s: float | None
    finish_s: float | None
    idle_s: float
    result_s: float | None
    exception: str
    app_calls: int
    task_created_s: float | None
    task_front_s: float | None
    task_started_s: float | None
    task_ended_s: float | None
    release_why: str
    release_s: float | None
    seed: int
    plan: str
    plan_node_wait_s: float | None
    plan_vendor_wait_s: float | None
    held_s: float | None
    hold: str
    ran_in: str
    # Since the committed site_adaptive day: when the plan was made, the planning step's
    # time limit (the day's seconds) and the weight it planned by; older CSVs have none.
    plan_s: float | None = None
    plan_limit_s: float | None = None
    plan_weight: float | None = None


@dataclass(frozen=True)
class Step:
    """A later step of a loop, as the day had it (the day's seconds): its task's wait
    from the plan, its wait for nodes (``queued``: observed; else the plan's forecast),
    the plan's action and forecasts, the idle (node-seconds) and the delay its result
    had, one iteration's work and the loop's quickest turnaround before it."""

    k: int
    nodes: int
    vendor_wait: float
    node_wait: float
    queued: bool
    action: StepAction
    idle: float = 0.0
    delay: float = 0.0
    node_forecast: float | None = None
    vendor_forecast: float | None = None
    work: float = 0.0
    turnaround: float = 0.0
    time_left: float | None = None  # in the planning step's limit (None: not recorded)
    weight: float = RECORDED_WEIGHT  # the day's: what its plan and forecasts were made at

    @property
    def keep_idle(self) -> float:
        """Node-seconds keeping the nodes through the vendor wait costs."""
        return self.nodes * max(0.0, self.vendor_wait)

    @property
    def best_delay(self) -> float:
        """Seconds the result waits for nodes released at the best moment."""
        return max(0.0, self.node_wait - self.vendor_wait)


@dataclass(frozen=True)
class Loop:
    """A variational job of the adaptive arm: its time to result as run (first step's
    submit -> the last work's end) and its later steps."""

    index: int
    device: str
    nodes: int
    done: float
    steps: tuple[Step, ...]
    first_wait: float = 0.0  # the first step's submit -> allocation

    @property
    def base(self) -> float:
        """Its time to result with no result waiting for nodes."""
        return self.done - sum(s.delay for s in self.steps)


@dataclass(frozen=True)
class InJob:
    """What the targets hold the adaptive arm against (gated-done's): variational time
    to result median and p95 (s), later-task idle (node-seconds)."""

    median: float
    p95: float
    later_idle: float

    @property
    def budget(self) -> float:
        return IDLE_SHARE * self.later_idle

    def median_max(self) -> float:
        return (1 + MEDIAN_SLOWER) * self.median

    def p95_max(self) -> float:
        return (1 + P95_SLOWER) * self.p95


# --- from the day's rows ----------------------------------------------------------------------


def loops_of(rows: Iterable[JobRow]) -> list[Loop]:
    """The variational loops of one adaptive arm run (one seed, one share) that got their
    answer (as ``site.summarize`` counts them: no step ended by an exception)."""
    by_index: dict[int, list[JobRow]] = defaultdict(list)
    for r in rows:
        if r.pattern == "variational" and r.step > 0:
            by_index[r.index].append(r)
    out = []
    for index, steps in sorted(by_index.items()):
        steps.sort(key=lambda r: r.step)
        ran = [r for r in steps if not r.ran_in]
        if any(r.exception for r in ran) or steps[0].submit_s is None:
            continue
        last = ran[-1]
        if last.finish_s is None or last.result_s is None:
            continue
        later = []
        fastest = math.inf  # the loop's quickest release -> running so far
        for r in steps:
            # Into the queue: at its release, or when the step keeping its nodes for it
            # (its dependency) gave up, when later.
            entered = r.release_s
            host = _host(ran, r.step)
            if entered is not None and r.plan == "keep" and host and host.finish_s is not None:
                entered = max(entered, host.finish_s)
            if r.step > 1 and r.plan:
                quickest = 0.0 if math.isinf(fastest) else fastest
                later.append(_step(r, host, entered, quickest, len(steps)))
            if entered is not None and r.start_s is not None:
                fastest = min(fastest, max(0.0, r.start_s - entered))
        if any(s is None for s in later):
            continue
        first = steps[0]
        assert first.submit_s is not None
        done = last.finish_s - first.submit_s
        waited = (first.alloc_s or first.submit_s) - first.submit_s
        kept = tuple(s for s in later if s)
        out.append(Loop(index, first.device, first.nodes, done, kept, waited))
    return out


def _host(ran: list[JobRow], k: int) -> JobRow | None:
    """The step that planned step ``k``: the last one before it that had nodes."""
    before = [r for r in ran if r.step < k and r.alloc_s is not None]
    return before[-1] if before else None


def _step(
    r: JobRow, host: JobRow | None, entered: float | None, turnaround: float, iterations: int
) -> Step | None:
    """Step ``r`` as the day had it (``host``: the step that planned it; ``entered``:
    when it went into the queue); None when its task never ended."""
    if r.task_ended_s is None or r.submit_s is None:
        return None
    planned = r.submit_s if r.plan_s is None else r.plan_s  # submitted right after the plan
    left = None
    if r.plan_limit_s is not None and host is not None and host.start_s is not None:
        left = max(0.0, host.start_s + r.plan_limit_s - planned)
    if r.alloc_s is not None and entered is not None:
        queued, node, delay = True, max(0.0, r.alloc_s - entered), r.alloc_s - r.task_ended_s
    elif r.ran_in:  # ran in place: it never queued; its wait for nodes is the forecast
        queued, node, delay = False, r.plan_node_wait_s or 0.0, 0.0
    else:
        return None
    return Step(
        r.step,
        r.nodes,
        r.task_ended_s - planned,
        node,
        queued,
        StepAction(r.plan),
        idle=r.nodes * (r.held_s or 0.0),
        delay=max(0.0, delay),
        node_forecast=r.plan_node_wait_s,
        vendor_forecast=r.plan_vendor_wait_s,
        work=r.runtime_s / max(1, iterations),
        turnaround=turnaround,
        time_left=left,
        weight=RECORDED_WEIGHT if r.plan_weight is None else r.plan_weight,
    )


# --- the oracle --------------------------------------------------------------------------------


def frontier(loop: Loop) -> list[tuple[float, float]]:
    """The loop's Pareto set of (idle node-seconds, time to result) over its steps'
    hindsight choices, idle ascending, time descending."""
    options = [(0.0, loop.base + sum(s.best_delay for s in loop.steps))]
    for s in loop.steps:
        if s.best_delay <= 0:
            continue  # giving back at the best moment costs nothing
        options += [(idle + s.keep_idle, t - s.best_delay) for idle, t in options]
        options.sort()
        pruned: list[tuple[float, float]] = []
        for idle, t in options:
            if not pruned or t < pruned[-1][1]:
                pruned.append((idle, t))
        options = pruned
    return options


def _cost(options: list[tuple[float, float]], t: float) -> float:
    """The least idle with a time to result <= ``t`` (inf: none)."""
    return next((idle for idle, time in options if time <= t), math.inf)


def _choices(loops: Sequence[Loop], q: float) -> Iterator[tuple[float, float]]:
    """Every (the ``q`` percentile of the loops' times, least idle for it) worth
    looking at: the percentile interpolates order statistics lo and lo + 1 (weight
    ``frac``); for thresholds a <= b it is at most (1 - frac) a + frac b when lo + 1
    loops finish by a and one more by b, and the cheapest such loops are picked."""
    fronts = [frontier(loop) for loop in loops]
    n = len(fronts)
    if not n:
        return
    k = (n - 1) * q
    lo = int(k)
    frac = k - lo if lo + 1 < n else 0.0
    times = sorted({t for f in fronts for _, t in f})
    costs = {t: [_cost(f, t) for f in fronts] for t in times}
    for i, a in enumerate(times):
        at_a = costs[a]
        order = sorted(range(n), key=lambda j: at_a[j])
        if frac == 0.0:
            yield a, sum(at_a[j] for j in order[: lo + 1])
            continue
        # The lo + 1 cheapest by a, leaving out loop e (which then meets b).
        without = [sum(at_a[j] for j in order[: lo + 2] if j != e) for e in range(n)]
        for e in range(n):
            if e not in order[: lo + 2]:
                without[e] = sum(at_a[j] for j in order[: lo + 1])
        for b in times[i:]:
            at_b = costs[b]
            yield (1 - frac) * a + frac * b, min(without[e] + at_b[e] for e in range(n))


def best_percentile(loops: Sequence[Loop], q: float, budget: float) -> tuple[float, float]:
    """The smallest ``q`` percentile of the loops' times to result that ``budget``
    node-seconds of idle buy, and the idle it takes (NaN, 0: no loops)."""
    best = (math.nan, 0.0)
    for value, idle in _choices(loops, q):
        if idle <= budget and (math.isnan(best[0]) or (value, idle) < best):
            best = (value, idle)
    return best


def idle_for(loops: Sequence[Loop], q: float, target: float) -> float:
    """The least idle (node-seconds) that brings the ``q`` percentile to ``target`` or
    under (inf: not even keeping every step does)."""
    return min((idle for value, idle in _choices(loops, q) if value <= target), default=math.inf)


# --- the rule at other weights ---------------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    """The rule at ``weight`` on the recorded steps: its keeps, the idle (node-seconds)
    and the loops' times to result it would have given (estimates), and how many of
    its plans are the day's."""

    weight: float
    keeps: int
    idle: float
    times: tuple[float, ...]
    same: int
    steps: int

    @property
    def median(self) -> float:
        return percentile(self.times, 0.5)

    @property
    def p95(self) -> float:
        return percentile(self.times, 0.95)


def _facts(s: Step, weight: float, forecast: float | None, time_left: float | None) -> StepFacts:
    vendor = VendorForecast(None)
    if s.vendor_forecast is not None:
        vendor = VendorForecast(s.vendor_forecast, "previous task")
    node = NodeWait(forecast, lead_quantile(weight), 1.0)
    return StepFacts(node, vendor, work=s.work, time_left=time_left, turnaround=s.turnaround)


def day_plan(s: Step) -> StepPlan:
    """The plan the rule makes on the day's facts at the day's weight."""
    return plan_step(_facts(s, s.weight, s.node_forecast, s.time_left), s.weight)


def no_room(s: Step) -> float | None:
    """The time left in the planning step's limit: as recorded, else as far as the day
    shows it: where the rule at the day's weight would keep but the day's plan did not,
    the limit left no room for the hold (less than the forecast vendor wait); else
    None (no limit)."""
    if s.time_left is not None:
        return s.time_left
    if s.action is StepAction.KEEP or day_plan(s).action is not StepAction.KEEP:
        return None
    return s.work + LIMIT_MARGIN * 0.99 * (s.vendor_forecast or 0.0)


def outcome(s: Step, plan: StepPlan, forecast: float | None) -> tuple[float, float]:
    """The idle (node-seconds) and delay (s) of ``plan`` for step ``s``, estimated: what
    the day had where it did the same (a keep with no longer a bound), else a keep
    holds until its result or its bound, a release early leads by the forecast and a
    give-back queues at the result."""
    if plan.action is StepAction.KEEP:
        if s.action is StepAction.KEEP and plan.bound <= day_plan(s).bound:
            return s.idle, s.delay
        if s.vendor_wait <= plan.bound:
            return s.keep_idle, 0.0
        late = max(0.0, s.node_wait - (s.vendor_wait - plan.bound))  # gave up, queued then
        return s.nodes * plan.bound, late
    if plan.action is s.action:
        return s.idle, s.delay
    if plan.action is StepAction.EARLY:
        return 0.0, max(0.0, s.node_wait - min(s.vendor_wait, forecast or 0.0))
    return 0.0, s.node_wait


def replay(loops: Sequence[Loop], weight: float, observed: bool = False) -> Replay:
    """``plan_step`` at ``weight`` on every recorded step (``observed``: with the wait
    for nodes the step had as the forecast), and the outcome estimated (``outcome``)."""
    keeps = same = steps = 0
    idle = 0.0
    times = []
    for loop in loops:
        delay = 0.0
        for s in loop.steps:
            forecast = s.node_wait if observed else s.node_forecast
            plan = plan_step(_facts(s, weight, forecast, no_room(s)), weight)
            steps += 1
            same += plan.action is s.action
            keeps += plan.action is StepAction.KEEP
            held, late = outcome(s, plan, forecast)
            idle += held
            delay += late
        times.append(loop.base + delay)
    return Replay(weight, keeps, idle, tuple(times), same, steps)


# --- the report ------------------------------------------------------------------------------


def hours(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds / 3600:.2f}h"


def node_hours(node_seconds: float) -> str:
    return "inf" if math.isinf(node_seconds) else f"{node_seconds / 3600:.1f}"


@dataclass(frozen=True)
class Verdicts:
    """One run (seed, share) of the adaptive arm: gated-done's figures, the arm's as run
    (median, p95, idle), the oracle's within the budget and with no wait at all
    (median, p95), and the sweeps."""

    seed: int
    share: float
    injob: InJob
    as_run: tuple[float, float, float]
    oracle: tuple[float, float]
    floor: tuple[float, float]  # no result waiting for nodes: median, p95
    sweep: tuple[Replay, ...]  # the rule replayed at WEIGHTS on the recorded forecasts
    perfect: tuple[Replay, ...]  # on the observed waits for nodes


def _pct(value: float, base: float) -> str:
    return f"{value / base - 1:+.0%}" if base > 0 and not math.isnan(value) else "-"


def run_lines(
    seed: int,
    share: float,
    loops: Sequence[Loop],
    injob: InJob,
    paired: dict[int, InJobLoop],
    detail: bool = False,
) -> tuple[list[str], Verdicts]:
    """The oracle and the weight sweep for one run of the adaptive arm; ``paired``:
    gated-done's time to result per loop (trace index) of the same run."""
    steps = [s for loop in loops for s in loop.steps]
    queued = sum(s.queued for s in steps)
    budget = injob.budget
    times = [loop.done for loop in loops]
    run_idle = sum(s.idle for s in steps)
    best = [loop.base + sum(s.best_delay for s in loop.steps) for loop in loops]
    floor = [loop.base for loop in loops]
    med, med_idle = best_percentile(loops, 0.5, budget)
    p95, p95_idle = best_percentile(loops, 0.95, budget)
    need_med = idle_for(loops, 0.5, injob.median_max())
    need_p95 = idle_for(loops, 0.95, injob.p95_max())
    lines = [
        f"seed {seed}, share {share:.0%}: {len(loops)} variational loops with their answer, "
        f"{len(steps)} later steps ({queued} queued, {len(steps) - queued} in place)",
        f"  gated-done: median {hours(injob.median)}, p95 {hours(injob.p95)}, later idle "
        f"{node_hours(injob.later_idle)} node-h; targets median <= {hours(injob.median_max())}, "
        f"p95 <= {hours(injob.p95_max())}, idle <= {node_hours(budget)} node-h",
        f"  as run (w {_weights(steps)}): median {hours(percentile(times, 0.5))}, p95 "
        f"{hours(percentile(times, 0.95))}, idle {node_hours(run_idle)} node-h, results "
        f"waiting for nodes {hours(sum(s.delay for s in steps))}",
        f"  every step given back at its best moment (idle 0): median "
        f"{hours(percentile(best, 0.5))}, p95 {hours(percentile(best, 0.95))}; no result "
        f"waiting at all: median {hours(percentile(floor, 0.5))}, p95 "
        f"{hours(percentile(floor, 0.95))}",
        f"  oracle within {node_hours(budget)} node-h: median {hours(med)} "
        f"({verdict(med <= injob.median_max())}, {node_hours(med_idle)} node-h), p95 "
        f"{hours(p95)} ({verdict(p95 <= injob.p95_max())}, {node_hours(p95_idle)} node-h)",
        f"  oracle's idle to meet the median target {node_hours(need_med)} node-h"
        f"{_share(need_med, injob)}, the p95 target {node_hours(need_p95)} node-h"
        f"{_share(need_p95, injob)}",
    ]
    both = [loop for loop in loops if loop.index in paired]
    if both:
        gd = [paired[loop.index].done for loop in both]
        gd_med, gd_p95 = percentile(gd, 0.5), percentile(gd, 0.95)
        pm, _ = best_percentile(both, 0.5, budget)
        pp, _ = best_percentile(both, 0.95, budget)
        gap = sum(loop.base - paired[loop.index].done for loop in both)
        first = sum(loop.first_wait - paired[loop.index].first_wait for loop in both)
        lines.append(
            f"  paired, the {len(both)} loops with an answer in both arms: gated-done median "
            f"{hours(gd_med)}, p95 {hours(gd_p95)}; oracle within the budget median "
            f"{hours(pm)} ({_pct(pm, gd_med)}), p95 {hours(pp)} ({_pct(pp, gd_p95)})"
        )
        lines.append(
            f"    with no result waiting at all the loops take {gap / 3600:+.2f} h in all "
            f"against gated-done, {first / 3600:+.2f} h of it the first step's wait for nodes"
        )
    sweeps: dict[bool, list[Replay]] = {False: [], True: []}
    for observed in (False, True):
        source = "observed waits for nodes" if observed else "recorded forecasts"
        lines.append(f"  the rule replayed on the {source} (estimates):")
        lines.append(
            f"    {'w':>5} {'keeps':>5} {'same':>6} {'idle':>7} {'median':>7} {'p95':>7}  targets"
        )
        for w in WEIGHTS:
            r = replay(loops, w, observed)
            sweeps[observed].append(r)
            ok = (r.median <= injob.median_max(), r.p95 <= injob.p95_max(), r.idle <= budget)
            lines.append(
                f"    {w:>5g} {r.keeps:>5} {r.same:>3}/{r.steps:<2} {node_hours(r.idle):>7} "
                f"{hours(r.median):>7} {hours(r.p95):>7}  "
                f"median {verdict(ok[0])}, p95 {verdict(ok[1])}, idle {verdict(ok[2])}"
            )
    if detail:
        lines.append(
            "  per loop: index device nodes | gated-done | as run, of it waiting for nodes | "
            "given back at the best moment | every step kept (its idle)"
        )
        for loop, b in zip(loops, best, strict=True):
            gd_done = paired[loop.index].done if loop.index in paired else math.nan
            lines.append(
                f"    {loop.index:>5} {loop.device:<7} {loop.nodes:>4} | {hours(gd_done):>7} | "
                f"{hours(loop.done):>7} {hours(sum(s.delay for s in loop.steps)):>7} | "
                f"{hours(b):>7} | {hours(loop.base):>7} "
                f"({node_hours(sum(s.keep_idle for s in loop.steps))} node-h)"
            )
    as_run = (percentile(times, 0.5), percentile(times, 0.95), run_idle)
    no_wait = (percentile(floor, 0.5), percentile(floor, 0.95))
    return lines, Verdicts(
        seed, share, injob, as_run, (med, p95), no_wait, tuple(sweeps[False]), tuple(sweeps[True])
    )


def _weights(steps: Iterable[Step]) -> str:
    return ", ".join(f"{w:g}" for w in sorted({s.weight for s in steps})) or "-"


def _share(idle: float, injob: InJob) -> str:
    if math.isinf(idle) or injob.later_idle <= 0:
        return " (not even keeping every step)" if math.isinf(idle) else ""
    return f" ({idle / injob.later_idle:.0%} of gated-done's)"


def seeds_lines(runs: Sequence[Verdicts]) -> list[str]:
    """Across seeds, per share: the medians of the seeds' figures (the targets hold
    them): gated-done, the target, the arm as run, the oracle; the rule replayed."""
    n = len({v.seed for v in runs})

    def mid(values: Iterable[float]) -> float:
        return statistics.median(values)

    lines = [
        f"across the {n} seeds: medians of the seeds' figures (the targets hold these); oracle: "
        "within the idle budget;",
        "  no wait: no result waiting for nodes, whatever the idle",
        f"  {'share':>5} {'':<12} {'gated-done':>10} {'target':>7} {'as run':>7} {'oracle':>7}"
        f" {'no wait':>7}",
    ]
    table = [
        "the rule replayed at each weight (estimates), medians of the seeds: on the recorded "
        "forecasts | on",
        "  the observed waits for nodes (a perfect forecast of the queue)",
        f"  {'share':>5} {'':<12}"
        + "".join(f" {'w ' + format(w, 'g'):>7}" for w in WEIGHTS)
        + " |"
        + "".join(f" {'w ' + format(w, 'g'):>7}" for w in WEIGHTS),
    ]
    for share in sorted({v.share for v in runs}):
        mine = [v for v in runs if v.share == share]
        gd = InJob(
            mid(v.injob.median for v in mine),
            mid(v.injob.p95 for v in mine),
            mid(v.injob.later_idle for v in mine),
        )
        rows = (
            ("median", gd.median, gd.median_max(), 0, lambda r: r.median, hours),
            ("p95", gd.p95, gd.p95_max(), 1, lambda r: r.p95, hours),
            ("idle node-h", gd.later_idle, gd.budget, 2, lambda r: r.idle, node_hours),
        )
        for i, (what, base, most, k, of, show) in enumerate(rows):
            label = f"  {f'{share:.0%}' if i == 0 else '':>5} {what:<12}"
            if k < 2:
                cells = f"{show(mid(v.oracle[k] for v in mine)):>7} {show(mid(v.floor[k] for v in mine)):>7}"
            else:
                cells = f"{'0-' + show(most):>7} {'any':>7}"
            lines.append(
                f"{label} {show(base):>10} {show(most):>7} "
                f"{show(mid(v.as_run[k] for v in mine)):>7} {cells}"
            )
            recorded = "".join(
                f" {show(mid(of(v.sweep[j]) for v in mine)):>7}" for j in range(len(WEIGHTS))
            )
            perfect = "".join(
                f" {show(mid(of(v.perfect[j]) for v in mine)):>7}" for j in range(len(WEIGHTS))
            )
            table.append(f"{label}{recorded} |{perfect}")
    return [*lines, "", *table]


@dataclass(frozen=True)
class InJobLoop:
    """A variational job of gated-done: its time to result and its wait for nodes."""

    done: float
    first_wait: float


def in_job_done(rows: Iterable[JobRow]) -> dict[tuple[int, float], dict[int, InJobLoop]]:
    """gated-done's variational jobs per (seed, share), by trace index: submit ->
    finish and submit -> allocation, for those with no exception."""
    out: dict[tuple[int, float], dict[int, InJobLoop]] = defaultdict(dict)
    for r in rows:
        if r.arm != "gated-done" or r.pattern != "variational" or r.exception:
            continue
        if None not in (r.submit_s, r.alloc_s, r.finish_s, r.result_s):
            assert r.submit_s is not None and r.alloc_s is not None and r.finish_s is not None
            done = r.finish_s - r.submit_s
            out[(r.seed, r.share)][r.index] = InJobLoop(done, r.alloc_s - r.submit_s)
    return out


def report_lines(
    rows: Sequence[JobRow], injob: dict[tuple[int, float], InJob], detail: bool = False
) -> list[str]:
    """The oracle and the sweep for every (seed, share) with an adaptive arm and a
    gated-done one to hold it against (``injob``: its figures; its rows in ``rows``
    give the paired view)."""
    by_run: dict[tuple[int, float], list[JobRow]] = defaultdict(list)
    for r in rows:
        if r.arm == "adaptive":
            by_run[(r.seed, r.share)].append(r)
    paired = in_job_done(rows)
    lines = [
        "hindsight (bench/site_oracle.py): per later step, keep the nodes (nodes x vendor "
        "wait of idle)",
        "  or give them back at the best moment (max(0, node wait - vendor wait) of delay); the "
        "oracle",
        f"  picks per step, within later-task idle <= {IDLE_SHARE:.0%} of gated-done's; the "
        "rule replayed at other weights",
    ]
    verdicts = []
    for key in sorted(by_run):
        if key not in injob:
            lines.append(f"seed {key[0]}, share {key[1]:.0%}: no gated-done arm to hold it against")
            continue
        loops = loops_of(by_run[key])
        text, v = run_lines(*key, loops, injob[key], paired.get(key, {}), detail)
        lines += ["", *text]
        verdicts.append(v)
    if verdicts:
        lines += ["", *seeds_lines(verdicts)]
    return lines


def injob_of(path: Path) -> dict[tuple[int, float], InJob]:
    """gated-done's figures per (seed, share) from a site run's arms CSV."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["arm"] == "gated-done":
                out[(int(row["seed"]), float(row["share"]))] = InJob(
                    float(row["var_done_median_s"]),
                    float(row["var_done_p95_s"]),
                    float(row["idle_later_node_h"]) * 3600.0,
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", type=Path, help="a site run's jobs CSV (site_*_jobs.csv)")
    parser.add_argument(
        "--arms", type=Path, help="its arms CSV (default: the jobs CSV's name without _jobs)"
    )
    parser.add_argument("--out", type=Path, help="also write the text here")
    args = parser.parse_args(argv)
    arms = args.arms or args.jobs.with_name(args.jobs.name.replace("_jobs", ""))
    rows = read_rows(args.jobs, JobRow)
    with open(arms, newline="") as f:
        made = sorted({row.get("commit", "?") for row in csv.DictReader(f)})
    head = [
        f"command: python bench/site_oracle.py {' '.join(argv or sys.argv[1:])}",
        f"commit: {revision(REPO, ('bench',))}; data: {args.jobs} and {arms}, made at "
        f"{', '.join(made)}",
        "",
    ]
    text = "\n".join(head + report_lines(rows, injob_of(arms), detail=True))
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
