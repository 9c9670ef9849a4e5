"""flux-accounting in a test instance, as a site runs it: its database, its service, its
``mf_priority.so`` jobtap plugin and its periodic update cycle; and its database alone
for the unit tier, made by its own Python package (``fluxacct``, in flux-core's Python:
``flux python``) with no instance.

``MISSING`` says, in one line, why the tests that need flux-accounting cannot run here
(its commands or its plugin are not installed beside flux-core), or is None;
``DATABASE_MISSING`` the same for the unit tier (``fluxacct`` and the update commands).
``plugins_config`` puts ``mf_priority.so`` before or after the quantum plugin in the
instance's ``[job-manager] plugins``; ``Accounting`` drives the real ``flux account``
commands against a database in the test's directory. Guests are submitted as another
userid, signed with flux-security's ``none`` mechanism as flux-accounting's and
flux-core's own tests do (a test instance accepts it from its owner).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from catalogs import catalog_of
from fluxinstance import FluxInstance, quantum_config

from flux_quantum.site.accounting import AccountingDatabase
from flux_quantum.site.ledger import Ledger
from flux_quantum.site.quota import Charge, QuotaConfig

PLUGIN_NAME = "mf_priority.so"
SIGN_AS = (
    "import sys; from flux.security import SecurityContext; "
    "sys.stdout.write(SecurityContext().sign_wrap_as(int(sys.argv[1]), sys.stdin.read(), "
    'mech_type="none").decode())'
)


def mf_priority_path() -> Path | None:
    """Where flux-core looks for jobtap plugins, holding flux-accounting's."""
    flux = shutil.which("flux")
    if flux is None:
        return None
    out = subprocess.run(
        ["flux", "config", "builtin", "jobtap_pluginpath"], capture_output=True, text=True
    )
    for directory in out.stdout.strip().split(":"):
        path = Path(directory) / PLUGIN_NAME
        if directory and path.exists():
            return path
    return None


def missing() -> str | None:
    if shutil.which("flux") is None:
        return "flux-accounting tests SKIPPED: `flux` is not on PATH"
    if (
        mf_priority_path() is None
        or shutil.which("flux-account") is None
        and (subprocess.run(["flux", "account", "--help"], capture_output=True).returncode != 0)
    ):
        return (
            "flux-accounting tests SKIPPED: flux-accounting (v0.60.0: `flux account`, "
            f"{PLUGIN_NAME}) is not installed beside flux-core; build it as its README says"
        )
    return None


MISSING = missing()

MAKE_DATABASE = """
import json, sqlite3, sys
from fluxacct.accounting import create_db, bank_subcommands, user_subcommands
spec = json.loads(sys.argv[2])
create_db.create_db(sys.argv[1])
conn = sqlite3.connect(sys.argv[1])
for bank, parent in spec["banks"]:
    bank_subcommands.add_bank(conn, bank=bank, shares=1, parent_bank=parent)
for name, uid, bank in spec["users"]:
    user_subcommands.add_user(conn, username=name, bank=bank, uid=uid)
conn.commit()
"""


def database_missing() -> str | None:
    if shutil.which("flux") is None:
        return "flux-accounting database tests SKIPPED: `flux` is not on PATH"
    probe = subprocess.run(
        ["flux", "python", "-c", "import fluxacct.accounting.create_db"],
        capture_output=True,
        text=True,
    )
    if (
        probe.returncode != 0
        or shutil.which("flux-account-update-usage") is None
        and (
            subprocess.run(
                ["flux", "account-update-usage", "--help"], capture_output=True
            ).returncode
        )
    ):
        return (
            "flux-accounting database tests SKIPPED: flux-accounting (v0.60.0: its Python "
            "package fluxacct, `flux account-update-usage`) is not installed beside flux-core"
        )
    return None


DATABASE_MISSING = database_missing()


def make_database(
    path: Path, banks: Sequence[tuple[str, str]], users: Sequence[tuple[str, int, str]]
) -> Path:
    """A flux-accounting database at ``path`` made by flux-accounting itself: ``banks``
    as (name, parent; "" for the root), ``users`` as (name, uid, bank; the first bank of
    a user is their default)."""
    import json

    spec = json.dumps({"banks": list(banks), "users": list(users)})
    done = subprocess.run(
        ["flux", "python", "-c", MAKE_DATABASE, str(path), spec], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return path


def update_usage(path: Path, *steps: str) -> None:
    """flux-accounting's own update of ``path`` (no instance needed): its usage and then
    fair-share, or the commands named."""
    for step in steps or ("account-update-usage", "account-update-fshare"):
        done = subprocess.run(["flux", step, "-p", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, f"flux {step}: {done.stderr}"


def plugins_config(order: str, **plugin_conf: int) -> str:
    """The instance TOML of ``flux quantum config`` with ``mf_priority.so`` loaded
    ``before`` or ``after`` the quantum plugin."""
    config = quantum_config(**plugin_conf)
    start = "plugins = [ "
    line = next(ln for ln in config.splitlines() if ln.startswith(start))
    quantum = line[len(start) : -len(" ]")]
    mf = f'{{ load = "{mf_priority_path()}" }}'
    entries = [mf, quantum] if order == "before" else [quantum, mf]
    return config.replace(line, start + ", ".join(entries) + " ]")


class Accounting:
    """flux-accounting's database and service for ``inst``: banks, associations, and
    the update cycle a site runs from cron."""

    def __init__(self, inst: FluxInstance) -> None:
        self.inst = inst
        self.db = inst.workdir / "FluxAccounting.db"
        self.log = inst.workdir / "flux-account-service.log"
        self.service: subprocess.Popen[bytes] | None = None

    def account(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.inst.run(["flux", "account", *args], check=check)

    def start(self) -> Accounting:
        self.inst.run(["flux", "account", "-p", str(self.db), "create-db"])
        with open(self.log, "ab") as log:
            self.service = subprocess.Popen(
                ["flux", "account-service", "-p", str(self.db)],
                env=self.inst.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while self.account("list-configs", check=False).returncode != 0:
            if self.service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"flux account-service did not start: {self.log.read_text()}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self.service is None:
            return
        self.inst.run(
            [
                "flux",
                "python",
                "-c",
                "import flux; flux.Flux().rpc('accounting.shutdown_service').get()",
            ],
            check=False,
            timeout=30,
        )
        try:
            self.service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.service.kill()
            self.service.wait()
        self.service = None

    def banks(self, parent: str, *children: str) -> None:
        self.account("add-bank", parent, "1")
        for child in children:
            self.account("add-bank", f"--parent-bank={parent}", child, "1")

    def user(self, name: str, userid: int, bank: str, *more: str) -> None:
        self.account(
            "add-user", f"--username={name}", f"--userid={userid}", f"--bank={bank}", *more
        )

    def update(self) -> None:
        """One turn of the site's cycle: fetch the finished jobs, recompute usage and
        fair-share, send them to the plugin."""
        db = str(self.db)
        for command in (
            ["flux", "account-fetch-job-records", "-p", db],
            ["flux", "account-update-usage", "-p", db],
            ["flux", "account-update-fshare", "-p", db],
            ["flux", "account-priority-update", "-p", db],
        ):
            self.inst.run(command)

    def submit_as(self, userid: int, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """``flux submit ARGS`` as guest ``userid`` (signed for it); the completed
        process (stdout: the job id)."""
        spec = self.inst.run(["flux", "submit", "--dry-run", *args]).stdout
        signed = self.inst.run(["flux", "python", "-c", SIGN_AS, str(userid)], input=spec).stdout
        return self.inst.run(
            ["flux", "job", "submit", "--flags=signed"],
            input=signed,
            env={"FLUX_HANDLE_USERID": str(userid)},
            check=False,
        )


# --- what the unit tests of the feed and the cycle share ------------------------------

ALICE, BOB, CAROL, DAVE = 5011, 5012, 5014, 5015
GARNET = catalog_of("garnet").get("garnet")
NO_LIMITS = QuotaConfig()
WEIGHT = 100.0  # usage per dollar


def settle(ledger: Ledger, token: str, userid: int, user: str, bank: str | None, cost: float):
    """A task of ``user`` in ``bank`` reserved and settled at ``cost``."""
    charge = Charge.for_device(
        GARNET, token=token, jobid=1, userid=userid, user=user, bank=bank, shots=100,
        t=time.time(),
    )  # fmt: skip
    assert ledger.reserve(charge, NO_LIMITS).allowed
    ledger.settle(token, cost, now=time.time())


def classical_job(database: Path, jobid: int, userid: int, bank: str, t_run: float,
                  t_inactive: float, nodes: int = 1) -> None:  # fmt: skip
    """A finished job's row as ``flux account-fetch-job-records`` writes it."""
    ranks = ",".join(str(r) for r in range(nodes))
    resources = {
        "version": 1,
        "execution": {
            "R_lite": [{"rank": f"0-{nodes - 1}" if nodes > 1 else "0",
                        "children": {"core": "0-3"}}],
            "nodelist": [f"node[0-{nodes - 1}]" if nodes > 1 else "node0"],
            "starttime": t_run,
            "expiration": t_inactive,
        },
    }  # fmt: skip
    jobspec = {"version": 1, "attributes": {"system": {"bank": bank, "duration": 0}}}
    with closing(sqlite3.connect(database)) as db:
        db.execute(
            "INSERT INTO jobs (id, userid, t_submit, t_run, t_inactive, ranks, R, jobspec,"
            " project, bank, requested_duration, actual_duration)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, 0, ?)",
            (jobid, userid, t_run, t_run, t_inactive, ranks, json.dumps(resources),
             json.dumps(jobspec), bank, t_inactive - t_run),
        )  # fmt: skip
        db.commit()


def associations(database: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(user, bank): (job_usage, fairshare), flux-accounting's."""
    db = AccountingDatabase(database)
    try:
        return {(a.user, a.bank): (a.job_usage, a.fairshare) for a in db.associations()}
    finally:
        db.close()
