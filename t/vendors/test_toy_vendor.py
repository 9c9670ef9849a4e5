"""Unit tier: a vendor added from a package of its own (``t/toy_vendor``: ``toyvendor`` and
its dist-info, as pip installs one) with no file of flux-quantum edited.

With the toy's folder on ``sys.path`` and the registry of vendors read again, the
catalog takes its devices and settings, the ``qpu`` request parser takes ``toy:DEVICE``,
the program-kind rules and the credential refusal apply its descriptor's, and
``make_vendor`` builds it from the catalog, ready to probe and to run a task; the merged
tasks it declares are what the site's merging fills, its reserved windows what the
``[[quantum.reservations]]`` tables take, and its warm-up what the service runs. The same
toy, laid beside a copy of the ``flux_quantum`` package in a Python that has no
site-packages at all, is what the CLI plugin (loaded by path, as Flux's own Python loads
it) sees.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import flux_quantum
from flux_quantum.catalog import CatalogError, parse_catalog
from flux_quantum.protocol import vendors
from flux_quantum.protocol.merged_tasks import PUBS, Limits
from flux_quantum.protocol.request import (
    RequestError,
    credential_refusal,
    credential_variables,
    parse_request,
)
from flux_quantum.selection.program_kinds import cannot_run, program_reason
from flux_quantum.service.runner import warm_ups
from flux_quantum.site.merging import Candidate, MergeConfig, batches, device_limits
from flux_quantum.site.reservations import (
    ReservationBook,
    ReservationConfigError,
    vendor_of,
    windows_on,
)
from flux_quantum.vendors import errors
from flux_quantum.vendors.factory import make_vendor
from flux_quantum.vendors.probing import probe_devices

TOY = Path(__file__).parents[1] / "toy_vendor"
CATALOG = """
vendors:
  toy: {endpoint: "toy://site", queue: 7}
devices:
  - {name: toy-dev, vendor: toy, id: toy/eu-west-1/dev, class: qpu, qubits: 3,
     price: {per_task: 0.1}}
  - {name: toy-down, vendor: toy, id: toy/eu-west-1/dev-down, class: qpu, qubits: 3,
     price: {per_task: 0.1}}
  - {name: toy-shared, vendor: toy, id: toy/eu-west-1/dev-shared, class: qpu, qubits: 3,
     price: {per_task: 0.1}}
"""
BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"
PULSER = '{"register": [{"name": "q0", "x": 0, "y": 0}], "channels": {}, "operations": []}'


def toy_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The toy distribution installed (on ``sys.path``) and the vendors found again."""
    site = tmp_path / "site"
    shutil.copytree(TOY, site, ignore=shutil.ignore_patterns("__pycache__", "*.md"))
    monkeypatch.syspath_prepend(str(site))
    vendors.refresh()
    yield site
    monkeypatch.undo()
    for name in [m for m in sys.modules if m == "toyvendor" or m.startswith("toyvendor.")]:
        del sys.modules[name]
    vendors.refresh()


def test_the_toy_is_its_package_and_its_metadata_alone(toy: Path) -> None:
    # What adding the vendor took: its own package and what pip writes beside it.
    assert {path.split("/")[0] for path in toy_files(toy)} == {
        "toyvendor",
        "toyvendor-0.1.dist-info",
    }
    # And nothing of flux-quantum's names it.
    package = Path(flux_quantum.__file__).parent
    for source in package.rglob("*.py"):
        assert "toyvendor" not in source.read_text(), source


def test_the_registry_takes_the_toy_after_the_vendors_shipped(toy: Path) -> None:
    shipped = vendors.find(path=[]).names()  # flux-quantum's package alone
    assert "local" in shipped and "toy" not in shipped
    assert vendors.vendor_names() == (*shipped, "toy")
    assert vendors.registry().problems == ()


def test_the_catalog_takes_its_devices_and_settings(toy: Path) -> None:
    catalog = parse_catalog(CATALOG, "toy.yaml")
    device = catalog.get("toy-dev")
    assert device is not None and device.vendor == "toy"
    assert device.region == "eu-west-1"  # read from the id by the toy's descriptor
    assert dict(catalog.settings("toy")) == {"endpoint": "toy://site", "queue": "7"}
    with pytest.raises(CatalogError, match=r"device 'bad': id must be toy/REGION/NAME, got 'x'"):
        parse_catalog(
            "devices:\n  - {name: bad, vendor: toy, id: x, class: qpu, qubits: 1,"
            " price: {per_task: 1}}\n"
        )
    with pytest.raises(
        CatalogError, match=r"vendors.toy: unknown setting 'url' \(accepted: endpoint, queue\)"
    ):
        parse_catalog("vendors:\n  toy: {url: x}\n" + CATALOG.split("\n", 3)[3])


def test_the_request_parser_takes_toy_devices(toy: Path) -> None:
    request = parse_request("toy:toy-dev")
    assert (request.vendor, request.device) == ("toy", "toy-dev")
    assert parse_request({"vendor": "toy", "policy": "min-cost"}).vendor == "toy"
    with pytest.raises(RequestError, match=r"a VENDOR from braket, .*, local, toy, got 'toys:x'"):
        parse_request("toys:x")


def test_its_program_kinds_and_check_apply(toy: Path) -> None:
    catalog = parse_catalog(CATALOG, "toy.yaml")
    assert cannot_run(BELL, catalog.devices) == {}
    refused = cannot_run(PULSER, catalog.devices)
    assert refused["toy-dev"] == (
        "takes OpenQASM circuits only (toy), the program is a Pulser sequence"
    )
    wide = "OPENQASM 3.0;\nqubit[5] q;\n"
    assert program_reason("toy", 3, wide) == (
        "the program declares 5 qubits and the toy device has 3"
    )


def test_a_job_carrying_its_credentials_is_refused(toy: Path) -> None:
    environment = {"TOY_API_KEY": "k", "SITE_TOY_TOKEN": "t", "PATH": "/bin"}
    held = credential_variables({"environment": environment})
    assert held == ["SITE_TOY_TOKEN", "TOY_API_KEY"]
    assert "--env=-SITE_TOY_TOKEN --env=-TOY_API_KEY" in credential_refusal(held)


def test_make_vendor_builds_it_from_the_catalog_and_it_probes_and_runs(toy: Path) -> None:
    catalog = parse_catalog(CATALOG, "toy.yaml")
    vendor = make_vendor("toy", catalog, timeout=3.0, clock=lambda: 1000.0)
    assert type(vendor).__module__ == "toyvendor.vendor" and vendor.name == "toy"
    settings = vendor.settings  # type: ignore[attr-defined]
    assert (settings.endpoint, settings.queue, settings.timeout) == ("toy://site", 7, 3.0)
    snapshots = probe_devices(catalog.devices, {"toy": vendor}, timeout=5.0)
    assert snapshots["toy-dev"].status.value == "ONLINE"
    assert snapshots["toy-dev"].queue_depth == 7
    # A call its client refuses reads through the descriptor's error mapping.
    assert snapshots["toy-down"].status.value == "UNREACHABLE"
    assert "VendorUnavailable: toy probe for toy-down failed" in (
        snapshots["toy-down"].reason or ""
    )
    task = vendor.submit(catalog.devices[0], BELL, 10, token="t-1")
    assert vendor.submit(catalog.devices[0], BELL, 10, token="t-1") == task
    assert vendor.result(task).counts == {"0": 10}
    with pytest.raises(errors.VendorUnavailable):
        vendor.submit(catalog.devices[1], BELL, 10, token="t-2")


def test_its_merged_tasks_are_what_merging_fills(toy: Path) -> None:
    catalog = parse_catalog(CATALOG, "toy.yaml")
    device = catalog.get("toy-dev")
    assert device is not None
    limits = device_limits("toy", device.id)
    assert limits == Limits(PUBS, max_programs=4)
    waiting = [
        Candidate(unit=n, jobid=n, userid=1000, user="alice", bank=None, account="site",
                  device="toy-dev", vendor="toy", size=100, shots=10, since=float(n))
        for n in range(1, 7)
    ]  # fmt: skip
    made = batches(waiting, limits, MergeConfig())
    assert [b.jobids for b in made] == [[1, 2, 3, 4], [5, 6]]
    assert (
        made[0].full_reason
        == "one more like job 4 would make 5 programs, over the limit of 4 a task"
    )
    # The task the service then creates, and its results split back per program.
    vendor = make_vendor("toy", catalog, clock=lambda: 1000.0)
    task = vendor.submit_set(device, [(BELL, 10), (BELL, 30)], token="merge-1")
    assert [r.counts for r in vendor.results(task)] == [{"0": 10}, {"0": 30}]


def test_its_reserved_windows_are_what_the_site_books(toy: Path) -> None:
    catalog = parse_catalog(
        CATALOG + "  - {name: fez, vendor: ibm, id: ibm_fez, class: qpu, qubits: 156,"
        " price: {per_minute: 96}}\n",
        "toy.yaml",
    )
    devices = {d.name: d for d in catalog.devices}
    window = {"name": "w1", "device": "toy-dev", "arn": "toy-res/w1", "start": 1000.0,
              "end": 4600.0, "cost": 5.0}  # fmt: skip
    assert ReservationBook.from_config([window], devices).lookup("w1").device == "toy-dev"
    toy_vendor = vendors.registry().get("toy")
    assert toy_vendor is not None and toy_vendor.reserved_windows is not None
    assert windows_on("toy", "toy/eu-west-1/dev") is toy_vendor.reserved_windows
    assert windows_on("toy", "toy/eu-west-1/dev-shared") is None
    assert vendor_of("toy-res/w1") == "toy"
    where = "[quantum.reservations][1] (w1)"
    refused = {
        "arn": (
            f"{where}.arn must be a Toy Reserve id (toy-res/NAME), got "
            "'arn:aws:braket:us-east-1:123456789012:reservation/x'"
        ),
        "toy-shared": (
            f"{where}.device 'toy-shared' is on vendor toy: only Braket devices (vendor "
            "braket, or the emulator's local); Toy devices (vendor toy) have reservations"
        ),
        "fez": f"{where}.device 'fez' is on vendor ibm: only Braket devices",
    }
    for case, sentence in refused.items():
        table = dict(window)
        if case == "arn":
            table["arn"] = "arn:aws:braket:us-east-1:123456789012:reservation/x"
        else:
            table["device"] = case
        with pytest.raises(ReservationConfigError) as raised:
            ReservationBook.from_config([table], devices)
        assert str(raised.value).startswith(sentence), str(raised.value)


def test_its_warm_up_is_what_the_service_runs_at_start(toy: Path) -> None:
    assert warm_ups(["toy", "ibm", "toy"]) == ["toyvendor.vendor:warm_up"]
    assert warm_ups(["braket", "local", "toy"]) == [
        "flux_quantum.vendors.braket.sdk:warm_up",
        "toyvendor.vendor:warm_up",
    ]
    vendors.load("toyvendor.vendor:warm_up")()
    assert sys.modules["toyvendor.vendor"].WARMED == ["toy"]


def test_a_broken_vendor_is_left_out_and_said_why(toy: Path) -> None:
    broken = toy / "brokenvendor-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenvendor\nVersion: 0.1\n")
    (toy / "brokenvendor.py").write_text("import no_such_sdk\n")
    (broken / "entry_points.txt").write_text(
        "[flux_quantum.vendors]\n"
        "broken = brokenvendor:VENDOR\n"
        "braket = takenvendor:VENDOR\n"
        "ibm = toyvendor:VENDOR\n"
    )
    (toy / "takenvendor.py").write_text(
        "from flux_quantum.protocol.vendors import VendorDescriptor\n"
        "VENDOR = VendorDescriptor(name='braket', title='Not Braket', vendor='takenvendor:X',"
        " errors='takenvendor:translate')\n"
    )
    found = vendors.refresh()
    assert "broken" not in found.names() and "toy" in found.names()
    assert found.problem("broken") == (
        "broken: entry point brokenvendor:VENDOR cannot be loaded "
        "(ModuleNotFoundError: No module named 'no_such_sdk')"
    )
    # A name that is taken stays its first owner's; an entry point's name is its vendor's.
    assert found.get("braket").title == "Amazon Braket"  # type: ignore[union-attr]
    assert found.problem("braket") == (
        "braket: entry point takenvendor:VENDOR is left out: the name is taken"
    )
    assert found.problem("ibm") == (
        "ibm: entry point toyvendor:VENDOR describes a vendor called 'toy'"
    )
    # Who asks for it learns why it is missing.
    with pytest.raises(RequestError, match=r"got 'broken:x'; broken: entry point brokenvendor"):
        parse_request("broken:x")
    with pytest.raises(ValueError, match=r"unknown vendor 'broken' \(broken: entry point"):
        make_vendor("broken", parse_catalog(CATALOG, "toy.yaml"))


# Flux's own Python loads the CLI plugin by path, with no site-packages of flux-quantum's
# on sys.path: the toy installed beside the package is found there.
BESIDE = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("qpu_plugin", sys.argv[1])
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    request = plugin.qpu_request.parse_request("toy:toy-dev")
    env = {"environment": {"TOY_API_KEY": "k"}}
    print(request.vendor, plugin.qpu_request.credential_variables(env), "toyvendor" in sys.modules)
    print(sys.argv[2] in sys.path)
    print(plugin.qpu_request.registry().problems)
    """
)


def test_the_cli_plugin_finds_a_vendor_installed_beside_flux_quantum(tmp_path: Path) -> None:
    site = tmp_path / "beside"
    shutil.copytree(TOY, site, ignore=shutil.ignore_patterns("__pycache__", "*.md"))
    package = Path(flux_quantum.__file__).parent
    shutil.copytree(package, site / "flux_quantum", ignore=shutil.ignore_patterns("__pycache__"))
    plugin = site / "flux_quantum" / "cliplugin" / "qpu.py"
    # -I -S: no site-packages, no environment, no script directory on sys.path.
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", BESIDE, str(plugin), str(site)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no warning: the plugin loaded
    # The toy found and loaded by path; nothing added to sys.path.
    assert proc.stdout.splitlines() == ["toy ['TOY_API_KEY'] True", "False", "()"]
