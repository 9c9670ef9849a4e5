"""Site access rules ([quantum.access]): the table's validation, first-match decisions by
user, uid, bank, device, vendor and class, the bank that is not known at submit, the
devices a selection may consider, and the ingest validator refusing a named device at
submit (unit tier with a fake Flux handle, and on a real instance)."""

from __future__ import annotations

import ast
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from catalogs import catalog_of

from flux_quantum.protocol.request import parse_request
from flux_quantum.selection.policies import NoDeviceError, select_device
from flux_quantum.site import access
from flux_quantum.site.access import AccessConfigError, AccessRules, DeviceFacts, Requester
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus

SRC = Path(access.__file__).resolve().parents[2]
VALIDATOR = Path(access.__file__).parents[1] / "validator.py"

SITE = {
    "default": "allow",
    "rules": [
        {"name": "ionq-for-chemistry", "devices": ["forte1"], "banks": ["chem"], "allow": True},
        {"name": "no-ionq", "devices": ["forte1"], "allow": False},
        {
            "name": "qpu-for-physics",
            "classes": ["qpu"],
            "banks": ["physics", "chem"],
            "allow": True,
        },
        {"users": ["carol", 1234], "vendors": ["braket"], "allow": True},
        {"name": "qpu-otherwise", "classes": ["qpu"], "allow": False},
    ],
}
RULES = AccessRules.from_config(SITE)
FORTE = DeviceFacts("forte1", "braket", "qpu")
GARNET = DeviceFacts("garnet", "braket", "qpu")
SV1 = DeviceFacts("sv1", "braket", "simulator")
IBM = DeviceFacts("brisbane", "ibm", "qpu")


def decide(user: str, device: DeviceFacts, bank: str | None = None, uid: int = 1000):
    return RULES.decide(Requester(uid, user, bank), device)


def test_first_matching_rule_decides() -> None:
    assert decide("alice", FORTE, "chem").allowed is True
    refused = decide("alice", FORTE, "physics")
    assert refused.allowed is False
    assert refused.rule is not None and refused.rule.index == 2
    assert refused.reason == (
        "user alice (bank physics) may not use device forte1: [quantum.access] rule 2"
        " 'no-ionq' denies devices forte1 to everyone"
    )
    assert decide("alice", GARNET, "physics").allowed is True
    assert decide("bob", GARNET, "biology").reason == (
        "user bob (bank biology) may not use device garnet: [quantum.access] rule 5"
        " 'qpu-otherwise' denies class qpu to everyone"
    )
    # simulators match no rule: the default
    allowed = decide("bob", SV1, "biology")
    assert allowed.allowed is True and allowed.rule is None
    assert allowed.reason.endswith('[quantum.access] default = "allow" and no rule matches')


def test_users_by_name_or_uid() -> None:
    assert decide("carol", GARNET, "biology").allowed is True
    assert decide("dave", GARNET, "biology", uid=1234).allowed is True
    assert decide("dave", GARNET, "biology", uid=1235).allowed is False
    # a user whose name is not known matches by uid only
    assert RULES.decide(Requester(1234, None, "biology"), GARNET).allowed is True
    assert decide("carol", IBM, "biology").allowed is False  # carol's rule is braket only


def test_default_deny() -> None:
    rules = AccessRules.from_config(
        {"default": "deny", "rules": [{"users": ["alice"], "allow": True}]}
    )
    assert rules.decide(Requester(1, "alice"), SV1).allowed is True
    refused = rules.decide(Requester(2, "bob"), SV1)
    assert refused.allowed is False
    assert refused.reason == (
        'user bob may not use device sv1: [quantum.access] default = "deny" and no rule matches'
    )
    assert AccessRules.from_config(None).decide(Requester(2, "bob"), FORTE).allowed is True


def test_unknown_bank_decides_only_what_every_bank_would() -> None:
    # forte1: chem is allowed, everyone else denied -> depends on the bank
    pending = decide("alice", FORTE, None)
    assert pending.allowed is None
    assert pending.reason == (
        "whether user alice may use device forte1 depends on the job's bank"
        " ([quantum.access] rule 1 'ionq-for-chemistry' allows devices forte1 to banks chem)"
    )
    # a simulator is allowed whatever the bank; an IBM QPU denied whatever the bank
    assert decide("alice", SV1, None).allowed is True
    denied = decide("alice", IBM, None)
    assert denied.allowed is None  # rule 3 (physics, chem) could still allow it
    rules = AccessRules.from_config(
        {"rules": [{"banks": ["a"], "allow": False}, {"classes": ["qpu"], "allow": False}]}
    )
    definite = rules.decide(Requester(1, "alice"), FORTE)
    assert definite.allowed is False  # every bank is refused: said at submit
    assert definite.rule is not None and definite.rule.index == 2
    # a device whose class the caller does not know is undecided the same way
    assert RULES.decide(Requester(1, "bob", "biology"), DeviceFacts("garnet")).allowed is None


def test_selection_only_considers_allowed_devices() -> None:
    catalog = catalog_of("sv1", "forte1", "garnet")
    facts = access.device_facts(catalog.devices)
    assert facts["arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"] == GARNET
    snaps = {
        d.name: DeviceSnapshot(d.name, DeviceStatus.ONLINE, queue_depth=0, t=1.0)
        for d in catalog.devices
    }
    excluded = RULES.excluded(
        Requester(1000, "alice", "physics"), access.device_facts(catalog.devices).values()
    )
    assert set(excluded) == {"forte1"}
    request = parse_request({"policy": "min-wait", "class": "qpu"})
    selection = select_device(catalog.devices, snaps, request, excluded=excluded)
    assert selection.device.name == "garnet"
    forte = next(c for c in selection.explanation.candidates if c.device == "forte1")
    assert forte.reason.startswith("dropped: not allowed: user alice (bank physics) may not")
    # biology may use no QPU at all: the job fails with every reason
    excluded = RULES.excluded(Requester(1000, "bob", "biology"), facts.values())
    with pytest.raises(NoDeviceError) as caught:
        select_device(catalog.devices, snaps, request, excluded=excluded)
    assert "garnet not allowed: user bob (bank biology) may not use device garnet" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ([], "[quantum.access] must be a table, got []"),
        ({"defaults": "allow"}, "[quantum.access] has an unknown key 'defaults' (accepted: default, rules)"),
        ({"default": "permit"}, '[quantum.access] default must be "allow" or "deny", got \'permit\''),
        ({"rules": {"allow": True}}, "[quantum.access] rules must be a list of tables"),
        ({"rules": ["x"]}, "[quantum.access] rules[1] must be a table, got 'x'"),
        ({"rules": [{"users": ["a"]}]}, "[quantum.access] rules[1].allow must be true or false, got None"),
        ({"rules": [{"allow": "yes"}]}, "[quantum.access] rules[1].allow must be true or false, got 'yes'"),
        ({"rules": [{"allow": True}, {"bank": ["x"], "allow": True}]},
         "[quantum.access] rules[2] has an unknown key 'bank' (accepted: name, users, banks,"
         " devices, vendors, classes, allow)"),
        ({"rules": [{"banks": "physics", "allow": True}]},
         "[quantum.access] rules[1].banks must be a non-empty list of names, got 'physics'"),
        ({"rules": [{"banks": [7], "allow": True}]},
         "[quantum.access] rules[1].banks must be a non-empty list of names, got [7]"),
        ({"rules": [{"users": [], "allow": True}]},
         "[quantum.access] rules[1].users must be a non-empty list of names or uids, got []"),
        ({"rules": [{"name": "", "allow": True}]},
         "[quantum.access] rules[1].name must be a non-empty string, got ''"),
    ],
)  # fmt: skip
def test_bad_tables_name_the_key(table: object, message: str) -> None:
    with pytest.raises(AccessConfigError) as caught:
        AccessRules.from_config(table)
    assert str(caught.value) == message


def test_what_the_validator_imports_uses_only_the_standard_library() -> None:
    """The ingest validator runs in the broker's own Python: ``flux_quantum.site.access``
    and ``flux_quantum.protocol.request`` (with the packages' faces they pass through)
    import nothing outside the standard library, in ``python -I -S`` with only src on
    sys.path."""
    tree = ast.parse(Path(access.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) - {"__future__"} == set()
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         f"import sys; sys.path.append({str(SRC)!r}); from flux_quantum.site import access;"
         " import flux_quantum.protocol.request as request;"
         " print(access.AccessRules.from_config({'default': 'deny'}).decide("
         "access.Requester(1, 'a'), access.DeviceFacts('sv1')).allowed);"
         " print(request.parse_request('braket:sv1').device);"
         " print(sorted({m.split('.')[0] for m in sys.modules}"
         " - set(sys.stdlib_module_names) - {'__main__', 'flux_quantum'}))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "sv1", "[]"]


# --- the ingest validator ----------------------------------------------------------------


class FakeFlux:
    """The Flux handle a validator plugin asks for its configuration."""

    def __init__(self, config: dict) -> None:
        self.config = config

    def conf_get(self, key: str, default: object = None) -> object:
        node: object = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


class JobInfo:
    def __init__(self, system: dict, userid: int) -> None:
        self.jobspec = {"attributes": {"system": system}}
        self.userid = userid


def make_validator(config: dict):
    import argparse

    # The validator is a Flux plugin: its module subclasses flux-core's ValidatorPlugin,
    # which needs libflux. Without Flux built there is nothing to load: skipped, not failed.
    pytest.importorskip(
        "flux.job.validator",
        reason="no flux-core Python bindings (libflux): the validator plugin cannot load",
        exc_type=ImportError,
    )
    sys.path.insert(0, str(VALIDATOR.parent))
    from flux_quantum.validator import Validator

    plugin = Validator(argparse.ArgumentParser())
    plugin._flux = FakeFlux(config)
    plugin.configure(argparse.Namespace())
    return plugin


def test_validator_refuses_a_denied_device_at_submit(tmp_path: Path) -> None:
    catalog = tmp_path / "backends.yaml"
    catalog.write_text(
        "devices:\n"
        "  - {name: garnet, vendor: braket, id: 'arn:aws:braket:eu-north-1::device/qpu/iqm/"
        "Garnet', class: qpu, qubits: 20, price: {per_task: 0.3}}\n"
    )
    config = {"quantum": {"backends": str(catalog), "access": SITE}}
    plugin = make_validator(config)
    uid = os.getuid()
    # garnet is a qpu (from the catalog): biology may not use it, whatever the user
    refused = plugin.validate(JobInfo({"qpu": "garnet", "bank": "biology"}, uid))
    assert refused is not None and refused[0] == errno.EPERM
    assert refused[1].startswith("qpu: user ")
    assert refused[1].endswith(
        "(bank biology) may not use device garnet: [quantum.access] rule 5 'qpu-otherwise'"
        " denies class qpu to everyone"
    )
    assert plugin.validate(JobInfo({"qpu": "garnet", "bank": "physics"}, uid)) is None
    # no bank yet (flux-accounting fills it in): left to the handlers
    assert plugin.validate(JobInfo({"qpu": "garnet"}, uid)) is None
    # 'any' names no device; jobs without qpu and malformed requests as before
    assert plugin.validate(JobInfo({"qpu": "any", "bank": "biology"}, uid)) is None
    assert plugin.validate(JobInfo({}, uid)) is None
    assert plugin.validate(JobInfo({"qpu": "Garnet"}, uid))[0] == errno.EINVAL  # type: ignore[index]
    # without access rules nothing is read and nothing refused
    open_site = make_validator({"quantum": {"backends": str(catalog)}})
    assert open_site.facts == {}
    assert open_site.validate(JobInfo({"qpu": "garnet", "bank": "biology"}, uid)) is None


def test_a_credential_in_the_environment_is_refused_only_for_a_guest(tmp_path: Path) -> None:
    """The jobspec (with the submit environment) is readable by the instance owner: a
    guest's key would reach another user, the owner's own stays the owner's."""
    plugin = make_validator({"quantum": {}})
    env = {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "ibm_fez_QRMI_IBM_QCS_IAM_APIKEY": "k", "HOME": "/h"}
    system = {"qpu": "local:local-garnet", "environment": env}
    owner = os.getuid()
    assert plugin.validate(JobInfo(system, owner)) is None
    refused = plugin.validate(JobInfo(system, owner + 1))
    assert refused is not None and refused[0] == errno.EPERM
    assert refused[1].startswith(
        "qpu: the job's environment holds AWS_SECRET_ACCESS_KEY, "
        "ibm_fez_QRMI_IBM_QCS_IAM_APIKEY, which Flux would store in the jobspec"
    )
    assert "s3cr3t" not in refused[1]
    # A plain job of a guest is none of the plugin's business.
    assert plugin.validate(JobInfo({"environment": env}, owner + 1)) is None


FLUX = shutil.which("flux")


@pytest.mark.flux
def test_validator_refuses_a_denied_device_in_real_flux(tmp_path: Path) -> None:
    assert FLUX is not None
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "quantum.toml").write_text(
        f'[ingest.validator]\nplugins = ["jobspec", "{VALIDATOR}"]\n\n'
        "[quantum.access]\n"
        'default = "allow"\n\n'
        "[[quantum.access.rules]]\n"
        'name = "no-ionq"\ndevices = ["forte1"]\nallow = false\n'
    )
    script = tmp_path / "check.sh"
    script.write_text(
        "flux submit --setattr=qpu=forte1 true; echo rc=$?\n"
        "flux submit --setattr=qpu=sv1 true >/dev/null; echo rc=$?\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [FLUX, "start", "--test-size=1", "-c", str(conf), "sh", str(script)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("rc=")] == [
        "rc=1",
        "rc=0",
    ]
    assert (
        "may not use device forte1: [quantum.access] rule 1 'no-ionq' denies devices forte1"
        " to everyone"
    ) in result.stderr
