"""Unit tier: who handles a guest's QPU job (issue 10, accounts).

The instance owner's service handles its own jobs and guests' jobs on the site's
accounts (``[quantum.accounts] site``), only on what those pay for; a guest's job with
``qpu.account=user`` is left to that guest's own service, which handles nothing else.
A guest's job reads its task through the service (``taskread``): only its own.
On the fakes of Flux, the vendor and the clock, with a real ledger in a temp dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from service_fakes import OWNER, Harness, InlineWorkers, released_record

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import SITE_ACCOUNT, ReleaseInfo
from flux_quantum.service.programs import ProgramError, read_program
from flux_quantum.service.taskread import TaskReads, checked_request, readable_ref
from flux_quantum.site.accounts import AccountsConfigError, SiteAccounts, request_account
from flux_quantum.site.ledger import GuestError
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.errors import VendorUnavailable

ALICE, BOB = 1001, 1002


def harness(tmp_path: Path, accounts: dict[str, Any] | None, *, userid: int = OWNER) -> Harness:
    """A Harness whose service runs as ``userid`` (the instance owner's when OWNER, with
    the site policy and ``accounts``; a guest's own service otherwise)."""
    owner = userid == OWNER
    site = None
    if owner:
        table: dict[str, Any] = {"ledger": {"path": str(tmp_path / "ledger.db")}}
        if accounts is not None:
            table["accounts"] = accounts
        site = SitePolicy.from_config(table, owner=OWNER)
    return Harness(site=site, userid=userid, instance_owner=owner)


def front(device: str, **more: Any) -> dict[str, Any]:
    return {"device": device, "release_at": 1, **more}


# --- the table ----------------------------------------------------------------------------


def test_accounts_table_is_checked_naming_the_key():
    assert SiteAccounts.from_config(None).site == ()
    assert SiteAccounts.from_config({"site": ["local", "braket:sv1"]}).site == (
        "local",
        "braket:sv1",
    )
    with pytest.raises(AccountsConfigError, match=r"\[quantum.accounts\] sites is not a known"):
        SiteAccounts.from_config({"sites": ["local"]})
    with pytest.raises(AccountsConfigError, match=r"site must be a list of VENDOR or VENDOR:"):
        SiteAccounts.from_config({"site": "local"})
    with pytest.raises(AccountsConfigError, match=r"got \['braket:'\]"):
        SiteAccounts.from_config({"site": ["braket:"]})


def test_a_vendor_entry_pays_for_all_its_devices_a_device_entry_for_one():
    catalog = parse_catalog(
        "devices:\n"
        "  - {name: a, vendor: local, id: 'arn:aws:braket:us-east-1::device/qpu/v/a', class: qpu, qubits: 2, price: {per_task: 1}}\n"
        "  - {name: b, vendor: braket, id: 'arn:aws:braket:us-east-1::device/qpu/v/b', class: qpu, qubits: 2, price: {per_task: 1}}\n"
        "  - {name: c, vendor: braket, id: 'arn:aws:braket:us-east-1::device/qpu/v/c', class: qpu, qubits: 2, price: {per_task: 1}}\n"
    )
    accounts = SiteAccounts(("local", "braket:b"))
    assert [d.name for d in catalog.devices if accounts.pays_for(d)] == ["a", "b"]
    unpaid = accounts.not_paid(catalog.devices, "alice")
    assert list(unpaid) == ["c"]
    assert "no site account pays for braket:c" in unpaid["c"]
    assert "alice may submit with qpu.account=user" in unpaid["c"]


def test_request_account_of_raw_requests():
    assert request_account({"device": "sv1", "account": "user"}) == "user"
    assert request_account({"device": "sv1"}) == "site"
    assert request_account("braket:sv1") == "site"
    assert request_account(None) == "site"


# --- the instance owner's service ------------------------------------------------------------


def test_a_guests_site_account_job_goes_only_to_what_the_site_pays_for(tmp_path):
    h = harness(tmp_path, {"site": ["local:beta"]})
    job = h.flux.submit(front("any", **{"class": "qpu"}), userid=ALICE)
    h.until(lambda: h.state(job) == "released")
    release = h.flux.jobs[job].release
    assert release["device"] == "beta"
    # It has no credentials: its task is read through the service.
    info = ReleaseInfo.decode(release["info"])
    assert info.read_via == "qpu_handlers"
    assert info.account == SITE_ACCOUNT and info.site_paid
    probed = {what for op, what in h.vendor.calls if op == "probe"}
    assert probed == {"beta"}


def test_the_owners_own_job_may_go_anywhere_and_reads_its_task_through_the_service(tmp_path):
    h = harness(tmp_path, {"site": ["local:beta"]})
    job = h.flux.submit(front("local:alpha"))
    h.until(lambda: h.state(job) == "released")
    assert h.flux.jobs[job].release["device"] == "alpha"
    info = ReleaseInfo.decode(h.flux.jobs[job].release["info"])
    assert info.read_via == "qpu_handlers"
    assert info.account is None


def test_a_guests_job_no_site_account_pays_for_fails_at_once_saying_what_to_configure(tmp_path):
    h = harness(tmp_path, None)
    job = h.flux.submit(front("local:alpha"), userid=ALICE)
    h.until(lambda: h.state(job) == "failed", limit=30)
    note = h.flux.jobs[job].note
    assert "no site account pays for local:alpha ([quantum.accounts] site = nothing)" in note
    assert "qpu.account=user" in note
    assert h.vendor.count("submit") == 0


def test_a_guests_user_account_job_is_left_to_the_guest(tmp_path):
    h = harness(tmp_path, {"site": ["local"]})
    job = h.flux.submit(front("local:alpha", account="user"), userid=ALICE)
    follower = h.flux.submit(None, userid=ALICE, follow=job)
    h.run(20)
    assert h.state(job) == "held" and h.state(follower) == "held"
    assert h.flux.names(job) == ["submit"]
    assert h.vendor.calls == []


# --- a guest's own service ------------------------------------------------------------------


def test_a_guests_own_service_handles_only_that_guests_user_account_jobs(tmp_path):
    h = harness(tmp_path, None, userid=ALICE)
    mine = h.flux.submit(front("local:alpha", account="user"), userid=ALICE)
    site = h.flux.submit(front("local:alpha"), userid=ALICE)
    bobs = h.flux.submit(front("local:alpha", account="user"), userid=BOB)
    h.until(lambda: h.state(mine) == "released")
    h.run(10)
    assert h.state(site) == "held" and h.state(bobs) == "held"
    assert h.flux.names(site) == ["submit"] and h.flux.names(bobs) == ["submit"]
    assert events.TASK in h.flux.names(mine)
    # Paid by alice, read by alice: no relay.
    assert ReleaseInfo.decode(h.flux.jobs[mine].release["info"]).read_via is None


# --- reading a task through the service ---------------------------------------------------------


def test_only_the_jobs_user_or_the_owner_reads_its_task_through_the_service(tmp_path):
    h = harness(tmp_path, {"site": ["local"]})
    job = h.flux.submit(front("local:alpha"), userid=ALICE)
    h.until(lambda: h.state(job) == "released")
    record = released_record(h, job)
    task = h.flux.jobs[job].release["task"]
    ref = readable_ref(record, job, None, ALICE, OWNER)
    assert (ref.task_id, ref.vendor, ref.device) == (task, "local", "alpha")
    assert readable_ref(record, job, task, OWNER, OWNER).task_id == task
    with pytest.raises(GuestError, match="is not yours"):
        readable_ref(record, job, task, BOB, OWNER)
    with pytest.raises(ValueError, match="is not one of job"):
        readable_ref(record, job, "arn:somebody-elses-task", ALICE, OWNER)
    with pytest.raises(ValueError, match="is not known"):
        readable_ref(None, job, None, ALICE, OWNER)


class Answers:
    """What each reader was answered, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[int, Any]] = []

    def __call__(self, number: int, value: Any) -> None:
        self.got.append((number, value))


def _drain(workers: InlineWorkers) -> None:
    for done, result, error in workers.drain():
        done(result, error)


def test_every_rank_reading_one_finished_task_costs_one_vendor_call_each_for_state_and_counts(
    tmp_path,
):
    """A 64-rank fan-out: every rank polls, then fetches the counts. The service asks the
    vendor once for each, and answers a later reader from memory."""
    h = harness(tmp_path, {"site": ["local"]})
    job = h.flux.submit(front("local:alpha"), userid=ALICE)
    h.until(lambda: h.state(job) == "released")
    ref = readable_ref(released_record(h, job), job, None, ALICE, OWNER)
    h.run(600)  # the task completes at the vendor
    before = {op: h.vendor.count(op) for op in ("poll", "result")}
    workers = InlineWorkers()
    reads = TaskReads(workers.submit)
    answers = Answers()
    for _ in range(64):
        reads.read("poll", ref, h.vendor, answers)
    _drain(workers)
    for _ in range(64):
        reads.read("result", ref, h.vendor, answers)
    _drain(workers)
    reads.read("result", ref, h.vendor, answers)  # a late rank, nothing to drain
    assert h.vendor.count("poll") - before["poll"] == 1
    assert h.vendor.count("result") - before["result"] == 1
    assert reads.calls == 2 and reads.answered == 129
    polls, results = answers.got[:64], answers.got[64:]
    assert {(n, v["state"]) for n, v in polls} == {(0, "COMPLETED")}
    assert all(n == 0 and v["counts"] == {"00": 5, "11": 5} for n, v in results)
    assert len(results) == 65


def test_a_task_still_queued_is_polled_again_after_a_second_a_failed_read_at_once(tmp_path):
    h = harness(tmp_path, {"site": ["local"]})
    job = h.flux.submit(front("local:alpha", release_at=5), userid=ALICE)
    h.until(lambda: h.state(job) == "released")
    ref = readable_ref(released_record(h, job), job, None, ALICE, OWNER)
    workers = InlineWorkers()
    reads = TaskReads(workers.submit, clock=h.clock)
    answers = Answers()
    reads.read("poll", ref, h.vendor, answers)
    _drain(workers)
    h.clock.advance(0.5)  # 64 ranks polling within the second share the last poll
    for _ in range(63):
        reads.read("poll", ref, h.vendor, answers)
    assert reads.calls == 1 and len(answers.got) == 64
    h.clock.advance(0.5)
    reads.read("poll", ref, h.vendor, answers)
    _drain(workers)
    assert {v["state"] for _, v in answers.got} == {"QUEUED"}
    assert reads.calls == 2
    h.vendor.fail("result", VendorUnavailable("down", vendor="local", vendor_code="503"))
    answers = Answers()
    reads.read("result", ref, h.vendor, answers)
    reads.read("result", ref, h.vendor, answers)
    _drain(workers)
    assert [n for n, _ in answers.got] == [5, 5]  # EIO to both waiting readers
    assert "result of task" in answers.got[0][1] and "down" in answers.got[0][1]
    reads.read("result", ref, h.vendor, answers)
    _drain(workers)
    assert answers.got[-1] == (0, {"task": ref.to_dict(), "counts": {"00": 5, "11": 5}})
    assert reads.calls == 4


def test_counts_over_the_relay_limit_are_refused_naming_the_direct_read(tmp_path):
    h = harness(tmp_path, {"site": ["local"]})
    job = h.flux.submit(front("local:alpha"), userid=ALICE)
    h.until(lambda: h.state(job) == "released")
    ref = readable_ref(released_record(h, job), job, None, ALICE, OWNER)
    workers = InlineWorkers()
    reads = TaskReads(workers.submit, max_bytes=32)
    answers = Answers()
    reads.read("result", ref, h.vendor, answers)
    _drain(workers)
    reads.read("result", ref, h.vendor, answers)
    number, sentence = answers.got[0]
    assert number == 27  # EFBIG
    assert "over the 32 bytes the handler service relays" in sentence
    assert "flux quantum task --direct" in sentence
    assert answers.got[1] == answers.got[0] and reads.calls == 1


@pytest.mark.parametrize(
    "payload, message",
    [
        ({}, "id must be a job id"),
        ({"id": True}, "id must be a job id"),
        ({"id": 5, "task": ""}, "task must be a task id"),
        ({"id": 5, "op": "cancel"}, "op must be one of poll, result, got 'cancel'"),
    ],
)
def test_a_bad_task_request_names_the_field(payload, message):
    with pytest.raises(ValueError, match=message):
        checked_request(payload)


def test_a_guests_program_is_read_only_from_a_file_the_guest_owns(tmp_path):
    """The service reads with the instance owner's rights: a guest's job may not name
    one of the service's own files (a key, a credential) as its program."""
    path = tmp_path / "bell.qasm"
    path.write_text("OPENQASM 3.0;\n")
    me = os.getuid()
    assert read_program(None, str(path), owner=me) == "OPENQASM 3.0;\n"
    with pytest.raises(ProgramError, match=rf"belongs to uid {me}, not to the job's user"):
        read_program(None, str(path), owner=me + 1)
    link = tmp_path / "innocent.qasm"
    link.symlink_to(path)
    with pytest.raises(ProgramError, match="belongs to uid"):
        read_program(None, str(link), owner=me + 1)


class _Attrs:
    """A Flux handle that only answers ``attr_get``."""

    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs

    def attr_get(self, name: str) -> Any:
        if name not in self.attrs:
            raise OSError(2, "No such file or directory")
        return self.attrs[name]


def test_only_the_instance_owner_takes_the_service_name():
    from flux_quantum.service.runner import instance_owner

    me = os.getuid()
    assert instance_owner(_Attrs({"security.owner": str(me)}))
    assert not instance_owner(_Attrs({"security.owner": str(me + 1)}))
    assert instance_owner(_Attrs({}))  # an instance that does not say


def test_a_guest_who_may_not_query_the_plugin_is_not_told_it_is_missing():
    import errno

    from flux_quantum.instance.plugin import PluginNotLoaded, _plugin_error

    assert isinstance(_plugin_error("query", OSError(errno.ENOSYS, "x")), PluginNotLoaded)
    denied = _plugin_error("query", OSError(errno.EPERM, "Request requires owner credentials"))
    assert not isinstance(denied, PluginNotLoaded)
    assert "owner credentials" in str(denied)
