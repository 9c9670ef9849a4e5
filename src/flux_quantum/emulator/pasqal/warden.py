"""The on-premises Pasqal warden on the emulator: what QRMI's ``PasqalLocal`` calls answer.

This module owns the warden's side of the Pasqal emulator under ``LOCAL_PREFIX/<device>``:
its sessions (``POST /sessions``, ``DELETE /sessions/{id}``), whether the QPU is
accessible (and its slots), and its jobs (create with ``X-Warden-Session``, list, get,
logs, cancel) and specs, in the warden's shapes; and the munge check every call but
``/accessible`` must pass. The jobs themselves are ``PasqalBatches``'. It must never sleep
holding the side's lock nor read the wall clock, and it cannot verify a munge credential
(any non-empty one passes).
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from flux_quantum.emulator.pasqal.batches import Batch, PasqalBatches
from flux_quantum.emulator.pasqal.wire import PasqalRefusal, specs_document, warden_error
from flux_quantum.emulator.routes import SideRoute
from flux_quantum.emulator.wire import Request, Response, json_response


class PasqalWarden:
    """The warden of every on-premises Pasqal device, behind the side's lock."""

    def __init__(self, batches: PasqalBatches, lock: threading.Lock) -> None:
        self.clock = batches.clock
        self._batches = batches
        self._lock = lock
        self._sessions: dict[str, tuple[str, str]] = {}  # id -> (device, user id)

    @staticmethod
    def check_munge(request: Request) -> None:
        """The warden's check: a munge credential must come with the request (the emulator
        cannot decode one without munged, so any non-empty credential passes)."""
        if not request.headers.get("x-munge-cred", "").strip():
            raise PasqalRefusal(warden_error(401, "invalid munge token"))

    def accessible(self, route: SideRoute) -> Response:
        spec = self._batches.device(route.device, "local")
        state = spec.state_at(self.clock.now())
        doc: dict[str, Any] = {
            "is_accessible": state == "online",
            "message": {
                "online": "Warden ok.",
                "paused": "Paused: calibration",
                "offline": "QPU offline",
            }[state],  # fmt: skip
        }
        if spec.max_slots is not None:
            with self._lock:
                used = self._batches.busy(spec, self.clock.now())
            doc.update(qpu_slots_total=spec.max_slots, qpu_slots_used=used,
                       qpu_slots_available=max(0, spec.max_slots - used))  # fmt: skip
        return json_response(200, doc)

    # -- sessions -----------------------------------------------------------------------------

    def open_session(self, route: SideRoute, request: Request) -> Response:
        spec = self._batches.device(route.device, "local")
        body = json.loads(request.body or b"{}")
        session = str(uuid.uuid4())
        with self._lock:
            self._sessions[session] = (spec.name, str(body.get("user_id", "")))
        return json_response(200, {"id": session})

    def revoke_session(self, route: SideRoute) -> Response:
        session = route.fields["session"]
        with self._lock:
            if self._sessions.pop(session, None) is None:
                raise PasqalRefusal(warden_error(404, f"Session {session} not found."))
        return json_response(200, {"id": session})

    # -- jobs ---------------------------------------------------------------------------------

    def create(self, route: SideRoute, request: Request, failure: str) -> tuple[Response, str]:
        """A job from the request's sequence (``failure``: it will fail with that)."""
        spec = self._batches.device(route.device, "local")
        with self._lock:
            session = self._sessions.get(request.headers.get("x-warden-session", ""))
        if session is None or session[0] != spec.name:
            raise PasqalRefusal(warden_error(403, "no valid X-Warden-Session for this QPU"))
        body = json.loads(request.body or b"{}")
        self._batches.admit(spec, body.get("sequence"), body.get("shots"), warden_error)
        batch = self._batches.add(spec, body["sequence"], body["shots"], failure,
                                  user_id=session[1])  # fmt: skip
        with self._lock:
            doc = self._batches.local_document(batch, self.clock.now())
        return json_response(200, doc), str(doc["id"])

    def _job(self, route: SideRoute) -> Batch:
        key = route.fields["job"]
        batch = self._batches.find(key) if key.isdigit() else None
        if batch is None:
            raise PasqalRefusal(warden_error(404, f"Job {key} not found."))
        return batch

    def get(self, route: SideRoute) -> Response:
        batch = self._job(route)
        with self._lock:
            return json_response(200, self._batches.local_document(batch, self.clock.now()))

    def list(self, route: SideRoute) -> Response:
        with self._lock:
            docs = self._batches.local_documents(str(route.device), self.clock.now())
        return json_response(200, docs)

    def logs(self, route: SideRoute) -> Response:
        self._job(route)
        return json_response(200, {"logs": ""})

    def cancel(self, route: SideRoute) -> Response:
        return self._batches.cancel(self._job(route), warden_error)

    def specs(self, route: SideRoute) -> Response:
        spec = self._batches.device(route.device, "local")
        return json_response(200, {"specs": specs_document(spec)["specs"]})
