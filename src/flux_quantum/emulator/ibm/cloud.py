"""IBM Cloud around the emulated Qiskit Runtime API, as qiskit-ibm-runtime reaches it.

qiskit-ibm-runtime (``QiskitRuntimeService``, channel ``ibm_quantum_platform`` or
``ibm_cloud``) derives every host it calls from its ``url``'s host name: IAM
(``iam.cloud.ibm.com``), the Qiskit Runtime API (``quantum.cloud.ibm.com/api/v1``, or
``{region}.quantum.cloud.ibm.com`` from the instance CRN's location), the Global Search
API that finds the account's service instances (``api.global-search-tagging.cloud.ibm.com``,
``POST /v3/resources/search``) and the Global Catalog that names their plans
(``globalcatalog.cloud.ibm.com/api/v1/{plan id}``). Pointed at the emulator as its HTTP
proxy (``proxies={"urls": {"http": <emulator URL>}}`` with ``url="http://cloud.ibm.com"``),
it sends those requests here with their real host names; this module owns answering them
by host: IAM and the Runtime API are the IBM side's own (the same state QRMI sees), the
search lists the scenario's one service instance (its CRN, its plan's id, the backends
allocated to it) and the catalog names the scenario's plan. It must never answer a host
outside ``cloud.ibm.com``, never list an instance the scenario does not have, and never
accept a search without a bearer token its IAM issued.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flux_quantum.emulator.ibm.scenario import IbmScenario
from flux_quantum.emulator.ibm.service import CRN, IbmService
from flux_quantum.emulator.ibm.wire import API, IAM_PATH, ibm_error
from flux_quantum.emulator.wire import Request, Response, json_response

DOMAIN = "cloud.ibm.com"
# The Global Catalog ids of Qiskit Runtime's plans, and how the catalog names them.
PLANS = {
    "open": ("flux-quantum-emulator-open-plan", "Open", "free"),
    "paid": ("flux-quantum-emulator-paygo-plan", "Pay-As-You-Go", "paygo"),
}


def cloud_service(host: str | None) -> str | None:
    """The IBM Cloud service a Host header names (``iam``, ``quantum``,
    ``eu-de.quantum``, ...), or None for any other host."""
    name = (host or "").rsplit(":", 1)[0].lower()
    if name.endswith("." + DOMAIN):
        return name[: -len(DOMAIN) - 1]
    return None


class IbmCloud:
    """IBM Cloud's hosts, answered for the scenario's one instance."""

    def __init__(self, ibm: IbmService, scenario: IbmScenario) -> None:
        self.ibm = ibm
        self.scenario = scenario

    @property
    def crn(self) -> str:
        return self.scenario.crn or CRN

    def handle(self, request: Request) -> Response:
        service = cloud_service(request.headers.get("host")) or ""
        if service == "iam" and request.path == "/identity/token":
            return self.ibm.handle(replace(request, path=IAM_PATH))
        runtime = service == "quantum" or service.endswith(".quantum")
        if runtime and (request.path == "/api/v1" or request.path.startswith("/api/v1/")):
            return self.ibm.handle(replace(request, path=API + request.path[len("/api/v1") :]))
        if service == "api.global-search-tagging" and request.path == "/v3/resources/search":
            return self._search(request)
        if service == "globalcatalog" and request.path.startswith("/api/v1/"):
            return self._catalog(request.path[len("/api/v1/") :])
        return ibm_error(
            404,
            1000,
            f"the emulator does not serve {request.method} {service}.{DOMAIN}{request.path}",
        )

    def _search(self, request: Request) -> Response:
        """Global Search: the instances of service ``quantum-computing`` (the only query
        qiskit-ibm-runtime makes), with the fields it asks for."""
        if not self.ibm.knows_token(request):
            return json_response(
                401, {"errors": [{"code": "not_authorized", "message": "Unauthorized"}]}
            )
        plan_id = PLANS[self.scenario.plan][0]
        item: dict[str, Any] = {
            "crn": self.crn,
            "name": "flux-quantum-emulator",
            "service_plan_unique_id": plan_id,
            "tags": [],
            # Qiskit Runtime lists only instances with backends allocated to them.
            "doc": {"extensions": {"backends": [b.name for b in self.scenario.backends]}},
        }
        return json_response(200, {"items": [item], "limit": 100, "search_cursor": None})

    def _catalog(self, plan_id: str) -> Response:
        for key, (known, display, pricing) in PLANS.items():
            if plan_id == known:
                return json_response(
                    200,
                    {
                        "id": known,
                        "name": key,
                        "kind": "plan",
                        "overview_ui": {"en": {"display_name": display}},
                        "metadata": {"pricing": {"type": pricing}},
                    },
                )
        return json_response(404, {"message": f"catalog entry {plan_id} not found"})
