"""Unit tier (the vendors' classes, with their SDKs: emulator tier): the registry of
vendors (``flux_quantum.protocol.vendors``) and the contract every vendor package keeps.

Each vendor flux-quantum ships is found in its package, in the order users read them;
its face imports nothing but the standard library (what Flux's own Python can load); its
descriptor names a ``CatalogVendor`` that carries it, whose settings take every key the
descriptor lets the catalog give, and an error mapping that keeps a ``VendorError`` as it
is; one that declares merged tasks creates and splits them (``submit_set``, ``results``). The secrets a guest's job may not carry are the union of the descriptors', the same
variables as before vendors described their own. A malformed descriptor is refused in a
sentence naming the field.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from shipped_vendors import SHIPPED
from walkthrough import blocks

import flux_quantum
from flux_quantum.protocol.vendors import ReservedWindows, VendorDescriptor, registry
from flux_quantum.vendors.base import CatalogVendor, Vendor
from flux_quantum.vendors.errors import InvalidRequest


def test_the_shipped_vendors_are_found_in_their_order() -> None:
    assert registry().names() == SHIPPED
    assert registry().problems == ()


@pytest.mark.emulator  # loads each vendor's class, and with it the vendor's real SDK
@pytest.mark.parametrize("name", SHIPPED)
def test_each_descriptor_names_a_catalog_vendor_that_carries_it(name: str) -> None:
    descriptor = registry().get(name)
    assert descriptor is not None
    vendor_class = descriptor.load()
    assert issubclass(vendor_class, CatalogVendor)
    assert vendor_class.descriptor is descriptor and vendor_class.name == name
    # Every key the catalog may give reaches the vendor's settings.
    settings = vendor_class.settings_type.from_catalog(dict.fromkeys(descriptor.settings, "1"))
    assert isinstance(settings, vendor_class.settings_type)
    # Its one error mapping keeps a project error as it is.
    error = InvalidRequest("refused", vendor=name, vendor_code="X", operation="create")
    assert descriptor.translate(error, vendor=name, operation="create", subject="d") is error
    # A vendor that declares merged tasks creates and splits them itself.
    if descriptor.merged_tasks is not None:
        assert vendor_class.submit_set is not Vendor.submit_set
        assert vendor_class.results is not Vendor.results


def test_the_secrets_refused_are_the_union_of_the_descriptors() -> None:
    secret = [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "QISKIT_IBM_TOKEN",
        "IONQ_API_KEY",
        "IONQ_SESSION_ID",
        "ibm_kingston_QRMI_IBM_QCS_IAM_APIKEY",
        "QRMI_IBM_QS_IAM_APIKEY",
        "QRMI_JOB_ACQUISITION_TOKEN",
        "FRESNEL_QRMI_JOB_ACQUISITION_TOKEN",
        "ibm_kingston_QRMI_IBM_QCS_SESSION_ID",
    ]
    plain = ["AWS_ACCESS_KEY_ID", "IONQ_API_URL", "PATH", "QRMI_IBM_QCS_ENDPOINT"]
    assert registry().credentials(secret + plain) == sorted(secret)


def test_a_malformed_descriptor_is_refused_naming_the_field() -> None:
    fields = {"title": "T", "vendor": "m:V", "errors": "m:e"}
    with pytest.raises(ValueError, match="a vendor's name must be lower-case"):
        VendorDescriptor(name="Toy", **fields)
    with pytest.raises(ValueError, match=r"toy: vendor must be 'module:name', got 'm\.V'"):
        VendorDescriptor(name="toy", title="T", vendor="m.V", errors="m:e")
    with pytest.raises(ValueError, match=r"toy: programs must name some of openqasm, "):
        VendorDescriptor(name="toy", programs=("python",), **fields)
    with pytest.raises(ValueError, match=r"toy: warm_up must be 'module:name', got 'w'"):
        VendorDescriptor(name="toy", warm_up="w", **fields)
    with pytest.raises(ValueError, match=r"toy: merged_tasks must be a merged_tasks.Limits or"):
        VendorDescriptor(name="toy", merged_tasks=100, **fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"toy: reserved_windows must be a ReservedWindows"):
        VendorDescriptor(name="toy", reserved_windows="direct", **fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Toy Reserve: reservation must be a regular expr"):
        ReservedWindows("Toy Reserve", "Toy devices", "vendor toy", "toy-res/(", "an id")


# Flux's own Python has none of the vendors' SDKs (nor yaml): the registry, run where
# any import beyond the standard library and flux_quantum fails, finds every vendor.
STDLIB_ONLY = textwrap.dedent(
    """
    import importlib.abc, sys
    class StdlibOnly(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "flux_quantum":
                return None
            raise ImportError(f"{name} is not the standard library")
    sys.meta_path.insert(0, StdlibOnly())
    sys.path.insert(0, sys.argv[1])
    from flux_quantum.protocol.vendors import registry
    found = registry()
    print(" ".join(found.names()))
    print(found.problems)
    """
)


def test_every_vendor_face_loads_with_the_standard_library_alone() -> None:
    home = Path(flux_quantum.__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", STDLIB_ONLY, str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [" ".join(SHIPPED), "()"]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "vendors.md"


def test_the_pages_listing_of_the_vendors_runs_as_written() -> None:
    listing = blocks("## Adding a vendor", DOCS)[0]
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    proc = subprocess.run(
        ["bash", "-c", listing], env={"PATH": path}, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == list(SHIPPED)
    assert f"which prints `{' '.join(SHIPPED)}`" in DOCS.read_text()
