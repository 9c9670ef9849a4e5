"""Quota deciders ([quantum.quota]): the table's validation, day and month windows in the
site's timezone, estimated and actual cost, and the decision for a charge against limits
by user, by bank and by period, with device filters and the job's qpu.max_cost."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from catalogs import DEVICES, catalog_of

from flux_quantum.site.quota import (
    Charge,
    QuotaConfig,
    QuotaConfigError,
    Usage,
    actual_cost,
    applicable,
    decide,
    estimate_cost,
    expected_seconds,
    format_money,
    period_window,
)

CATALOG = catalog_of("sv1", "tn1", "forte1", "garnet")
SV1, TN1, FORTE, GARNET = (CATALOG.get(n) for n in ("sv1", "tn1", "forte1", "garnet"))
JUNE_3 = datetime(2025, 6, 3, 15, 30, tzinfo=UTC).timestamp()

SITE = QuotaConfig.from_config(
    {
        "limits": [
            {"name": "user-monthly", "user": "*", "period": "month", "spend": 100.0},
            {"bank": "chem", "period": "day", "spend": 50.0, "tasks": 3, "classes": ["qpu"]},
            {"user": "carol", "period": "day", "tasks": 2},
        ]
    }
)


def charge(device=FORTE, shots=1000, user="alice", bank="chem", **kw) -> Charge:
    fields = dict(token="t1", jobid=7, userid=1000, user=user, bank=bank, shots=shots, t=JUNE_3)
    fields.update(kw)
    return Charge.for_device(device, **fields)  # type: ignore[arg-type]


def test_estimates_and_actual_costs() -> None:
    assert estimate_cost(FORTE.price, 1000) == pytest.approx(80.30)
    assert estimate_cost(GARNET.price, 1000) == pytest.approx(1.75)
    # simulators: per minute of expected run time, never below the 3 s minimum
    assert estimate_cost(SV1.price, 1000) == pytest.approx(0.075 * 3 / 60)
    assert estimate_cost(SV1.price, 1000, 120) == pytest.approx(0.15)
    assert actual_cost(SV1.price, 1000, 1.2) == pytest.approx(0.075 * 3 / 60)
    assert actual_cost(SV1.price, 1000, 600) == pytest.approx(0.75)
    # expected run time: history once there are 3 samples, else the catalog, else none
    assert expected_seconds(SV1) is None
    assert expected_seconds(TN1) == 120.0
    assert expected_seconds(TN1, [10.0, 30.0]) == 120.0
    assert expected_seconds(TN1, [10.0, 30.0, 50.0]) == 30.0
    assert expected_seconds(FORTE, [10.0, 30.0, 50.0]) is None  # not time-billed
    assert charge(TN1).estimate == pytest.approx(0.275 * 2)
    assert charge(SV1, history=[60.0, 60.0, 60.0]).estimate == pytest.approx(0.075)
    assert format_money(80.3) == "$80.30"
    assert format_money(0.00375) == "$0.0037"
    assert format_money(1234.5, "EUR") == "1,234.50 EUR"


def test_period_windows_in_the_site_timezone() -> None:
    day = period_window(JUNE_3, "day")
    assert (day.label, day.end - day.start) == ("2025-06-03", 86400)
    month = period_window(JUNE_3, "month")
    assert month.label == "2025-06"
    assert month.start == datetime(2025, 6, 1, tzinfo=UTC).timestamp()
    assert month.end == datetime(2025, 7, 1, tzinfo=UTC).timestamp()
    december = period_window(datetime(2025, 12, 31, 23, tzinfo=UTC).timestamp(), "month")
    assert december.end == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    # 23:30 UTC on June 3 is already June 4 in Paris; a DST change makes a 23-hour day
    paris = ZoneInfo("Europe/Paris")
    late = datetime(2025, 6, 3, 23, 30, tzinfo=UTC).timestamp()
    assert period_window(late, "day", paris).label == "2025-06-04"
    spring = period_window(datetime(2025, 3, 30, 12, tzinfo=UTC).timestamp(), "day", paris)
    assert spring.end - spring.start == 23 * 3600
    with pytest.raises(ValueError):
        period_window(JUNE_3, "week")


def test_which_limits_apply() -> None:
    # alice (bank chem) on a QPU: her own monthly limit and chem's daily QPU limit
    assert [limit.index for limit, _ in applicable(SITE, charge())] == [1, 2]
    # on a simulator, chem's QPU-only limit does not count
    assert [limit.index for limit, _ in applicable(SITE, charge(SV1))] == [1]
    # no bank (no flux-accounting): bank limits do not apply
    assert [limit.index for limit, _ in applicable(SITE, charge(bank=None))] == [1]
    # carol's own task limit, by name or by uid
    assert [limit.index for limit, _ in applicable(SITE, charge(user="carol"))] == [1, 2, 3]
    by_uid = QuotaConfig.from_config({"limits": [{"user": 1000, "period": "day", "tasks": 1}]})
    assert len(applicable(by_uid, charge(user=None))) == 1
    assert applicable(by_uid, charge(userid=1001)) == []


# flux-accounting's tree: root -> sciences -> (chem, physics), root -> guests
TREE = {
    "root": frozenset({"root", "sciences", "chem", "physics", "guests"}),
    "sciences": frozenset({"sciences", "chem", "physics"}),
    "chem": frozenset({"chem"}),
    "physics": frozenset({"physics"}),
    "guests": frozenset({"guests"}),
}


def test_a_limit_on_a_parent_bank_counts_its_sub_banks() -> None:
    quota = QuotaConfig.from_config(
        {
            "limits": [
                {"bank": "sciences", "period": "day", "tasks": 2},
                {"bank": "*", "period": "day", "spend": 10.0},
                {"bank": "chem", "period": "day", "spend": 5.0},
            ]
        }
    ).with_banks(TREE, "flux-accounting's database /db")
    sciences, each, chem = quota.limits
    physics = charge(GARNET, bank="physics")
    # sciences counts a physics task as its own, with every bank under it
    assert sciences.subject(physics) == "sciences"
    assert sciences.banks(physics) == ("chem", "physics", "sciences")
    # "*" is each bank on its own; a leaf bank is itself alone
    assert (each.subject(physics), each.banks(physics)) == ("physics", ("physics",))
    assert chem.subject(physics) is None
    assert [limit.index for limit, _ in applicable(quota, physics)] == [1, 2]
    assert applicable(quota, charge(GARNET, bank="guests"))[0][0].index == 2
    decision = decide(physics, applicable(quota, physics), [Usage(3.5, 2), Usage(0.0, 0)])
    assert not decision.allowed
    assert decision.reason == (
        "over quota: [quantum.quota] limit 1: bank sciences with its sub-banks, 2 tasks a"
        " day; 2 tasks this day (2025-06-03)"
    )
    # without flux-accounting's tree a named bank is that bank alone, as before
    plain = QuotaConfig.from_config({"limits": [{"bank": "sciences", "period": "day", "tasks": 2}]})
    assert applicable(plain, physics) == []


def test_a_limit_naming_a_bank_flux_accounting_does_not_have_is_refused() -> None:
    quota = QuotaConfig.from_config(
        {"limits": [{"user": "*", "period": "day", "tasks": 9},
                    {"bank": "biology", "period": "day", "spend": 5.0}]}
    )  # fmt: skip
    with pytest.raises(QuotaConfigError) as refused:
        quota.with_banks(TREE, "flux-accounting's database /var/lib/flux/FluxAccounting.db")
    assert str(refused.value) == (
        "[quantum.quota] limits[2].bank 'biology' is not a bank in flux-accounting's database"
        " /var/lib/flux/FluxAccounting.db"
    )


def check(c: Charge, *used: Usage, job_spent: float = 0.0):
    return decide(c, applicable(SITE, c), list(used), job_spent)


def test_a_charge_within_every_limit_fits() -> None:
    decision = check(charge(GARNET), Usage(20.0, 3), Usage(10.0, 1))
    assert decision.allowed
    # the tightest spend limit: chem has 50 - 10 - 1.75 left today
    assert decision.reason == (
        "within quota: $38.25 left after it of [quantum.quota] limit 2: bank chem, $50.00 and"
        " 3 tasks a day on class qpu"
    )
    assert [c.fits for c in decision.checks] == [True, True]


def test_over_a_spend_limit_names_the_limit_the_spend_and_the_cost() -> None:
    decision = check(charge(), Usage(20.0, 3), Usage(0.0, 0))
    assert not decision.allowed
    assert decision.limit is not None and decision.limit.index == 1
    assert decision.reason == (
        "over quota: [quantum.quota] limit 1 'user-monthly': user alice, $100.00 a month;"
        " $20.00 spent or reserved this month (2025-06), this task on forte1 would cost $80.30"
    )
    # exactly at the limit still fits (no bank: chem's $50 a day does not apply)
    assert check(charge(bank=None), Usage(19.70, 3)).allowed


def test_over_a_task_limit_and_the_first_limit_in_file_order_wins() -> None:
    decision = check(charge(GARNET), Usage(0.0, 0), Usage(1.0, 3))
    assert not decision.allowed
    assert decision.reason == (
        "over quota: [quantum.quota] limit 2: bank chem, $50.00 and 3 tasks a day on class qpu;"
        " 3 tasks this day (2025-06-03)"
    )
    both = check(charge(), Usage(99.0, 0), Usage(49.0, 3))
    assert both.limit is not None and both.limit.index == 1
    assert [c.fits for c in both.checks] == [False, False]


def test_the_jobs_cap_counts_its_other_tasks() -> None:
    capped = charge(GARNET, job_cap=5.0)
    assert check(capped, Usage(), Usage(), job_spent=3.25).allowed
    refused = check(capped, Usage(), Usage(), job_spent=3.5)
    assert not refused.allowed
    assert refused.reason == (
        "over the job's cap: qpu.max_cost is $5.00, the job has $3.50 spent or reserved and this"
        " task on garnet would cost $1.75"
    )


def test_a_batch_is_checked_whole_before_its_first_task() -> None:
    """A batch's bound: all its tasks' spend and count at once, said as the batch."""
    whole = replace(charge(GARNET), estimate=10 * charge(GARNET).estimate)
    fits = decide(whole, applicable(SITE, whole), [Usage(20.0, 3), Usage(30.0, 0)], tasks=3)
    assert fits.allowed, fits.reason  # $17.50 of chem's $20 left today, 3 tasks of its 3
    spend = decide(whole, applicable(SITE, whole), [Usage(20.0, 3), Usage(33.0, 0)], tasks=3)
    assert not spend.allowed
    assert spend.reason == (
        "over quota: [quantum.quota] limit 2: bank chem, $50.00 and 3 tasks a day on class qpu;"
        " $33.00 spent or reserved this day (2025-06-03), its 3 tasks may cost up to $17.50"
    )
    count = decide(whole, applicable(SITE, whole), [Usage(0.0, 0), Usage(0.0, 1)], tasks=3)
    assert not count.allowed
    assert count.reason.endswith("1 task this day (2025-06-03), and the job would add 3"), count
    # One task of the same batch would have fitted: only the whole is refused.
    one = charge(GARNET)
    assert decide(one, applicable(SITE, one), [Usage(0.0, 0), Usage(0.0, 1)]).allowed


def test_no_limits_means_anything_fits() -> None:
    decision = decide(charge(), [], [])
    assert (
        decision.allowed
        and decision.reason == "no limit applies; this task on forte1 would cost $80.30"
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("x", "[quantum.quota] must be a table, got 'x'"),
        ({"limit": []}, "[quantum.quota] has an unknown key 'limit' (accepted: timezone, limits)"),
        ({"timezone": "Mars/Olympus"},
         "[quantum.quota] timezone must be an IANA time zone such as UTC or Europe/Paris,"
         " got 'Mars/Olympus'"),
        ({"limits": {}}, "[quantum.quota] limits must be a list of tables"),
        ({"limits": [{"period": "day", "spend": 1}]},
         '[quantum.quota] limits[1] needs exactly one of user or bank (a name, or "*")'),
        ({"limits": [{"user": "a", "bank": "b", "period": "day", "spend": 1}]},
         '[quantum.quota] limits[1] needs exactly one of user or bank (a name, or "*")'),
        ({"limits": [{"user": "*", "period": "week", "spend": 1}]},
         "[quantum.quota] limits[1].period must be \"day\" or \"month\", got 'week'"),
        ({"limits": [{"user": "*", "period": "day"}]},
         "[quantum.quota] limits[1] needs spend, tasks or both"),
        ({"limits": [{"user": "*", "period": "day", "spend": -1}]},
         "[quantum.quota] limits[1].spend must be a number >= 0, got -1"),
        ({"limits": [{"user": "*", "period": "day", "tasks": 1.5}]},
         "[quantum.quota] limits[1].tasks must be an integer >= 0, got 1.5"),
        ({"limits": [{"user": True, "period": "day", "tasks": 1}]},
         '[quantum.quota] limits[1].user must be a name or "*", got True'),
        ({"limits": [{"user": "*", "period": "day", "tasks": 1, "classes": "qpu"}]},
         "[quantum.quota] limits[1].classes must be a non-empty list of names, got 'qpu'"),
        ({"limits": [{"user": "*", "period": "day", "tasks": 1, "cost": 1}]},
         "[quantum.quota] limits[1] has an unknown key 'cost' (accepted: name, user, bank,"
         " period, spend, tasks, devices, vendors, classes)"),
    ],
)  # fmt: skip
def test_bad_tables_name_the_key(table: object, message: str) -> None:
    with pytest.raises(QuotaConfigError) as caught:
        QuotaConfig.from_config(table)
    assert str(caught.value) == message


def test_config_defaults() -> None:
    assert QuotaConfig.from_config(None) == QuotaConfig()
    paris = QuotaConfig.from_config({"timezone": "Europe/Paris"})
    assert paris.zone == ZoneInfo("Europe/Paris")


def test_the_catalogs_currency() -> None:
    from flux_quantum.catalog import CatalogError, parse_catalog

    euro = parse_catalog("currency: EUR\n" + "devices:\n  - " + DEVICES["garnet"] + "\n")
    assert euro.currency == "EUR"
    assert catalog_of("garnet").currency == "USD"
    with pytest.raises(CatalogError) as caught:
        parse_catalog("currency: euro\ndevices:\n  - " + DEVICES["garnet"] + "\n", "c.yaml")
    assert str(caught.value) == (
        "c.yaml: currency must be an ISO 4217 code such as USD or EUR, got 'euro'"
    )
    refused = decide(charge(GARNET, job_cap=1.0), [], [], currency="EUR")
    assert refused.reason.startswith("over the job's cap: qpu.max_cost is 1.00 EUR")
