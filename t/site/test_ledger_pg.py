"""The ledger on a real PostgreSQL server shared by several clusters
(``flux_quantum.testing.pgserver``: a throwaway server run as an unprivileged user): two
clusters racing for the last dollar of one user's $1.00 day never reserve more than $1.00
and the refused get the quota's sentence; each cluster settles, recovers and sweeps only
its own rows while limits and ``usage`` see them all; a server restart between reserve and
settle loses nothing; a stopped server is ``LedgerUnavailable`` and work resumes when it
is back; the service's site policy opens it from ``[quantum.ledger] url`` with the
password from a private credentials file. The same contract as SQLite runs in
t/site/test_ledger.py on both."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flux_quantum.testing import pgserver

MISSING = pgserver.missing()
if MISSING is not None:
    pytest.skip(MISSING, allow_module_level=True)

from flux_quantum.site.ledger import (  # noqa: E402
    Ledger,
    LedgerError,
    LedgerUnavailable,
    UsageQuery,
    restrict_to_caller,
)
from flux_quantum.site.policy import SitePolicy  # noqa: E402
from flux_quantum.site.quota import Charge, QuotaConfig  # noqa: E402

JUNE_3 = datetime(2025, 6, 3, 15, 30, tzinfo=UTC).timestamp()
DOLLAR_A_DAY = QuotaConfig.from_config(
    {"limits": [{"name": "daily", "user": "*", "period": "day", "spend": 1.0}]}
)


def charge(token: str, estimate: float = 0.05, jobid: int = 1, userid: int = 1000, **kw) -> Charge:
    return Charge(
        token=token,
        jobid=jobid,
        userid=userid,
        user=kw.pop("user", "alice"),
        bank=kw.pop("bank", None),
        device="garnet",
        vendor="braket",
        device_class="qpu",
        shots=100,
        estimate=estimate,
        t=kw.pop("t", JUNE_3),
        **kw,
    )


@pytest.fixture
def shared(pg_server, tmp_path: Path):
    """A new database and a function opening it as one cluster."""
    url = pg_server.url(pg_server.database())
    credentials = str(pgserver.credentials_file(tmp_path))
    opened: list[Ledger] = []

    def open_as(cluster: str) -> Ledger:
        ledger = Ledger(url, cluster=cluster, credentials=credentials)
        opened.append(ledger)
        return ledger

    open_as.url = url  # type: ignore[attr-defined]
    open_as.credentials = credentials  # type: ignore[attr-defined]
    yield open_as
    for ledger in opened:
        ledger.close()


def test_two_clusters_racing_for_the_last_dollar_never_overspend(shared) -> None:
    clusters = [shared("alpha"), shared("beta")]
    outcomes: list[tuple[str, bool, str]] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def service(ledger: Ledger, n: int) -> None:
        start.wait()
        for i in range(10):
            token = f"fq-{ledger.cluster}-{n}-{i}"
            result = ledger.reserve(charge(token, jobid=n), DOLLAR_A_DAY)
            with lock:
                outcomes.append((token, result.allowed, result.decision.reason))

    threads = [threading.Thread(target=service, args=(clusters[n % 2], n)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    allowed = [o for o in outcomes if o[1]]
    refused = [o for o in outcomes if not o[1]]
    assert len(outcomes) == 60
    assert len(allowed) == 20 and len(refused) == 40  # $1.00 / $0.05, not one more
    assert {reason for _, _, reason in refused} == {
        "over quota: [quantum.quota] limit 1 'daily': user alice, $1.00 a day; $1.00 spent or "
        "reserved this day (2025-06-03), this task on garnet would cost $0.0500"
    }
    rows = clusters[0].usage(UsageQuery(period="all", group_by=("user",)))
    assert [(r.user, r.tasks, round(r.total, 6)) for r in rows] == [("alice", 20, 1.0)]
    by_cluster = clusters[1].usage(UsageQuery(period="all", group_by=("cluster",)))
    assert sum(r.tasks for r in by_cluster) == 20
    assert {r.cluster for r in by_cluster} <= {"alpha", "beta"}


def test_each_cluster_settles_recovers_and_reports_its_own_rows(shared) -> None:
    alpha, beta = shared("alpha"), shared("beta")
    # the same job id on both (job ids repeat between instances), different tokens
    assert alpha.reserve(charge("fq-7-1-0-0", 0.5, jobid=7), DOLLAR_A_DAY).allowed
    refused = beta.reserve(charge("fq-7-2-0-0", 0.75, jobid=7), DOLLAR_A_DAY)
    assert not refused.allowed  # alice's day is shared
    assert beta.reserve(charge("fq-7-2-0-0", 0.25, jobid=7), DOLLAR_A_DAY).allowed
    assert [r.token for r in alpha.open_reservations()] == ["fq-7-1-0-0"]
    assert [r.token for r in beta.open_reservations()] == ["fq-7-2-0-0"]
    assert (alpha.job_cost(7), beta.job_cost(7)) == (0.5, 0.25)
    # another cluster's token is not this cluster's to settle or release
    with pytest.raises(LedgerError, match="no reservation for task token 'fq-7-1-0-0'"):
        beta.settle("fq-7-1-0-0", 0.4, now=JUNE_3 + 60)
    assert beta.release("fq-7-1-0-0", now=JUNE_3, reason="x") is None
    beta.attach("fq-7-1-0-0", "arn:not-mine")
    assert alpha.record("fq-7-1-0-0").task_id is None  # type: ignore[union-attr]
    settled = alpha.settle("fq-7-1-0-0", 0.4, now=JUNE_3 + 60, task_id="arn:task/1")
    assert (settled.state, settled.cost, settled.cluster) == ("settled", 0.4, "alpha")
    # a replay from either side counts nothing twice
    again = alpha.reserve(charge("fq-7-1-0-0", 0.5, jobid=7), DOLLAR_A_DAY)
    assert again.replayed and again.state == "settled"
    rows = alpha.usage(UsageQuery(period="all", group_by=("cluster", "user")))
    assert [(r.cluster, r.user, r.tasks, r.spent, r.reserved) for r in rows] == [
        ("alpha", "alice", 1, 0.4, 0.0),
        ("beta", "alice", 1, 0.0, 0.25),
    ]
    only = alpha.usage(UsageQuery(period="all", group_by=("user",), cluster="beta"))
    assert [(r.user, r.total) for r in only] == [("alice", 0.25)]
    # a guest sees only their own, on every cluster
    assert beta.reserve(charge("fq-9-2-0-0", 0.1, jobid=9, userid=1001, user="bob"), DOLLAR_A_DAY)
    mine = alpha.usage(restrict_to_caller(UsageQuery(group_by=("cluster", "user")), 1001, 0))
    assert [(r.cluster, r.user) for r in mine] == [("beta", "bob")]


def test_a_restart_between_reserve_and_settle_loses_nothing(pg_server, shared) -> None:
    alpha = shared("alpha")
    assert alpha.reserve(charge("fq-1-1-0-0", 0.3), DOLLAR_A_DAY).allowed
    alpha.attach("fq-1-1-0-0", "arn:task/1")
    pg_server.restart()
    # the broken connection is opened again, once, without a word
    settled = alpha.settle("fq-1-1-0-0", 0.25, now=JUNE_3 + 5)
    assert (settled.state, settled.cost, settled.task_id) == ("settled", 0.25, "arn:task/1")
    pg_server.restart()
    assert alpha.reserve(charge("fq-1-1-1-0", 0.3), DOLLAR_A_DAY).allowed
    assert [r.token for r in alpha.open_reservations()] == ["fq-1-1-1-0"]
    assert alpha.job_cost(1) == pytest.approx(0.55)


def test_a_stopped_server_is_unavailable_until_it_is_back(pg_server, shared) -> None:
    alpha = shared("alpha")
    assert alpha.reserve(charge("fq-2-1-0-0", 0.3, jobid=2), DOLLAR_A_DAY).allowed
    pg_server.stop()
    try:
        for verb in (
            lambda: alpha.reserve(charge("fq-2-1-1-0", 0.3, jobid=2), DOLLAR_A_DAY),
            lambda: alpha.settle("fq-2-1-0-0", 0.3, now=JUNE_3),
            alpha.open_reservations,
            lambda: alpha.usage(UsageQuery()),
        ):
            with pytest.raises(LedgerUnavailable, match="the ledger's database is unavailable"):
                verb()
        # a ledger opened while the server is down is made, and raises at its first call
        late = shared("beta")
        with pytest.raises(LedgerUnavailable):
            late.open_reservations()
        assert LedgerUnavailable.retryable
    finally:
        pg_server.start()
    # back: the reservation that was refused by the outage goes through once
    assert alpha.reserve(charge("fq-2-1-1-0", 0.3, jobid=2), DOLLAR_A_DAY).allowed
    assert alpha.reserve(charge("fq-2-1-1-0", 0.3, jobid=2), DOLLAR_A_DAY).replayed
    assert alpha.job_cost(2) == pytest.approx(0.6)
    assert late.open_reservations() == []


def test_the_site_policy_opens_it_from_quantum_ledger(pg_server, shared, tmp_path: Path) -> None:
    table = {"url": shared.url, "credentials": shared.credentials, "cluster": "gamma"}
    site = SitePolicy.from_config({"ledger": table})
    assert (site.ledger.backend, site.ledger.cluster, site.ledger.currency) == (
        "postgresql",
        "gamma",
        "USD",
    )
    assert site.ledger.reserve(charge("fq-3-1-0-0"), DOLLAR_A_DAY).allowed
    site.close()
    # the schema is versioned, made once, and the same for the next service
    versions = pg_server.admin(
        "SELECT version, note FROM schema_version ORDER BY version",
        shared.url.split("/")[-1].split("?")[0],
    )
    assert [v for v, _ in versions] == [1, 2, 3]
    # another currency is refused with the sentence that says what to do
    with pytest.raises(
        LedgerError, match="the ledger counts in USD but the catalog's currency is EUR"
    ):
        SitePolicy.from_config({"ledger": table}, currency="EUR").ledger.open_reservations()
    # a wrong password is a broken setup, said at once (not retried as an outage)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    bad = {**table, "credentials": str(pgserver.credentials_file(wrong, "nope"))}
    with pytest.raises(LedgerError, match="password authentication failed") as caught:
        SitePolicy.from_config({"ledger": bad})
    assert not isinstance(caught.value, LedgerUnavailable)


def test_readers_see_every_cluster_and_cannot_write(shared) -> None:
    from flux_quantum.testing.promises import read_ledger

    alpha, beta = shared("alpha"), shared("beta")
    alpha.reserve(charge("fq-4-1-0-0", 0.2, jobid=4), DOLLAR_A_DAY)
    beta.reserve(charge("fq-4-2-0-0", 0.3, jobid=4), DOLLAR_A_DAY)
    with Ledger(shared.url, readonly=True, credentials=shared.credentials) as reader:
        rows = reader.usage(UsageQuery(period="all", group_by=("cluster",)))
        assert [(r.cluster, r.total) for r in rows] == [("alpha", 0.2), ("beta", 0.3)]
        with pytest.raises(LedgerError, match="opened read-only"):
            reader.reserve(charge("fq-4-1-1-0", jobid=4), DOLLAR_A_DAY)
    every = read_ledger(shared.url, credentials=shared.credentials)
    assert sorted(r.token for r in every) == ["fq-4-1-0-0", "fq-4-2-0-0"]
    mine = read_ledger(shared.url, credentials=shared.credentials, cluster="beta")
    assert [(r.token, r.state, r.estimate) for r in mine] == [("fq-4-2-0-0", "reserved", 0.3)]


def test_a_held_job_waits_for_a_stopped_server_and_runs_once_when_it_is_back(
    pg_server, shared
) -> None:
    """The service on a real PostgreSQL ledger: the server stopped while a job is about
    to get its task, the job waits held with no task; started again, the task is
    created once and reserved once; a restart while the task runs loses nothing."""
    from service_fakes import Harness, at_front

    table = {"url": shared.url, "credentials": shared.credentials, "cluster": "alpha"}
    quota = {"limits": [{"user": "*", "period": "day", "spend": 10.0}]}
    site = SitePolicy.from_config({"ledger": table, "quota": quota})
    h = Harness(site=site, vendor_names=("local",))
    pg_server.stop()
    try:
        job = h.flux.submit(at_front("alpha", release_at=2))
        h.run(60)
        assert h.state(job) == "held" and h.vendor.count("submit") == 0
        assert "the site's ledger is unavailable" in h.flux.jobs[job].memo["qpu_state"]
        assert h.service.status()["ledger"]["unavailable"]
    finally:
        pg_server.start()
    h.until(lambda: h.vendor.count("submit") == 1)
    pg_server.restart()
    h.until(lambda: h.state(job) == "released")
    reader = shared("alpha")
    h.until(lambda: reader.open_reservations() == [], limit=900)
    rows = reader.usage(UsageQuery(period="all", group_by=("cluster", "user")))
    assert [(r.cluster, r.tasks, r.reserved) for r in rows] == [("alpha", 1, 0.0)]
    assert rows[0].spent == pytest.approx(1.3)
    assert h.service.status()["ledger"]["unavailable"] is None
    site.close()
