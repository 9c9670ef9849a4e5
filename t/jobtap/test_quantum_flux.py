"""Flux tier: the quantum jobtap plugin and ingest validator on real Flux instances."""

from __future__ import annotations

import json
import time

import pytest
from fluxinstance import FluxInstance, quantum_config

pytestmark = pytest.mark.flux

CONSUMER = "flux job info $FLUX_JOB_ID jobspec | python3 -c " + (
    '\'import json,sys; s=json.load(sys.stdin)["attributes"]["system"]; '
    'print(s.get("qpu_task"), s.get("qpu_device"))\''
)


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    instance = FluxInstance(tmp_path_factory.mktemp("flux"), size=2).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


def query(inst: FluxInstance) -> dict:
    return json.loads(inst.run(["flux", "jobtap", "query", "quantum.so"]).stdout)


def held_ids(inst: FluxInstance, env=None) -> list[int]:
    out = inst.quantum("jobs", "--json", env=env).stdout
    return [j["id"] for j in json.loads(out)]


def jobid_int(inst: FluxInstance, jobid: str) -> int:
    return int(inst.run(["flux", "job", "id", "--to=dec", jobid]).stdout.strip())


def test_plugin_loaded_with_fluxion(inst):
    modules = inst.run(["flux", "module", "list"]).stdout
    assert "sched-fluxion-qmanager" in modules
    assert "quantum.so" in inst.run(["flux", "jobtap", "list"]).stdout


def test_qpu_job_is_held_in_depend_without_resources(inst):
    jobid = inst.submit("--setattr=qpu=braket:sv1", "true")
    inst.wait_event(jobid, "dependency-add")
    row = inst.run(["flux", "jobs", "-n", "-o", "{state} {dependencies}", jobid]).stdout.split()
    assert row == ["DEPEND", "qpu"]
    names = [e["name"] for e in inst.eventlog(jobid)]
    assert "alloc" not in names
    assert jobid_int(inst, jobid) in held_ids(inst)
    text = inst.quantum("jobs").stdout
    assert "JOBID" in text.splitlines()[0]
    assert jobid in text and "DEPEND" in text
    inst.quantum("fail", jobid, "--note", "test cleanup")


def test_ordinary_jobs_are_not_held(inst):
    jobid = inst.submit("true")
    inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])
    names = [e["name"] for e in inst.eventlog(jobid)]
    assert "dependency-add" not in names


def test_release_records_task_and_consumer_reads_it(inst):
    jobid = inst.submit("--setattr=qpu=sv1", "sh", "-c", CONSUMER)
    inst.wait_event(jobid, "dependency-add")
    out = inst.quantum("release", jobid, "--task", "arn:task/1", "--device", "sv1").stdout
    assert f"{jobid}: released" in out
    inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])
    assert inst.run(["flux", "job", "attach", jobid]).stdout.strip() == "arn:task/1 sv1"
    events = {e["name"]: e for e in inst.eventlog(jobid)}
    assert events["qpu-release"]["context"] == {"task": "arn:task/1", "device": "sv1"}
    assert events["dependency-remove"]["context"]["description"] == "qpu"
    # released qpu jobs jump the queue by default
    assert events["priority"]["context"]["priority"] == 4294967295
    assert jobid_int(inst, jobid) not in held_ids(inst)


def test_fail_ends_job_with_qpu_exception(inst):
    jobid = inst.submit("--setattr=qpu=sv1", "true")
    inst.wait_event(jobid, "dependency-add")
    inst.quantum("fail", jobid, "--note", "device sv1 retired (DeviceRetiredException)")
    inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])
    exc = [e for e in inst.eventlog(jobid) if e["name"] == "exception"]
    assert exc and exc[0]["context"]["type"] == "qpu"
    assert exc[0]["context"]["severity"] == 0
    assert "DeviceRetiredException" in exc[0]["context"]["note"]
    attach = inst.run(["flux", "job", "attach", jobid], check=False)
    assert attach.returncode != 0
    assert "DeviceRetiredException" in attach.stderr


def test_cancel_while_held_cleans_up(inst):
    before = query(inst)
    jobid = inst.submit("--setattr=qpu=sv1", "true")
    inst.wait_event(jobid, "dependency-add")
    assert query(inst)["held"] == before["held"] + 1
    inst.run(["flux", "cancel", jobid])
    inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])
    after = query(inst)
    assert after["held"] == before["held"]
    assert after["cancelled"] == before["cancelled"] + 1
    assert jobid_int(inst, jobid) not in held_ids(inst)
    # a release of a job that is gone changes nothing and says why
    res = inst.quantum("release", jobid, check=False)
    assert res.returncode != 0 and "not held for a QPU" in res.stderr


def test_list_is_unchanged_until_the_held_set_moves(inst):
    """A caller passing the generation it saw gets a small "unchanged" answer until a
    job is held or leaves (the service lists every second)."""
    import flux

    from flux_quantum.instance.plugin import PluginClient

    client = PluginClient(flux.Flux(inst.uri))
    jobs, generation = client.list_since(None)
    assert jobs is not None and isinstance(generation, int)
    assert client.list_since(generation) == (None, generation)
    jobid = inst.submit("--setattr=qpu=sv1", "true")
    inst.wait_event(jobid, "dependency-add")
    moved, after_hold = client.list_since(generation)
    assert after_hold != generation and jobid_int(inst, jobid) in [j.id for j in moved]
    known = {j.id: j for j in moved}
    again, same = client.list_since(None, known)
    assert same == after_hold and all(j is known[j.id] for j in again)  # reused, not rebuilt
    inst.run(["flux", "cancel", jobid])
    inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])
    left, after_cancel = client.list_since(after_hold)
    assert after_cancel != after_hold and jobid_int(inst, jobid) not in [j.id for j in left]


def test_records_give_a_held_jobs_jobspec_and_the_qpu_events_of_its_eventlog(inst):
    """``records``: what adoption needs of a held job the plugin saw from its
    submission, the very qpu-* entries of its eventlog; anything else is left out."""
    import flux

    from flux_quantum.instance.plugin import PluginClient
    from flux_quantum.service.fluxside import FluxJobs

    h = flux.Flux(inst.uri)
    client = PluginClient(h)
    held = jobid_int(inst, inst.submit("--setattr=qpu=sv1", "true"))
    inst.wait_event(str(held), "dependency-add")
    plain = jobid_int(inst, inst.submit("true"))
    first = client.records([held, plain, 1])
    assert list(first) == [held]
    jobspec, entries = first[held]
    assert jobspec["attributes"]["system"]["qpu"] == "sv1" and entries == []
    errors = client.post_events([(held, "qpu-select", {"device": "sv1"}), (held, "qpu-x", None)])
    assert errors == [None, None]
    _, entries = client.records([held])[held]
    eventlog = h.rpc("job-manager.getattr", {"id": held, "attrs": ["eventlog"]}).get()
    assert entries == [e for e in eventlog["eventlog"] if e["name"].startswith("qpu-")]
    assert [e["name"] for e in entries] == ["qpu-select", "qpu-x"]
    # In one ``events`` message each event is posted or refused on its own.
    outcomes = client.post_events(
        [(held, "qpu-y", {"n": 1}), (held, "start", None), (plain, "qpu-z", None)]
    )
    assert outcomes[0] is None
    assert "event name must be 'qpu-'" in str(outcomes[1])
    assert "is not held for a QPU" in str(outcomes[2])
    _, entries = client.records([held])[held]
    assert [e["name"] for e in entries] == ["qpu-select", "qpu-x", "qpu-y"]
    record = FluxJobs(h).held_records([held])[held]
    assert [e.name for e in record.events] == ["qpu-select", "qpu-x", "qpu-y"]
    assert record.size.cores == 1
    inst.quantum("release", str(held), "--task", "arn:records")
    inst.run(["flux", "job", "wait-event", "-t", "30", str(held), "clean"])
    assert client.records([held]) == {}  # no longer held


def test_pipelined_rpcs_answer_in_order_with_flux_errors(inst):
    """fluxrpc.pipelined: every answer in the order asked, an error with Flux's errno
    and message, more requests than one window."""
    import errno

    import flux

    from flux_quantum.instance.rpc import RpcError, pipelined

    h = flux.Flux(inst.uri)
    jobid = jobid_int(inst, inst.submit("--setattr=qpu=sv1", "true"))
    inst.wait_event(str(jobid), "dependency-add")
    asks = [("job-manager.getattr", {"id": jobid, "attrs": ["eventlog"]})] * 300
    asks.insert(7, ("job-manager.getattr", {"id": 1, "attrs": ["eventlog"]}))
    answers = pipelined(h, asks, window=64)
    assert len(answers) == 301
    bad = answers.pop(7)
    assert isinstance(bad, RpcError) and bad.errno == errno.EINVAL and "unknown job" in str(bad)
    assert all(a["eventlog"][0]["name"] == "submit" for a in answers)
    assert pipelined(h, []) == []
    inst.run(["flux", "cancel", str(jobid)])


def test_query_reports_counts_and_config(inst):
    q = query(inst)
    assert set(q) >= {"held", "released", "failed", "cancelled", "config"}
    assert q["config"] == {"release-priority": 4294967295, "max-held-per-user": 0}
    assert q["released"] >= 1 and q["failed"] >= 1


@pytest.mark.parametrize(
    "attr",
    [
        "qpu=1",
        "qpu=true",
        "qpu.shots=abc",
        "qpu.shots=0",
        "qpu.policy=cheapest",
        "qpu.release_at=-1",
        "qpu.colour=blue",
        'qpu=""',
        "qpu.max_wait=soon",
    ],
)
def test_bad_requests_rejected_at_submit_and_nothing_queued(inst, attr):
    from flux_quantum.errors import FluxQuantumError
    from flux_quantum.protocol.request import parse_request

    key, _, raw = attr.partition("=")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    request = value if key == "qpu" else {key.split(".", 1)[1]: value}
    with pytest.raises(FluxQuantumError) as expected:
        parse_request(request)
    count = len(inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split())
    res = inst.run(["flux", "submit", f"--setattr={attr}", "true"], check=False)
    assert res.returncode != 0
    assert str(expected.value) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert len(inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split()) == count


def test_qpu_task_cannot_be_forged_at_submit(inst):
    res = inst.run(
        ["flux", "submit", "--setattr=qpu=sv1", "--setattr=qpu_task=arn:fake", "true"], check=False
    )
    assert res.returncode != 0
    assert "qpu_task is set by flux-quantum at release" in res.stderr


def test_without_the_validator_the_plugin_still_refuses_what_release_writes(tmp_path):
    """A site that loads the plugin but not the validator: the plugin itself refuses a
    job that brings its own release record."""
    config = quantum_config()
    start = config.index("[ingest.validator]")
    end = config.index("\n\n", start)
    plain = FluxInstance(tmp_path, config=config[:start] + config[end + 2 :]).start()
    try:
        for attr in ("qpu_task=arn:fake", "qpu_device=sv1", 'qpu_info={"vendor":"braket"}'):
            res = plain.run(
                ["flux", "submit", "--setattr=qpu=sv1", f"--setattr={attr}", "true"], check=False
            )
            assert res.returncode != 0, attr
            assert (
                "attributes.system.qpu_task, qpu_device and qpu_info are set by flux-quantum "
                "at release and may not be given at submit"
            ) in res.stderr, res.stderr
    finally:
        assert plain.stop() == 0, plain.broker_log()


def test_guest_cannot_act_on_another_users_job(inst):
    jobid = inst.submit("--setattr=qpu=sv1", "true")
    inst.wait_event(jobid, "dependency-add")
    guest = inst.guest_env(4242)
    assert held_ids(inst, env=guest) == []
    for cmd in (["release", jobid], ["fail", jobid, "--note", "x"]):
        res = inst.quantum(*cmd, check=False, env=guest)
        assert res.returncode != 0
        assert "belongs to another user" in res.stderr
    ev = inst.run(
        [
            "flux",
            "python",
            "-c",
            "import flux,sys; flux.Flux().rpc('job-manager.quantum.event',"
            "{'id': int(sys.argv[1]), 'name': 'qpu-x'}).get()",
            str(jobid_int(inst, jobid)),
        ],
        check=False,
        env=guest,
    )
    assert ev.returncode != 0 and "belongs to another user" in ev.stderr
    assert inst.state(jobid) == "DEPEND"
    assert jobid_int(inst, jobid) in held_ids(inst)
    inst.quantum("release", jobid)
    inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])


def test_event_service_posts_qpu_events_only(inst):
    jobid = inst.submit("--setattr=qpu=sv1", "true")
    inst.wait_event(jobid, "dependency-add")
    script = (
        "import flux,sys\n"
        "from flux_quantum.instance.plugin import PluginClient\n"
        "c = PluginClient()\n"
        "c.post_event(int(sys.argv[1]), 'qpu-submit', {'token': 'tok-1', 'device': 'sv1'})\n"
        "try:\n"
        "    c.post_event(int(sys.argv[1]), 'start', {})\n"
        "except Exception as e:\n"
        "    print('refused:', e)\n"
    )
    import sys as _sys

    out = inst.run([_sys.executable, "-c", script, str(jobid_int(inst, jobid))]).stdout
    assert "refused: event: event name must be 'qpu-'" in out
    # The post is acknowledged before the job-manager commits it to the KVS eventlog.
    inst.wait_event(jobid, "qpu-submit")
    ev = [e for e in inst.eventlog(jobid) if e["name"] == "qpu-submit"]
    assert ev and ev[0]["context"] == {"token": "tok-1", "device": "sv1"}
    inst.quantum("fail", jobid, "--note", "done")


def test_bad_plugin_config_fails_load_naming_key(tmp_path):
    from flux_quantum.instance.plugin import plugin_path

    inst = FluxInstance(tmp_path, config="").start()
    try:
        for conf, text in [
            ("bogus=1", "unknown configuration key 'bogus'"),
            ("release-priority=high", "release-priority must be an integer"),
            ("max-held-per-user=-3", "max-held-per-user must be an integer"),
        ]:
            res = inst.run(["flux", "jobtap", "load", str(plugin_path()), conf], check=False)
            assert res.returncode != 0
            assert text in res.stderr
            assert len(res.stderr.strip().splitlines()) == 1
        assert "quantum.so" not in inst.run(["flux", "jobtap", "list"]).stdout
        inst.run(["flux", "jobtap", "load", str(plugin_path()), "release-priority=-1"])
        assert query(inst)["config"]["release-priority"] == -1
    finally:
        inst.stop()


def test_job_manager_reload_keeps_held_jobs(tmp_path):
    inst = FluxInstance(tmp_path).start()
    try:
        ids = [inst.submit("--setattr=qpu=sv1", "sh", "-c", CONSUMER) for _ in range(3)]
        for jobid in ids:
            inst.wait_event(jobid, "dependency-add")
        import flux

        from flux_quantum.instance.plugin import PluginClient
        from flux_quantum.service.fluxside import FluxJobs

        numbers = [jobid_int(inst, j) for j in ids]
        assert PluginClient(flux.Flux(inst.uri)).post_events([(numbers[1], "qpu-x", None)]) == [
            None
        ]
        inst.restart_job_manager()
        assert sorted(held_ids(inst)) == sorted(numbers)
        assert all(inst.state(j) == "DEPEND" for j in ids)
        # Held before this plugin loaded: records leaves them to their eventlogs, of
        # which an adoption keeps the qpu-* events.
        h = flux.Flux(inst.uri)
        assert PluginClient(h).records(numbers) == {}
        found = FluxJobs(h).held_records(numbers)
        assert sorted(found) == sorted(numbers)
        assert [[e.name for e in found[n].events] for n in numbers] == [[], ["qpu-x"], []]
        assert found[numbers[0]].system["qpu"] == "sv1"
        inst.quantum("release", ids[0], "--task", "arn:after-reload")
        inst.run(["flux", "job", "wait-event", "-t", "30", ids[0], "clean"])
        assert inst.run(["flux", "job", "attach", ids[0]]).stdout.split()[0] == "arn:after-reload"
        assert inst.state(ids[1]) == "DEPEND"
    finally:
        inst.stop()


def test_instance_restart_keeps_held_jobs(tmp_path):
    inst = FluxInstance(tmp_path, statedir=True).start()
    try:
        ids = [inst.submit("--setattr=qpu=sv1", "sh", "-c", CONSUMER) for _ in range(3)]
        for jobid in ids:
            inst.wait_event(jobid, "dependency-add")
        inst.quantum("release", ids[2], "--task", "arn:before-restart")
        inst.run(["flux", "job", "wait-event", "-t", "30", ids[2], "clean"])
        inst.restart()
        assert sorted(held_ids(inst)) == sorted(jobid_int(inst, j) for j in ids[:2])
        assert [inst.state(j) for j in ids[:2]] == ["DEPEND", "DEPEND"]
        inst.quantum("release", ids[0], "--task", "arn:after-restart", "--device", "sv1")
        inst.run(["flux", "job", "wait-event", "-t", "30", ids[0], "clean"])
        assert inst.run(["flux", "job", "attach", ids[0]]).stdout.strip() == "arn:after-restart sv1"
        inst.quantum("fail", ids[1], "--note", "end of test")
    finally:
        inst.stop()


def test_thousand_held_jobs_released_in_one_go(tmp_path):
    inst = FluxInstance(tmp_path, size=1).start()
    try:
        ids = inst.submit("--cc=1-1000", "--setattr=qpu=sv1", "true").split()
        assert len(ids) == 1000
        deadline = time.monotonic() + 120
        while query(inst)["held"] < 1000:
            assert time.monotonic() < deadline, query(inst)
            time.sleep(0.2)
        t0 = time.monotonic()
        released = inst.quantum("release", *ids, "--task", "arn:fanout").stdout.splitlines()
        assert len(released) == 1000
        inst.run(["flux", "queue", "drain", "--timeout=300s"], timeout=320)
        elapsed = time.monotonic() - t0
        q = query(inst)
        assert q["held"] == 0 and q["released"] == 1000
        done = inst.run(["flux", "jobs", "-n", "-f", "completed", "-o", "{id}"]).stdout.split()
        assert len(done) == 1000
        print(f"1000 held jobs released and completed in {elapsed:.1f} s")
    finally:
        inst.stop()


def test_plugin_starts_no_python_in_broker(inst):
    """The plugin links libpython but must never initialize an interpreter: a
    started CPython would import _cffi_backend and its lib-dynload modules."""
    pid = inst.run(["flux", "getattr", "broker.pid"]).stdout.strip()
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    assert "quantum.so" in maps
    assert "_cffi_backend" not in maps
    assert "lib-dynload" not in maps


def test_etc_snippet_loads_plugin_and_validator(tmp_path):
    from pathlib import Path

    from flux_quantum.instance.plugin import plugin_path

    prefix = plugin_path().parents[2]
    snippet = (Path(__file__).parents[2] / "etc/flux-quantum/quantum.toml").read_text()
    inst = FluxInstance(tmp_path, config=snippet.replace("PREFIX", str(prefix))).start()
    try:
        assert "quantum.so" in inst.run(["flux", "jobtap", "list"]).stdout
        bad = inst.run(["flux", "submit", "--setattr=qpu.shots=abc", "true"], check=False)
        assert "qpu.shots must be an integer" in bad.stderr
        jobid = inst.submit("--setattr=qpu=sv1", "true")
        inst.wait_event(jobid, "dependency-add")
        inst.quantum("fail", jobid, "--note", "end of test")
    finally:
        inst.stop()


def test_follower_rides_leader_and_is_released_with_it(inst):
    leader = inst.submit("--setattr=qpu=sv1", "sh", "-c", CONSUMER)
    inst.wait_event(leader, "dependency-add")
    follower = inst.submit(f"--dependency=qpu:{leader}", "sh", "-c", CONSUMER)
    inst.wait_event(follower, "dependency-add")
    assert inst.state(follower) == "DEPEND"
    jobs = {j["id"]: j for j in json.loads(inst.quantum("jobs", "--json").stdout)}
    assert jobs[jobid_int(inst, follower)]["follow"] == jobid_int(inst, leader)
    assert jobs[jobid_int(inst, follower)]["request"] is None
    assert f"follows {leader}" in inst.quantum("jobs").stdout
    inst.quantum("release", leader, follower, "--task", "arn:shared", "--device", "sv1")
    for jobid in (leader, follower):
        inst.run(["flux", "job", "wait-event", "-t", "30", jobid, "clean"])
        assert inst.run(["flux", "job", "attach", jobid]).stdout.strip() == "arn:shared sv1"


@pytest.mark.parametrize(
    "make_value, text",
    [
        (lambda leader: "notajob", "--dependency=qpu:JOBID needs a job id, got 'notajob'"),
        (lambda leader: "ƒ1", "that job is not an active job with its own qpu request"),
    ],
)
def test_bad_follower_rejected_at_submit(inst, make_value, text):
    res = inst.run(["flux", "submit", f"--dependency=qpu:{make_value(None)}", "true"], check=False)
    assert res.returncode != 0
    assert text in res.stderr


def test_follower_with_its_own_request_rejected(inst):
    leader = inst.submit("--setattr=qpu=sv1", "true")
    inst.wait_event(leader, "dependency-add")
    res = inst.run(
        ["flux", "submit", "--setattr=qpu=sv1", f"--dependency=qpu:{leader}", "true"], check=False
    )
    assert res.returncode != 0
    assert "not both" in res.stderr
    inst.quantum("fail", leader, "--note", "end of test")


def test_follower_survives_job_manager_reload(tmp_path):
    inst = FluxInstance(tmp_path).start()
    try:
        leader = inst.submit("--setattr=qpu=sv1", "true")
        inst.wait_event(leader, "dependency-add")
        follower = inst.submit(f"--dependency=qpu:{leader}", "true")
        inst.wait_event(follower, "dependency-add")
        inst.restart_job_manager()
        jobs = {j["id"]: j for j in json.loads(inst.quantum("jobs", "--json").stdout)}
        assert jobs[jobid_int(inst, follower)]["follow"] == jobid_int(inst, leader)
        inst.quantum("release", leader, follower, "--task", "arn:x")
        inst.run(["flux", "job", "wait-event", "-t", "30", follower, "clean"])
    finally:
        inst.stop()
