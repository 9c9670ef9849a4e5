"""QRMI resource types the installed ``qrmi`` client names but does not serve: ``OQTOPUS``
needs a native bridge library (``liboqtopus_py_bridge.so``) the qrmi 0.26.4 wheel does not
ship, so building the resource fails before any request. This fails the day an installed
client builds it: then an emulator side and a vendor can follow (docs/vendors.md)."""

from __future__ import annotations

import pytest
import qrmi

pytestmark = pytest.mark.emulator  # the vendor's real client, as the emulator tier has it


def test_oqtopus_resource_cannot_be_built_without_its_bridge_library(monkeypatch):
    monkeypatch.delenv("PY_BRIDGE_PATH", raising=False)
    assert hasattr(qrmi.ResourceType, "OQTOPUS")
    config = {"QRMI_OQTOPUS_URL": "http://127.0.0.1:9/", "QRMI_OQTOPUS_API_TOKEN": "t"}
    with pytest.raises(qrmi.QrmiError, match="liboqtopus_py_bridge"):
        qrmi.QuantumResource.from_config("oqtopus_dev", qrmi.ResourceType.OQTOPUS, config)
