"""Merged tasks' pure decisions (flux_quantum.site.merging): the ``[quantum.merge]`` table and its
errors, who may share a task, batches within the vendors' limits (Braket's executables
of the shots' gcd, IBM's executions and input bytes), the bounded wait and the
sentences. Where a limit is the vendor's, the batches are sent through our real vendor
layer (amazon-braket-sdk and boto3, the qrmi client) to the emulator, which takes every
one and refuses what does not fit, and their bills are split as the cost rule says
(the rule itself: t/site/test_cost_shares.py)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import boto3
import pytest
from botocore.config import Config
from money import bill_cents, cents

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.protocol.merged_tasks import PROGRAM_SET, PUBS, Limits
from flux_quantum.site.cost_shares import cost_shares, price_shares, task_bill, usage_shares
from flux_quantum.site.merging import (
    BOUND_GAIN,
    BOUND_MAX_WAIT,
    BOUND_QUEUE,
    Batch,
    Candidate,
    MergeConfig,
    MergeConfigError,
    alone_reason,
    batches,
    clock_time,
    compatible,
    decide,
    device_limits,
    explain,
    payload_size,
    wait_bound,
)
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import RetryBudget, TaskState
from flux_quantum.vendors.braket import TAG_VALUE_MAX, program_sets
from flux_quantum.vendors.braket.parsing import (
    encode_layout,
    program_set_layout,
    program_set_limits,
)
from flux_quantum.vendors.braket.settings import BraketSettings
from flux_quantum.vendors.braket.vendor import BraketVendor
from flux_quantum.vendors.ibm import INPUT_OVERHEAD as IBM_INPUT_OVERHEAD
from flux_quantum.vendors.ibm import MAX_EXECUTIONS, MAX_INPUT_BYTES, sampler_jobs
from flux_quantum.vendors.ibm import PUB_OVERHEAD as IBM_PUB_OVERHEAD
from flux_quantum.vendors.ibm.payload import OverLimit, sampler_set_input
from flux_quantum.vendors.ibm.settings import IbmSettings
from flux_quantum.vendors.ibm.vendor import IbmVendor

pytest_plugins = ["emulator_fixtures"]

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
ALICE, BOB, CAROL = 1001, 1002, 1003
NAMES = {ALICE: "alice", BOB: "bob", CAROL: "carol"}
DEFAULT = MergeConfig()


def cand(
    jobid: int,
    *,
    shots: int = 100,
    since: float = T0,
    userid: int = ALICE,
    bank: str | None = "chem",
    device: str = "forte1",
    vendor: str = "braket",
    size: int = 120,
    gain: float | None = 40.0,
    **fields,
) -> Candidate:
    return Candidate(
        unit=jobid + 10_000,
        jobid=jobid,
        userid=userid,
        user=NAMES.get(userid),
        bank=bank,
        account=fields.pop("account", "site"),
        device=device,
        vendor=vendor,
        size=size,
        shots=shots,
        since=since,
        gain=gain,
        **fields,
    )


BRAKET = program_sets(100, 2000, (1, 1000))


# --- [quantum.merge] --------------------------------------------------------------------------


def test_no_table_and_an_empty_table_are_the_defaults():
    for table in (None, {}):
        config = MergeConfig.from_config(table)
        assert config == MergeConfig(True, False, 60.0, None)
        assert config.to_dict() == {
            "enabled": True,
            "across_users": False,
            "max_wait": 60.0,
            "devices": None,
        }
    assert DEFAULT.describe() == (
        "merging on (every device that takes merged tasks; a task holds the jobs of one "
        "user; max_wait 1m)"
    )
    assert DEFAULT.covers("anything")


def test_every_key_parses():
    config = MergeConfig.from_config(
        {
            "enabled": True,
            "across_users": ["chem", "phys"],
            "max_wait": "2m",
            "devices": ["forte1", "ibm_fez"],
        },
        devices=["forte1", "ibm_fez", "sv1"],
    )
    assert config.across_users == frozenset({"chem", "phys"})
    assert config.max_wait == 120.0
    assert config.devices == frozenset({"forte1", "ibm_fez"})
    assert config.covers("forte1") and not config.covers("sv1")
    assert config.to_dict()["across_users"] == ["chem", "phys"]
    assert config.describe() == (
        "merging on (devices forte1, ibm_fez; users of one bank share a task in banks chem, "
        "phys; max_wait 2m)"
    )
    off = MergeConfig.from_config({"enabled": False, "devices": ["forte1"]})
    assert off.describe() == "merging off" and not off.covers("forte1")
    anyone = MergeConfig.from_config({"across_users": True})
    assert anyone.describe_users() == "jobs of any users share a task"
    # devices checked against the catalog's names, or its devices by name
    assert MergeConfig.from_config({"devices": ["a"]}, devices={"a": object()}).devices == {"a"}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0.0), (45, 45.0), (2.5, 2.5), ("30s", 30.0), ("2m", 120.0), ("1.5m", 90.0),
     ("1h", 3600.0), ("90", 90.0), (" 10s ", 10.0), (".5m", 30.0)],
)  # fmt: skip
def test_max_wait_durations(value, seconds):
    assert MergeConfig.from_config({"max_wait": value}).max_wait == seconds


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("on", "[quantum.merge] must be a table, got 'on'"),
        (
            {"enable": True},
            "[quantum.merge] has an unknown key 'enable' (accepted: enabled, across_users, "
            "max_wait, devices)",
        ),
        ({"enabled": "yes"}, "[quantum.merge] enabled must be true or false, got 'yes'"),
        ({"enabled": 1}, "[quantum.merge] enabled must be true or false, got 1"),
        (
            {"across_users": "chem"},
            "[quantum.merge] across_users must be true, false or a non-empty list of bank "
            "names, got 'chem'",
        ),
        (
            {"across_users": []},
            "[quantum.merge] across_users must be true, false or a non-empty list of bank "
            "names, got []",
        ),
        (
            {"across_users": ["chem", ""]},
            "[quantum.merge] across_users must be true, false or a non-empty list of bank "
            "names, got ['chem', '']",
        ),
        (
            {"across_users": [7]},
            "[quantum.merge] across_users must be true, false or a non-empty list of bank "
            "names, got [7]",
        ),
        (
            {"max_wait": "soon"},
            "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got 'soon'",
        ),
        (
            {"max_wait": -1},
            "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got -1",
        ),
        (
            {"max_wait": "-5s"},
            "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got '-5s'",
        ),
        (
            {"max_wait": "2d"},
            "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got '2d'",
        ),
        (
            {"max_wait": True},
            "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got True",
        ),
        (
            {"max_wait": math.inf},
            "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got inf",
        ),
        (
            {"devices": []},
            "[quantum.merge] devices must be a non-empty list of names, got []",
        ),
        (
            {"devices": "forte1"},
            "[quantum.merge] devices must be a non-empty list of names, got 'forte1'",
        ),
        (
            {"devices": ["forte1", 3]},
            "[quantum.merge] devices must be a non-empty list of names, got ['forte1', 3]",
        ),
        (
            {"devices": ["forte1", "garnet"]},
            "[quantum.merge] devices: 'garnet' is not in the catalog (devices: forte1, sv1)",
        ),
    ],
)
def test_a_bad_table_is_refused_whole_naming_the_key(table, message):
    with pytest.raises(MergeConfigError) as raised:
        MergeConfig.from_config(table, devices=["sv1", "forte1"])
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)


def test_an_empty_catalog_is_named_as_none():
    with pytest.raises(MergeConfigError, match=r"'x' is not in the catalog \(devices: none\)"):
        MergeConfig.from_config({"devices": ["x"]}, devices=[])


# --- who may share a task ---------------------------------------------------------------------


BANKS = MergeConfig(across_users=frozenset({"chem", "phys"}))
ANYONE = MergeConfig(across_users=True)


@pytest.mark.parametrize(
    ("b", "config", "reason"),
    [
        (cand(2), DEFAULT, None),
        (cand(2, shots=333, size=9000, since=T0 + 50, gain=None), DEFAULT, None),
        (cand(2, bank="phys"), DEFAULT, None),  # one user, two banks: one user still
        (cand(2, device="garnet"), DEFAULT, "different devices (forte1, garnet)"),
        (cand(2, vendor="local"), DEFAULT, "different vendors (braket, local)"),
        (cand(2, account="user"), DEFAULT, "different accounts pay (site, user)"),
        (
            cand(2, reservation="forte-dec03"),
            DEFAULT,
            "different reserved windows (none, forte-dec03)",
        ),
        (cand(2, opt_out=True), DEFAULT, "job 2: its job opted out (qpu.merge=no)"),
        (cand(2, session="dedicated"), DEFAULT, "job 2: it rides a vendor session (dedicated)"),
        (
            cand(2),
            MergeConfig(enabled=False),
            "job 1: merging is off at this site ([quantum.merge] enabled = false)",
        ),
        (
            cand(2),
            MergeConfig(devices=frozenset({"garnet"})),
            "job 1: device forte1 is not in [quantum.merge] devices",
        ),
        (
            cand(2, userid=BOB),
            DEFAULT,
            "different users (alice, bob) and [quantum.merge] across_users = false: a task "
            "holds the jobs of one user",
        ),
        (cand(2, userid=BOB, bank="bio"), ANYONE, None),
        (cand(2, userid=BOB), BANKS, None),
        (
            cand(2, userid=BOB, bank="phys"),
            BANKS,
            "different users (alice, bob) in banks chem and phys: [quantum.merge] "
            "across_users lets users share a task only within one of the banks chem, phys",
        ),
        (
            cand(2, userid=BOB, bank=None),
            BANKS,
            "different users (alice, bob) in banks chem and unknown: [quantum.merge] "
            "across_users lets users share a task only within one of the banks chem, phys",
        ),
        (
            cand(2, userid=4242),
            DEFAULT,
            "different users (alice, 4242) and [quantum.merge] across_users = false: a task "
            "holds the jobs of one user",
        ),
    ],
)
def test_compatibility_rules(b, config, reason):
    a = cand(1)
    assert compatible(a, b, config) == reason
    # symmetric in its answer (the sentence names the two in the order given)
    assert (compatible(b, a, config) is None) == (reason is None)


def test_users_of_an_unlisted_bank_or_their_own_accounts_never_share():
    chem_only = MergeConfig(across_users=frozenset({"chem"}))
    a, b = cand(1, bank="bio"), cand(2, userid=BOB, bank="bio")
    assert compatible(a, b, chem_only) is not None
    assert compatible(replace(a, bank="chem"), replace(b, bank="chem"), chem_only) is None
    mine, yours = cand(1, account="user"), cand(2, userid=BOB, account="user")
    assert compatible(mine, yours, ANYONE) == (
        "different users (alice, bob), each paying with their own account"
    )
    assert compatible(mine, cand(3, account="user"), DEFAULT) is None


def test_a_candidate_checks_its_own_fields():
    with pytest.raises(ValueError, match="account must be site or user, got 'bank'"):
        cand(1, account="bank")
    with pytest.raises(ValueError, match="shots must be an integer >= 1, got 0"):
        cand(1, shots=0)
    with pytest.raises(ValueError, match="size must be an integer >= 0, got -1"):
        cand(1, size=-1)


# --- limits -----------------------------------------------------------------------------------


def test_limits_come_from_the_vendor_modules():
    expected = Limits(
        layout=PROGRAM_SET,
        max_executables=100,
        max_total_shots=2000,
        shots_per_executable=(1, 1000),
        max_layout_chars=TAG_VALUE_MAX,
    )
    assert expected == BRAKET
    assert program_sets(100, 100_000, (0, 5000)).shots_per_executable == (1, 5000)
    ibm = sampler_jobs()
    assert ibm.layout == PUBS and ibm.max_programs is None
    assert (ibm.max_executions, ibm.max_bytes) == (MAX_EXECUTIONS, MAX_INPUT_BYTES)
    assert (ibm.program_overhead, ibm.base_overhead) == (IBM_PUB_OVERHEAD, IBM_INPUT_OVERHEAD)
    assert BRAKET.describe() == "100 executables, 2000 shots, 1-1000 shots an executable"
    assert ibm.describe() == "10000000 executions, 67108864 bytes"


def test_a_device_s_limits_are_its_vendor_s_descriptor_s():
    # Braket's program sets as Braket documents them for its QPUs, IBM's Sampler jobs;
    # the emulator's devices take what the vendor they stand in for takes.
    forte = "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1"
    braket = program_sets(100, 100_000, (1, 100_000))
    assert device_limits("braket", forte) == braket == device_limits("local", forte)
    assert device_limits("ibm", "ibm_fez") == sampler_jobs() == device_limits("local", "ibm_fez")
    # A vendor that declares none, and one that is not installed, take no merged tasks.
    assert device_limits("iqm", "garnet") is None
    assert device_limits("acme", "x") is None
    with pytest.raises(ValueError, match=r"layout must be program-set or pubs, got 'sets'"):
        Limits("sets")
    assert Limits(PUBS).describe() == "no limits"
    assert BRAKET.to_dict()["shots_per_executable"] == [1, 1000]


@pytest.mark.parametrize(
    ("limits", "shots", "sizes", "problem"),
    [
        (BRAKET, [20] * 100, [1] * 100, None),  # 100 executables, 2000 shots: both limits
        (BRAKET, [10] * 101, [1] * 101, "101 executables of 10 shots, over the limit of 100 a "
         "program set"),
        (BRAKET, [100, 101], [1, 1], "201 executables of 1 shot, over the limit of 100 a "
         "program set"),
        (BRAKET, [100, 300, 200], [1] * 3, None),  # 1 + 3 + 2 executables of 100
        (BRAKET, [700, 700, 700], [1] * 3, "2100 shots in all, over the limit of 2000 a task"),
        (BRAKET, [1500], [1], "executables of 1500 shots, outside the device's 1 to 1000 shots "
         "an executable"),
        (program_sets(100, 2000, (10, 1000)), [15, 20], [1, 1],
         "executables of 5 shots, outside the device's 10 to 1000 shots an executable"),
        (program_sets(1000, 10**6, (1, 1000)), [1, 2] * 65, [1] * 130,
         "a layout of 259 characters for programs of unequal shots, over the 256 a task tag "
         "holds"),
        (program_sets(1000, 10**6, (1, 1000)), [1, 2] * 64, [1] * 128, None),
        (program_sets(1000, 10**6, (1, 1000)), [5] * 300, [1] * 300, None),  # no tag
        (sampler_jobs(max_executions=1000), [400, 300, 300], [10] * 3, None),
        (sampler_jobs(max_executions=1000), [400, 301, 300], [10] * 3,
         "1001 executions (the shots summed), over the limit of 1000 a job"),
        (sampler_jobs(max_bytes=1000), [1, 1], [300, 200], None),  # 64 + 500 + 384
        (sampler_jobs(max_bytes=1000), [1, 1], [300, 253], "an input of 1001 bytes, over "
         "the limit of 1000 a job"),
        (Limits(PUBS, max_programs=2), [1, 1, 1], [0] * 3, "3 programs, over the limit of 2 "
         "a task"),
        (Limits(PUBS), [10**9] * 5, [10**6] * 5, None),
    ],
)  # fmt: skip
def test_the_first_limit_a_set_goes_over_is_named(limits, shots, sizes, problem):
    assert limits.problem(shots, sizes) == problem


def test_executables_are_braket_s_layout_of_the_shots():
    rng = random.Random(22)
    for _ in range(500):
        shots = [rng.choice([1, 2, 10, 50, 100, 150, 300, 1000, rng.randint(1, 999)])
                 for _ in range(rng.randint(1, 12))]  # fmt: skip
        per, layout = program_set_layout(shots)
        assert BRAKET.executables(shots) == sum(layout)
        assert sampler_jobs().executables(shots) == len(shots)
        big = program_sets(10**6, 10**9, (1, 10**6))
        too_long = len(encode_layout(layout)) > TAG_VALUE_MAX and any(n > 1 for n in layout)
        assert (big.problem(shots, [1] * len(shots)) is not None) == too_long
    assert BRAKET.executables([]) == 0


def test_room_is_how_many_more_programs_like_one_fit():
    """``room`` equals counting up programs one by one until ``problem`` says no."""
    rng = random.Random(7)
    limit_sets = [
        program_sets(12, 600, (1, 200)),
        program_sets(40, 5000, (5, 1000)),
        program_sets(300, 10**6, (1, 1000), max_layout_chars=40),
        sampler_jobs(max_executions=900, max_bytes=2500),
        Limits(PUBS, max_programs=7),
    ]
    for _ in range(400):
        limits = rng.choice(limit_sets)
        n = rng.randint(0, 6)
        shots = [rng.choice([5, 10, 20, 30, 50, 60, 100]) for _ in range(n)]
        sizes = [rng.randint(0, 300) for _ in range(n)]
        shot, size = rng.choice([5, 10, 20, 25, 60, 100, 250]), rng.randint(0, 300)
        counted = 0
        if limits.problem(shots, sizes) is None:
            while limits.problem(shots + [shot] * (counted + 1), sizes + [size] * (counted + 1)) \
                    is None:  # fmt: skip
                counted += 1
        assert limits.room(shots, sizes, shot, size) == counted, (limits, shots, sizes, shot)
    assert Limits(PUBS).room([1, 2], [3, 4], 5, 6) is None


def test_ibm_input_bytes_are_never_undercounted():
    """The bytes counted for a set (``payload_size`` of each program plus the overheads) are
    at least the real SamplerV2 input ``sampler_set_input`` builds, whatever the program's
    characters and with the longest token; so a set that fits here fits IBM's limit."""
    rng = random.Random(5)
    alphabet = ['"', "\\", "\n", "\r\n", "\t", "é", "量子", "\U0001f600", "\x01", "\u2028",
                "h q[0];", " ", "a"]  # fmt: skip
    limits = sampler_jobs()
    token = "t" * 128
    for _ in range(300):
        programs = []
        for _ in range(rng.randint(1, 5)):
            body = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
            if rng.random() < 0.3:
                body += "\n// flux-quantum-token: old\n"
            text = "OPENQASM 3.0;\n" + body + ("\n" if rng.random() < 0.5 else "")
            programs.append((text, rng.choice([1, 99, 1000, 9_999_999])))
        try:
            real = len(sampler_set_input(programs, token).encode())
        except OverLimit:
            continue
        counted = limits.payload([payload_size(text) for text, _ in programs])
        assert counted >= real
        assert counted - real <= 200 * len(programs) + IBM_INPUT_OVERHEAD  # and not wildly
    assert payload_size('a"b\n') == len('"a\\"b\\n"')


def test_ibm_executions_agree_with_the_payload_s_own_limit():
    limits = sampler_jobs()
    program = "OPENQASM 3.0;\nqubit q;\n"
    for shots in ([5_000_000, 5_000_000], [5_000_000, 5_000_001], [10_000_000], [1] * 3):
        sizes = [payload_size(program)] * len(shots)
        over = limits.problem(shots, sizes)
        try:
            sampler_set_input([(program, s) for s in shots], "tok")
            refused = False
        except OverLimit as exc:
            refused = exc.limit == "executions"
        assert (over is not None) == refused


def test_limits_read_from_a_braket_device_s_capabilities(make_emulator):
    emu = make_emulator(line5())
    braket = boto_braket(emu)
    document = json.loads(braket.get_device(deviceArn=QPU_ARN)["deviceCapabilities"])
    assert program_set_limits(document) == program_sets(100, 2000, (1, 1000))
    on_sv1 = json.loads(braket.get_device(deviceArn=SV1_ARN)["deviceCapabilities"])
    assert program_set_limits(on_sv1) is None  # no program sets there
    broken = json.loads(json.dumps(document))
    broken["action"]["braket.ir.openqasm.program_set"]["maximumExecutables"] = "many"
    assert program_set_limits(broken) is None
    assert program_set_limits({}) is None


# --- batches ----------------------------------------------------------------------------------


def test_batches_fill_oldest_first_up_to_the_executables():
    jobs = [cand(i, shots=10, since=T0 + i) for i in range(250)]
    for order in (jobs, list(reversed(jobs)), random.Random(3).sample(jobs, len(jobs))):
        made = batches(order, BRAKET, DEFAULT)
        assert [b.jobids for b in made] == [
            list(range(0, 100)),
            list(range(100, 200)),
            list(range(200, 250)),
        ]
    first, second, last = made
    assert first.full and second.full and not last.full
    assert first.full_reason == (
        "one more like job 99 would make 101 executables of 10 shots, over the limit of 100 "
        "a program set"
    )
    assert (first.room, last.room) == (0, 50)
    assert first.total_shots == 1000 and first.executables == 100 and first.merged
    assert first.oldest.jobid == 0
    assert first.to_dict()["jobs"] == list(range(100)) and first.to_dict()["full"] is True


def test_an_awkward_shot_mix_does_not_fit_one_program_set():
    # 100 and 101 shots share no divisor but 1: 201 executables of 1 shot, over 100.
    made = batches([cand(1, shots=100), cand(2, shots=101, since=T0 + 1)], BRAKET, DEFAULT)
    assert [b.jobids for b in made] == [[1], [2]]
    assert not any(b.full or b.alone for b in made)
    # 100, 300 and 200 make 6 executables of 100; a job of 150 brings them to 50 a piece
    made = batches(
        [cand(1, shots=100), cand(2, shots=300), cand(3, shots=200), cand(4, shots=150)],
        BRAKET,
        DEFAULT,
    )
    assert [b.jobids for b in made] == [[1, 2, 3, 4]]
    assert made[0].executables == 15 and made[0].shots == [100, 300, 200, 150]
    assert made[0].room == 8  # 8 more of 150 make 1950 shots; a 9th would pass 2000


def test_a_job_joins_the_first_batch_it_fits():
    big = [cand(i, shots=500, since=T0 + i) for i in range(1, 5)]  # 2000 shots: full
    small = cand(9, shots=500, since=T0 + 9)
    tiny = cand(10, shots=1000, since=T0 + 10)
    made = batches([*big, small, tiny], BRAKET, DEFAULT)
    assert [b.jobids for b in made] == [[1, 2, 3, 4], [9, 10]]
    assert made[0].full_reason == (
        "one more like job 4 would make 2500 shots in all, over the limit of 2000 a task"
    )
    assert made[1].room == 0 and made[1].full  # 1500 + another 1000 > 2000


def test_incompatible_jobs_make_separate_batches():
    jobs = [
        cand(1, userid=ALICE),
        cand(2, userid=BOB, since=T0 + 1),
        cand(3, userid=ALICE, since=T0 + 2),
        cand(4, userid=BOB, bank="phys", since=T0 + 3),
        cand(5, device="garnet", since=T0 + 4),
        cand(6, account="user", since=T0 + 5),
    ]
    assert [b.jobids for b in batches(jobs, BRAKET, DEFAULT)] == [[1, 3], [2, 4], [5], [6]]
    assert [b.jobids for b in batches(jobs, BRAKET, BANKS)] == [[1, 2, 3], [4], [5], [6]]
    assert [b.jobids for b in batches(jobs, BRAKET, ANYONE)] == [[1, 2, 3, 4], [5], [6]]
    # the bank rule is not transitive, so every kind of member is checked: alice's phys
    # job 3 may join her own job 1 but not bob's chem job 2, so not their batch
    mixed = [cand(1), cand(2, userid=BOB, since=T0 + 1), cand(3, bank="phys", since=T0 + 2)]
    assert [b.jobids for b in batches(mixed, BRAKET, BANKS)] == [[1, 2], [3]]


def test_jobs_that_are_never_merged_go_alone_with_the_reason():
    jobs = [
        cand(1, opt_out=True),
        cand(2, session="batch", since=T0 + 1),
        cand(3, device="sv1", since=T0 + 2),
        cand(4, shots=5000, since=T0 + 3),
        cand(5, since=T0 + 4),
        cand(6, since=T0 + 5),
    ]
    made = batches(jobs, {"forte1": BRAKET}, DEFAULT)
    assert [(b.jobids, b.alone) for b in made] == [
        ([1], "its job opted out (qpu.merge=no)"),
        ([2], "it rides a vendor session (batch)"),
        ([3], "device sv1 takes no merged tasks"),
        (
            [4],
            "on its own it is over a merged task's limits (executables of 5000 shots, outside "
            "the device's 1 to 1000 shots an executable)",
        ),
        ([5, 6], None),
    ]
    off = batches(jobs[4:], BRAKET, MergeConfig(enabled=False))
    assert [b.alone for b in off] == [
        "merging is off at this site ([quantum.merge] enabled = false)"
    ] * 2
    assert all(b.alone for b in batches(jobs[4:], None, DEFAULT))


def test_ibm_batches_split_on_executions_and_bytes():
    limits = sampler_jobs(max_executions=1000, max_bytes=3000)
    jobs = [cand(i, vendor="ibm", device="fez", shots=300, size=500, since=T0 + i)
            for i in range(7)]  # fmt: skip
    made = batches(jobs, limits, DEFAULT)
    assert [b.jobids for b in made] == [[0, 1, 2], [3, 4, 5], [6]]
    assert made[0].full_reason == (
        "one more like job 2 would make 1200 executions (the shots summed), over the limit "
        "of 1000 a job"
    )
    assert made[0].executables == 3
    heavy = [cand(i, vendor="ibm", device="fez", shots=1, size=900, since=T0 + i)
             for i in range(5)]  # fmt: skip
    made = batches(heavy, limits, DEFAULT)  # 64 + 3 x (900 + 192) = 3340 > 3000
    assert [b.jobids for b in made] == [[0, 1], [2, 3], [4]]
    assert made[0].full_reason == (
        "one more like job 1 would make an input of 3340 bytes, over the limit of 3000 a job"
    )


def test_batches_always_fit_and_hold_every_candidate_once():
    rng = random.Random(2222)
    limits = {
        "forte1": program_sets(20, 3000, (1, 1000)),
        "fez": sampler_jobs(max_executions=5000, max_bytes=20_000),
    }
    for config in (DEFAULT, BANKS, ANYONE):
        for _ in range(60):
            jobs = [
                cand(
                    i,
                    shots=rng.choice([1, 10, 50, 100, 150, 200, 333, 1000]),
                    since=T0 + rng.randint(0, 30),
                    userid=rng.choice([ALICE, BOB, CAROL]),
                    bank=rng.choice(["chem", "phys", "bio", None]),
                    device=rng.choice(["forte1", "fez", "sv1"]),
                    size=rng.randint(50, 3000),
                    opt_out=rng.random() < 0.05,
                )
                for i in range(rng.randint(1, 60))
            ]
            made = batches(jobs, limits, config)
            assert sorted(j for b in made for j in b.jobids) == sorted(c.jobid for c in jobs)
            assert made == batches(list(reversed(jobs)), limits, config)
            assert [b.oldest.order for b in made] == sorted(b.oldest.order for b in made)
            for b in made:
                assert [m.order for m in b.members] == sorted(m.order for m in b.members)
                if b.alone:
                    assert len(b.members) == 1
                    continue
                assert b.limits.problem(b.shots, [m.size for m in b.members]) is None
                for i, x in enumerate(b.members):
                    for y in b.members[i + 1 :]:
                        assert compatible(x, y, config) is None


def test_a_batch_key_names_its_members_in_order():
    made = batches([cand(1), cand(2, since=T0 + 1)], BRAKET, DEFAULT)[0]
    assert made.key == batches([cand(2, since=T0 + 1), cand(1)], BRAKET, DEFAULT)[0].key
    assert made.key.startswith("merge-") and len(made.key) == 22
    assert made.key != batches([cand(1), cand(3, since=T0 + 1)], BRAKET, DEFAULT)[0].key


def test_many_jobs_batch_quickly():
    jobs = [cand(i, vendor="ibm", device="fez", shots=100, since=T0 + i) for i in range(20_000)]
    made = batches(jobs, sampler_jobs(), DEFAULT)
    assert [len(b.members) for b in made] == [20_000]
    # 2 million executions so far: 80,000 more programs of 100 shots before 10 million
    assert made[0].room == (MAX_EXECUTIONS - 2_000_000) // 100
    assert (
        sampler_jobs(max_executions=10**12).room([100] * 20_000, [120] * 20_000, 100, 120)
        == (MAX_INPUT_BYTES - IBM_INPUT_OVERHEAD) // (120 + IBM_PUB_OVERHEAD) - 20_000
    )


# --- the bounded wait -------------------------------------------------------------------------


def one_batch(*jobs: Candidate, limits: Limits = BRAKET, config: MergeConfig = DEFAULT) -> Batch:
    (made,) = batches(jobs, limits, config)
    return made


def test_on_an_idle_device_nothing_waits():
    batch = one_batch(cand(1, since=T0), cand(2, since=T0 + 1), cand(3, since=T0 + 2))
    decision = decide(batch, now=T0 + 2, device_idle=True, expected_queue_wait=600, config=DEFAULT)
    assert decision.send and decision.retry_at is None
    assert decision.reason == "sent 3 jobs as one task on forte1: forte1 is idle, nothing waits"
    alone = one_batch(cand(1))
    decision = decide(alone, now=T0, device_idle=True, expected_queue_wait=None, config=DEFAULT)
    assert decision.reason == "sent alone on forte1: forte1 is idle, nothing waits"
    empty = decide(batch, now=T0 + 2, device_idle=False, expected_queue_wait=0, config=DEFAULT)
    assert empty.send
    assert empty.reason == "sent 3 jobs as one task on forte1: forte1 has no queue, nothing waits"


def test_a_full_batch_goes_at_once():
    batch = one_batch(*(cand(i, shots=20, since=T0 + i, gain=600) for i in range(100)))
    assert batch.full
    decision = decide(batch, now=T0 + 100, device_idle=False, expected_queue_wait=900,
                      config=DEFAULT)  # fmt: skip
    assert decision.send
    assert decision.reason == (
        "sent 100 jobs as one task on forte1: the task is full (one more like job 99 would "
        "make 101 executables of 20 shots, over the limit of 100 a program set)"
    )


def test_a_job_that_is_never_merged_does_not_wait():
    (batch,) = batches([cand(1, opt_out=True, gain=600)], BRAKET, DEFAULT)
    decision = decide(batch, now=T0, device_idle=False, expected_queue_wait=900, config=DEFAULT)
    assert decision.send
    assert decision.reason == "sent alone on forte1: its job opted out (qpu.merge=no)"
    assert explain(batch, decision, 1) == "not merged on forte1: its job opted out (qpu.merge=no)"


def test_a_batch_waits_until_its_oldest_job_s_queue_gain():
    batch = one_batch(cand(1, since=T0, gain=40), cand(2, since=T0 + 5, gain=50),
                      cand(3, since=T0 + 6, gain=100), cand(4, since=T0 + 7, gain=90))  # fmt: skip
    waiting = decide(batch, now=T0 + 7, device_idle=False, expected_queue_wait=300,
                     config=DEFAULT)  # fmt: skip
    assert not waiting.send
    assert waiting.retry_at == waiting.due == T0 + 40
    assert (waiting.bound, waiting.by, waiting.seconds) == (BOUND_GAIN, 1, 40)
    due = clock_time(T0 + 40)
    assert due == "08:00:40Z"
    assert waiting.reason == (
        f"4 jobs wait to merge on forte1: sent when 20 wait or at {due} (job 1's queue gain, 40s)"
    )
    assert explain(batch, waiting, 1) == (
        f"merging with 3 other jobs on forte1: sent when 20 wait or at {due} (its queue gain, 40s)"
    )
    assert explain(batch, waiting, 3) == (
        f"merging with 3 other jobs on forte1: sent when 20 wait or at {due} (job 1's queue "
        "gain, 40s)"
    )
    just_before = decide(batch, now=T0 + 39.999, device_idle=False, expected_queue_wait=300,
                         config=DEFAULT)  # fmt: skip
    assert not just_before.send
    sent = decide(batch, now=T0 + 40, device_idle=False, expected_queue_wait=300, config=DEFAULT)
    assert sent.send and sent.retry_at is None
    assert sent.reason == "sent 4 jobs as one task on forte1: job 1 has waited its queue gain (40s)"
    assert explain(batch, sent, 2) == (
        "merged with 3 other jobs into one task on forte1: job 1 has waited its queue gain (40s)"
    )


def test_a_newer_job_with_less_to_gain_sets_the_end():
    batch = one_batch(cand(1, since=T0, gain=40), cand(2, since=T0 + 10, gain=5))
    decision = decide(batch, now=T0 + 11, device_idle=False, expected_queue_wait=300,
                      config=DEFAULT)  # fmt: skip
    assert (decision.send, decision.retry_at, decision.by) == (False, T0 + 15, 2)
    assert explain(batch, decision, 2) == (
        "merging with 1 other job on forte1: sent when 20 wait or at 08:00:15Z (its queue gain, 5s)"
    )


def test_the_wait_is_capped_by_max_wait_and_by_the_queue():
    slow = one_batch(cand(1, since=T0, gain=3600), cand(2, since=T0 + 1, gain=3600))
    capped = decide(slow, now=T0 + 1, device_idle=False, expected_queue_wait=7200,
                    config=DEFAULT)  # fmt: skip
    assert (capped.retry_at, capped.bound, capped.seconds) == (T0 + 60, BOUND_MAX_WAIT, 60)
    assert capped.reason == (
        "2 jobs wait to merge on forte1: sent when 20 wait or at 08:01:00Z ([quantum.merge] "
        "max_wait, 1m)"
    )
    sent = decide(slow, now=T0 + 60, device_idle=False, expected_queue_wait=7200, config=DEFAULT)
    assert sent.reason == (
        "sent 2 jobs as one task on forte1: job 1 has waited [quantum.merge] max_wait (1m)"
    )
    short = decide(slow, now=T0 + 1, device_idle=False, expected_queue_wait=25, config=DEFAULT)
    assert (short.retry_at, short.bound) == (T0 + 25, BOUND_QUEUE)
    assert explain(slow, short, 2) == (
        "merging with 1 other job on forte1: sent when 20 wait or at 08:00:25Z (the device's "
        "queue wait, 25s)"
    )
    sent = decide(slow, now=T0 + 25, device_idle=False, expected_queue_wait=25, config=DEFAULT)
    assert sent.reason == (
        "sent 2 jobs as one task on forte1: job 1 has waited as long as the device's queue "
        "wait (25s)"
    )
    never = MergeConfig(max_wait=0)
    assert decide(slow, now=T0 + 1, device_idle=False, expected_queue_wait=None,
                  config=never).send  # fmt: skip


def test_an_unknown_gain_waits_for_no_one():
    batch = one_batch(cand(1, gain=None))
    assert wait_bound(batch.oldest, DEFAULT) == (0.0, BOUND_GAIN)
    decision = decide(batch, now=T0, device_idle=False, expected_queue_wait=300, config=DEFAULT)
    assert decision.send
    assert decision.reason == "sent alone on forte1: job 1 has waited its queue gain (0s)"
    assert explain(batch, decision, 1) == (
        "sent alone on forte1, no compatible job waits: job 1 has waited its queue gain (0s)"
    )
    assert wait_bound(cand(2, gain=-5), DEFAULT) == (0.0, BOUND_GAIN)


def test_a_lone_job_waits_for_company_within_its_gain():
    batch = one_batch(cand(1, gain=30))
    decision = decide(batch, now=T0 + 2, device_idle=False, expected_queue_wait=None,
                      config=DEFAULT)  # fmt: skip
    assert not decision.send and decision.retry_at == T0 + 30
    assert decision.reason == (
        "1 job waits to merge on forte1: sent when 20 wait or at 08:00:30Z (job 1's queue "
        "gain, 30s)"
    )
    assert explain(batch, decision, 1) == (
        "waiting to merge on forte1: sent when 20 wait or at 08:00:30Z (its queue gain, 30s)"
    )
    unbounded = one_batch(cand(1, gain=30), limits=Limits(PUBS))
    decision = decide(unbounded, now=T0, device_idle=False, expected_queue_wait=None,
                      config=DEFAULT)  # fmt: skip
    assert decision.reason == (
        "1 job waits to merge on forte1: sent at 08:00:30Z (job 1's queue gain, 30s)"
    )


def test_no_job_ever_waits_longer_than_merging_saves_it():
    """Whatever the batch, the clock and the queue: a batch not sent names a time to ask
    again that is no later than any member's ``since + min(gain, max_wait, queue wait)``,
    and asked then it is sent."""
    rng = random.Random(1234)
    for _ in range(2000):
        config = MergeConfig(max_wait=rng.choice([0, 10, 60, 300]))
        jobs = [
            cand(
                i,
                since=T0 + rng.uniform(0, 100),
                gain=rng.choice([None, 0, 5, 30, 90, 900]),
                shots=rng.choice([10, 20, 50]),
            )  # fmt: skip
            for i in range(rng.randint(1, 8))
        ]
        for batch in batches(jobs, BRAKET, config):
            queue = rng.choice([None, 0.0, 15.0, 120.0, 5000.0])
            now = max(m.since for m in batch.members) + rng.uniform(0, 50)
            idle = rng.random() < 0.1
            decision = decide(batch, now=now, device_idle=idle, expected_queue_wait=queue,
                              config=config)  # fmt: skip
            if idle:
                assert decision.send
            limit = min(
                m.since + min(m.gain or 0.0, config.max_wait, math.inf if queue is None else queue)
                for m in batch.members
            )
            if now >= limit:
                assert decision.send
            if decision.send:
                continue
            assert now < decision.retry_at <= limit
            assert decision.retry_at == limit  # the first member's bound, exactly
            later = decide(batch, now=decision.retry_at, device_idle=False,
                           expected_queue_wait=queue, config=config)  # fmt: skip
            assert later.send


# --- through the vendors to the emulator ------------------------------------------------------

QPU_ARN = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
SV1_ARN = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
TASK_PRICE, SHOT_PRICE = 0.3, 0.00145
CATALOG = parse_catalog(
    f"""
devices:
  - {{name: line5, vendor: braket, id: "{QPU_ARN}", class: qpu, qubits: 5,
     price: {{per_task: {TASK_PRICE}, per_shot: {SHOT_PRICE}}}}}
  - {{name: line, vendor: ibm, id: ibm_line, class: qpu, qubits: 5, price: {{per_minute: 96}}}}
""",
    "merging.yaml",
)
ONE = "OPENQASM 3.0;\nqubit[1] q;\nbit[1] c;\nx q[0];\nc = measure q;\n"
X0 = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nx q[0];\nc = measure q;\n'


def line5(**program_sets: int) -> dict:
    return {
        "extends": "default",
        "devices": [
            {
                "arn": QPU_ARN,
                "name": "Line-5",
                "qubits": 5,
                "cost": {"price": SHOT_PRICE, "unit": "shot", "task_price": TASK_PRICE},
                "shots": [1, 1000],
                "queue": {"service_time": 10.0, "shot_time": 0.001},
                "program_sets": {"max_executables": 100, "max_total_shots": 2000, **program_sets},
            }
        ],
    }


def boto_braket(emu: Emulator):
    return boto3.client(
        "braket",
        region_name="us-east-1",
        endpoint_url=emu.env()["AWS_ENDPOINT_URL_BRAKET"],
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"total_max_attempts": 1}),
    )


def braket_vendor(clock: ManualClock) -> BraketVendor:
    return BraketVendor(
        # A program set's create parses every program in the emulator: on a busy machine
        # (the tests run on every core) that outlasts a 2 s read and the create is retried.
        BraketSettings(connect_timeout=2, read_timeout=30),
        devices=CATALOG.devices,
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
    )


def test_braket_takes_every_batch_and_refuses_what_does_not_fit(make_emulator, manual_clock):
    """Limits read from the device, batches of an awkward mix of shots, each sent as one
    program set: Braket takes every one, and each job gets its own shots back; its bill is
    the shares' sum. A set ``problem`` refuses, Braket (or our vendor) refuses too."""
    emu = make_emulator(line5())
    document = json.loads(boto_braket(emu).get_device(deviceArn=QPU_ARN)["deviceCapabilities"])
    limits = program_set_limits(document)
    assert limits is not None
    rng = random.Random(8)
    jobs = [cand(i, device="line5", shots=rng.choice([10, 20, 25, 50, 100, 150, 7]),
                 size=payload_size(ONE), since=T0 + i) for i in range(60)]  # fmt: skip
    made = batches(jobs, limits, DEFAULT)
    assert len(made) >= 2 and not any(b.alone for b in made)
    vendor = braket_vendor(manual_clock)
    tasks = [vendor.submit_set(CATALOG.get("line5"), [(ONE, s) for s in b.shots], b.key)
             for b in made]  # fmt: skip
    manual_clock.advance(3600)
    total = 0
    for batch, task in zip(made, tasks, strict=True):
        assert vendor.poll(task).state is TaskState.COMPLETED
        assert [dict(r.counts) for r in vendor.results(task)] == [{"1": s} for s in batch.shots]
        row = next(t for t in emu.report()["bill"]["tasks"] if t["id"] == task.task_id)
        assert row["executables"] == batch.executables
        shares = cost_shares(TASK_PRICE, SHOT_PRICE, batch.shots)
        assert sum(cents(shares)) == round(task_bill(TASK_PRICE, SHOT_PRICE, batch.shots) * 100)
        assert abs(sum(shares) - row["cost"]) <= 0.005 + 1e-9  # the emulator's bill, to the cent
        assert price_shares(CATALOG.get("line5").price, batch.shots) == shares
        total += len(batch.members)
    assert total == len(jobs)

    over = {
        "executables": [7, 10] * 8,  # gcd 1: 136 executables
        "shots": [1000, 1000, 100],
        "range": [1500, 1500],  # executables of 1500 shots: the device runs at most 1000
    }
    for name, shots in over.items():
        problem = limits.problem(shots, [payload_size(ONE)] * len(shots))
        assert problem is not None, name
        with pytest.raises(errors.InvalidRequest):
            vendor.submit_set(CATALOG.get("line5"), [(ONE, s) for s in shots], f"over-{name}")
    assert len(emu.task_arns()) == len(made)


def test_braket_s_layout_tag_bound_is_our_vendor_s(make_emulator, manual_clock):
    make_emulator(line5(max_executables=1000, max_total_shots=100_000))
    limits = program_sets(1000, 100_000, (1, 1000))
    vendor = braket_vendor(manual_clock)
    fits, over = [1, 2] * 64, [1, 2] * 65  # layouts of 255 and 259 characters
    assert limits.problem(fits, [1] * len(fits)) is None
    assert "over the 256 a task tag holds" in limits.problem(over, [1] * len(over))
    vendor.submit_set(CATALOG.get("line5"), [(ONE, s) for s in fits], "tag-fits")
    with pytest.raises(errors.InvalidRequest, match="longer than a Braket tag holds"):
        vendor.submit_set(CATALOG.get("line5"), [(ONE, s) for s in over], "tag-over")


@pytest.mark.emulator
def test_ibm_takes_every_batch_within_its_limits(manual_clock):
    scenario = IbmScenario.from_dict(
        {
            "backends": [{"name": "ibm_line", "qubits": 5,
                          "queue": {"depth": 0, "service_time": 1, "shot_time": 0.001}}],
            "max_executions": 1000,
            "max_input_bytes": 2500,
        }
    )  # fmt: skip
    emu = Emulator(clock=manual_clock, ibm=scenario).start()
    try:
        ibm = IbmVendor(
            IbmSettings(settle=0.0),
            devices=CATALOG.devices,
            retry=RetryBudget(attempts=3, base_delay=0.01),
            clock=lambda: manual_clock.epoch.timestamp() + manual_clock.now(),
            sleep=lambda seconds: None,
            environ=emu.ibm.env(emu.url),
        )
        limits = sampler_jobs(max_executions=1000, max_bytes=2500)
        rng = random.Random(11)
        jobs = [cand(i, device="line", vendor="ibm", shots=rng.choice([50, 100, 300]),
                     size=payload_size(X0), since=T0 + i) for i in range(25)]  # fmt: skip
        made = batches(jobs, limits, DEFAULT)
        assert len(made) > 3 and any(b.full for b in made)
        for batch in made:
            task = ibm.submit_set(CATALOG.get("line"), [(X0, s) for s in batch.shots], batch.key)
            manual_clock.advance(600)
            assert ibm.poll(task).state is TaskState.COMPLETED
            assert [dict(r.counts) for r in ibm.results(task)] == [{"10": s} for s in batch.shots]
            seconds = ibm.billed_seconds(task)
            assert seconds is not None
            split = usage_shares(seconds, batch.shots, quantum=0.001)
            assert sum(round(s * 1000) for s in split) == round(seconds * 1000)
            price = CATALOG.get("line").price
            shares = price_shares(price, batch.shots, seconds)
            assert sum(cents(shares)) == bill_cents(price, batch.total_shots, seconds)
        assert len(emu.ibm.job_ids()) == len(made)
        # one more program in a batch full of executions is refused by IBM's validation
        fullest = next(b for b in made if b.full and "executions" in (b.full_reason or ""))
        with pytest.raises(errors.InvalidRequest) as raised:
            ibm.submit_set(
                CATALOG.get("line"),
                [(X0, s) for s in [*fullest.shots, fullest.members[-1].shots]],
                "over-1",
            )
        assert raised.value.vendor_code == "1002"
    finally:
        emu.stop()


def test_alone_reason_is_what_batches_say():
    for job in (cand(1, opt_out=True), cand(2, session="dedicated"), cand(3)):
        (batch,) = batches([job], BRAKET, DEFAULT)
        assert batch.alone == alone_reason(job, DEFAULT)


def test_a_complete_batch_of_two_or_more_goes_at_once_a_lone_job_still_waits():
    pair = batches([cand(1, since=T0), cand(2, since=T0 + 1)], BRAKET, DEFAULT)
    (batch,) = pair
    waiting = decide(batch, now=T0 + 2, device_idle=False, expected_queue_wait=900, config=DEFAULT)
    assert not waiting.send
    done = decide(
        batch,
        now=T0 + 2,
        device_idle=False,
        expected_queue_wait=900,
        config=DEFAULT,
        complete=True,
    )
    assert done.send and done.cause == "no other job is on its way"
    assert explain(batch, done, 1) == (
        "merged with 1 other job into one task on forte1: no other job is on its way"
    )
    (lone,) = batches([cand(1, since=T0)], BRAKET, DEFAULT)
    still = decide(
        lone, now=T0 + 2, device_idle=False, expected_queue_wait=900, config=DEFAULT, complete=True
    )
    assert not still.send
