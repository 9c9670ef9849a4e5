"""Catalog: the example parses, each validation error reads as one sentence naming the
file, the device and the field, prices are computed right, and the path precedence is
argument > FLUX_QUANTUM_BACKENDS > Flux config > packaged example."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from shipped_vendors import NAMED

from flux_quantum.catalog import (
    CatalogError,
    PriceModel,
    load_catalog,
    packaged_catalog_path,
    parse_catalog,
    resolve_catalog_path,
)

GOOD_DEVICE = {
    "name": "sv1",
    "vendor": "braket",
    "id": "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
    "class": "simulator",
    "qubits": 34,
    "region": "us-east-1",
    "price": {"per_minute": 0.075, "min_seconds": 3},
    "slots": 4,
}


def catalog_text(**changes: object) -> str:
    """A one-device catalog (plus a QPU) with the first device's fields changed;
    a value of ... removes the field."""
    import yaml

    device = dict(GOOD_DEVICE)
    for key, value in changes.items():
        key = "class" if key == "class_" else key
        if value is ...:
            device.pop(key, None)
        else:
            device[key] = value
    qpu = {
        "name": "forte1",
        "vendor": "braket",
        "id": "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1",
        "class": "qpu",
        "qubits": 36,
        "price": {"per_task": 0.3, "per_shot": 0.08},
    }
    return yaml.safe_dump({"devices": [device, qpu]}, sort_keys=False)


def test_packaged_example_loads_and_lists_real_braket_devices():
    catalog = load_catalog(packaged_catalog_path(), environ={})
    names = catalog.names()
    assert names[:6] == ["sv1", "dm1", "tn1", "forte1", "garnet", "ankaa3"]
    forte = catalog.get("forte1")
    assert forte is not None
    assert forte.id == "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1"
    assert forte.region == "us-east-1"  # taken from the ARN
    assert forte.price == PriceModel(per_task=0.30, per_shot=0.08)
    assert catalog.get("arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet").name == "garnet"
    assert catalog.get("sv1").properties["drain_seconds_per_task"] == "2"  # stringified
    assert catalog.settings("braket")["s3_prefix"] == "flux-quantum"
    assert all(device.slots >= 1 for device in catalog)


def test_price_models():
    qpu = PriceModel(per_task=0.30, per_shot=0.08)
    assert qpu.cost(1000) == pytest.approx(80.30)
    sim = PriceModel(per_minute=0.075, min_seconds=3)
    assert sim.cost(1000) == pytest.approx(0.075 * 3 / 60)  # minimum billed duration
    assert sim.cost(1000, seconds=120) == pytest.approx(0.15)
    assert sim.cost(1000, seconds=1) == pytest.approx(0.075 * 3 / 60)
    assert qpu.describe() == "$0.30/task + $0.08/shot"
    assert sim.describe() == "$0.075/min (min 3s)"
    assert PriceModel(per_task=0.3, per_shot=0.00145).describe() == "$0.30/task + $0.00145/shot"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"slots": -2}, "device 'sv1': slots must be an integer >= 1, got -2"),
        ({"slots": "four"}, "device 'sv1': slots must be an integer >= 1, got 'four'"),
        ({"qubits": 0}, "device 'sv1': qubits must be an integer >= 1, got 0"),
        ({"qubits": True}, "device 'sv1': qubits must be an integer >= 1, got true"),
        ({"qubits": ...}, "device 'sv1': qubits is required"),
        (
            {"vendor": "dwave"},
            f"device 'sv1': vendor must be one of {NAMED}, got 'dwave'",
        ),
        (
            {"class_": "annealer"},
            "device 'sv1': class must be one of qpu, simulator, got 'annealer'",
        ),
        (
            {"id": "sv1"},
            "device 'sv1': id must be a Braket device ARN "
            "(arn:aws:braket:REGION::device/...), got 'sv1'",
        ),
        ({"id": ""}, "device 'sv1': id must be a non-empty string, got ''"),
        (
            {"region": "mars"},
            "device 'sv1': region must be a region name such as us-east-1, got 'mars'",
        ),
        (
            {"price": {"per_shot": -1}},
            "device 'sv1': price.per_shot must be a number >= 0, got -1",
        ),
        (
            {"price": {"per_shoot": 1}},
            "device 'sv1': price: unknown field 'per_shoot' "
            "(accepted: per_task, per_shot, per_minute, min_seconds)",
        ),
        (
            {"price": {"min_seconds": 3}},
            "device 'sv1': price.min_seconds needs price.per_minute",
        ),
        (
            {"price": 5},
            "device 'sv1': price must be a mapping with some of "
            "per_task, per_shot, per_minute, min_seconds, got 5",
        ),
        (
            {"qbits": 5},
            "device 'sv1': unknown field 'qbits' (accepted: name, vendor, id, class, "
            "qubits, region, price, slots, properties)",
        ),
        (
            {"properties": {"calibration": {"t1": 3}}},
            "device 'sv1': properties.calibration must be a string, got a mapping",
        ),
        (
            {"properties": ["a"]},
            "device 'sv1': properties must be a mapping of names to strings, got a list",
        ),
        (
            {"name": "SV 1"},
            "device #1: name must be lower-case letters, digits, '-', '_', '.' "
            "(at most 64, starting with a letter or digit), got 'SV 1'",
        ),
        (
            {"name": "forte1"},
            "device 'forte1': name is already used by device #1",
        ),
    ],
)
def test_device_errors_name_file_device_and_field(tmp_path, changes, expected):
    path = tmp_path / "backends.yaml"
    path.write_text(catalog_text(**changes))
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert str(info.value) == f"{path}: {expected}"
    assert "\n" not in str(info.value)


def test_qpu_region_must_match_its_arn():
    text = catalog_text().replace("qubits: 36", "qubits: 36\n  region: us-west-2")
    with pytest.raises(CatalogError) as info:
        parse_catalog(text, "backends.yaml")
    assert str(info.value) == (
        "backends.yaml: device 'forte1': region must match the region in its id "
        "(us-east-1), got 'us-west-2'"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("devices: []\n", "devices must be a non-empty list, got a list"),
        ("- name: sv1\n", "the top level must be a mapping with a 'devices' list, got a list"),
        ("", "the top level must be a mapping with a 'devices' list, got nothing"),
        (
            "devices: [{name: a}]\nextra: 1\n",
            "unknown top-level key 'extra' (accepted: devices, vendors, currency)",
        ),
        ("devices: [5]\n", "device #1: must be a mapping, got 5"),
        ("devices: [{name: sv1\n", "not valid YAML at line 2: expected ',' or '}', but got"),
    ],
)
def test_document_errors(text, expected):
    with pytest.raises(CatalogError) as info:
        parse_catalog(text, "backends.yaml")
    assert str(info.value).startswith(f"backends.yaml: {expected}")


def test_vendor_settings_are_checked():
    base = catalog_text()
    with pytest.raises(CatalogError) as info:
        parse_catalog(base + "vendors:\n  braket: {bucket: x}\n", "b.yaml")
    assert str(info.value) == (
        "b.yaml: vendors.braket: unknown setting 'bucket' (accepted: s3_bucket, s3_prefix, "
        "endpoint_url, s3_endpoint_url, profile, events_queue, events_wait, events_poll, "
        "events_silence, sqs_endpoint_url, hybrid_role_arn, hybrid_instance, hybrid_price, "
        "hybrid_max_runtime, hybrid_start_timeout)"
    )
    with pytest.raises(CatalogError) as info:
        parse_catalog(base + "vendors:\n  dwave: {}\n", "b.yaml")
    assert str(info.value) == (f"b.yaml: vendors: unknown vendor 'dwave' (accepted: {NAMED})")
    catalog = parse_catalog(base + "vendors:\n  local: {url: 'http://127.0.0.1:1'}\n", "b.yaml")
    assert catalog.settings("local")["url"] == "http://127.0.0.1:1"
    assert dict(catalog.settings("braket")) == {}


def test_missing_file_says_where_it_was_found(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(CatalogError) as info:
        load_catalog(environ={"FLUX_QUANTUM_BACKENDS": str(missing)})
    assert str(info.value) == (
        f"{missing}: cannot read catalog (No such file or directory; "
        "found via FLUX_QUANTUM_BACKENDS)"
    )


def write(path: Path, name: str) -> Path:
    path.write_text(catalog_text(name=name))
    return path


def test_path_precedence(tmp_path):
    arg = write(tmp_path / "arg.yaml", "from-arg")
    env = write(tmp_path / "env.yaml", "from-env")
    conf = write(tmp_path / "conf.yaml", "from-flux")
    environ = {"FLUX_QUANTUM_BACKENDS": str(env)}
    asked = []

    def flux_config() -> str | None:
        asked.append(True)
        return str(conf)

    def first(**kw) -> str:
        return load_catalog(flux_config=flux_config, **kw).names()[0]

    assert first(path=arg, environ=environ) == "from-arg"
    assert first(environ=environ) == "from-env"
    assert asked == []  # the Flux config is not even asked when something wins before it
    assert first(environ={}) == "from-flux"
    assert asked == [True]
    location = resolve_catalog_path(environ={}, flux_config=lambda: None)
    assert location.source == "packaged example"
    assert Path(location.path) == packaged_catalog_path()
    assert resolve_catalog_path(arg, environ=environ).source == "argument"


def test_flux_config_lookup_is_skipped_outside_flux(monkeypatch):
    from flux_quantum.catalog import flux_config_backends

    monkeypatch.delenv("FLUX_URI", raising=False)
    assert flux_config_backends() is None


def test_example_catalog_text_matches_its_documentation():
    # Fields documented in the example's header are exactly those the parser accepts.
    text = packaged_catalog_path().read_text()
    for field in ("name", "vendor", "id", "class", "qubits", "region", "price", "slots"):
        assert f"#   {field}" in text
    assert textwrap.dedent(text).count("- name:") >= 6
