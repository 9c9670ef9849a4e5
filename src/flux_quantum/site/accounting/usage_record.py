"""One row of flux-accounting's ``jobs`` table that carries an association's settled QPU
spend as usage: what flux-quantum inserts so that flux-accounting's own update cycle
counts it.

flux-accounting v0.60.0 takes usage from one place only: rows of its ``jobs`` table,
each weighed as ``(nnodes x node_weight + ncores x core_weight + ngpus x gpu_weight) x
(t_inactive - t_run)``. A ``UsageRecord`` is such a row, made to weigh exactly the
spend times ``qpu_weight``: an Rv1 of one node and one core, ``t_run`` and
``t_inactive`` apart by the seconds that weigh that much at the database's weights,
the association's bank and default project (as its jobs get them), and a jobspec that
says what it is (``attributes.system.qpu_usage``: the feed, the
spend, its currency, the tasks and the weight; job name ``qpu-usage``). Its job id is a
valid Flux job id (a FLUID) no instance issues: generator 16383 (only a broker of rank
16383 would), the millisecond the feed was opened, the feed's number.

This module only builds the row; ``UsageFeed`` decides when and writes it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from flux_quantum.site.accounting.database import AccountingError, UsageWeights

GENERATOR = 16383  # the FLUID generator id (14 bits) of every usage record
EPOCH_MS = 1577836800000  # 2020-01-01T00:00:00Z: the records' FLUID timestamps count from it
JOB_NAME = "qpu-usage"
NODELIST = "qpu-usage"
# Times are multiples of 2**-20 s (about a microsecond): t_inactive - t_run is then
# exactly the record's seconds in a double, so flux-accounting computes the usage meant.
STEP = 2.0**-20
DECIMALS = 5  # flux-accounting rounds each job's usage to 5 decimals


def usage_jobid(feed: int, opened: float) -> int:
    """The Flux job id of the record of ledger feed ``feed``, opened at ``opened``
    (epoch seconds): a FLUID whose timestamp is that millisecond since 2020, generator
    16383, and sequence the feed's number modulo 1024 (two feeds of one ledger opened in
    one millisecond differ there; a ledger started anew beside the same database does
    not reuse its predecessor's ids)."""
    stamp = int(opened * 1000) - EPOCH_MS
    if not 0 <= stamp < 2**40:
        raise ValueError(f"a feed opened at {opened} is outside the FLUID's 2020-2054 range")
    return (stamp << 24) | (GENERATOR << 10) | (feed % 1024)


def on_step(t: float) -> float:
    """``t`` down to a multiple of ``STEP``."""
    return math.floor(t / STEP) * STEP


def after(t: float) -> float:
    """The first multiple of ``STEP`` after ``t``."""
    return on_step(t) + STEP


@dataclass(frozen=True)
class UsageRecord:
    """The ``jobs`` row of one feed: ``spend`` (in ``currency``) of ``tasks`` settled
    tasks of ``userid`` in ``bank``, weighed ``weight``, ending at ``at``."""

    feed: int
    userid: int
    user: str | None
    bank: str
    spend: float
    currency: str
    tasks: int
    weight: float
    at: float
    seconds: float
    per_second: float  # the usage of its node and core in one second
    opened: float = 0.0  # when the ledger opened the feed (its job id says it)
    project: str = ""  # the association's default project, as its jobs are given

    @classmethod
    def of(
        cls,
        *,
        feed: int,
        userid: int,
        user: str | None,
        bank: str,
        spend: float,
        currency: str,
        tasks: int,
        weight: float,
        at: float,
        weights: UsageWeights,
        opened: float = 0.0,
        project: str = "",
    ) -> UsageRecord:
        """The record that makes ``spend x weight`` usage at ``weights``, ending at
        ``at`` (down to a microsecond step). AccountingError when flux-accounting
        weighs neither nodes nor cores (no one-node, one-core row can carry usage)."""
        per_second = weights.node + weights.core
        if per_second <= 0:
            raise AccountingError(
                "flux-accounting weighs neither nodes nor cores (node_weight and core_weight"
                " are 0 in its config_table): no usage record can carry QPU spend"
            )
        # The usage meant, to flux-accounting's 5 decimals first, then the seconds: the
        # step's error (half a microsecond) then stays inside that decimal's rounding
        # and the update computes exactly it. (Stepping spend x weight itself could
        # land across a rounding boundary: one record in 45 came out 0.00001 off, and
        # a classical job of the same usage then ranked apart in fair-share.)
        seconds = round(round(spend * weight, DECIMALS) / per_second / STEP) * STEP
        return cls(feed, userid, user, bank, spend, currency, tasks, weight, on_step(at),
                   seconds, per_second, opened, project)  # fmt: skip

    @property
    def jobid(self) -> int:
        return usage_jobid(self.feed, self.opened)

    @property
    def t_run(self) -> float:
        return self.at - self.seconds

    @property
    def usage(self) -> float:
        """What flux-accounting's update computes for this row."""
        return round(self.per_second * (self.at - self.t_run), DECIMALS)

    def resources(self) -> str:
        """R (version 1): one node, one core, from ``t_run`` to ``at``."""
        return json.dumps(
            {
                "version": 1,
                "execution": {
                    "R_lite": [{"rank": "0", "children": {"core": "0"}}],
                    "nodelist": [NODELIST],
                    "starttime": self.t_run,
                    "expiration": self.at,
                },
            },
            separators=(",", ":"),
        )

    def jobspec(self, cluster: str) -> str:
        """A version-1 jobspec naming the row as QPU usage, with what it carries."""
        system: dict[str, Any] = {
            "bank": self.bank,
            **({"project": self.project} if self.project else {}),
            "duration": 0,
            "job": {"name": JOB_NAME},
            "qpu_usage": {
                "feed": self.feed,
                "cluster": cluster,
                "spend": round(self.spend, 6),
                "currency": self.currency,
                "tasks": self.tasks,
                "qpu_weight": self.weight,
                "usage": self.usage,
            },
        }
        spec = {
            "version": 1,
            "resources": [
                {"type": "node", "count": 1, "with": [
                    {"type": "slot", "count": 1, "label": "task",
                     "with": [{"type": "core", "count": 1}]},
                ]},
            ],
            "tasks": [{"command": ["flux-quantum", JOB_NAME], "slot": "task",
                       "count": {"per_slot": 1}}],
            "attributes": {"system": system},
        }  # fmt: skip
        return json.dumps(spec, separators=(",", ":"))

    def row(self, cluster: str) -> tuple[Any, ...]:
        """The ``jobs`` row: id, userid, t_submit, t_run, t_inactive, ranks, R,
        jobspec, project, bank, requested_duration, actual_duration."""
        return (
            str(self.jobid),
            self.userid,
            self.t_run,
            self.t_run,
            self.at,
            "",
            self.resources(),
            self.jobspec(cluster),
            self.project,
            self.bank,
            self.seconds,
            self.seconds,
        )
