"""Pasqal Cloud's bearer tokens on the emulator: the token endpoint and the check of a token.

This module owns the emulated Pasqal side's signing key (made per service, never shown)
and what it does with it: answering the token endpoint's client-credentials or
password-realm grant (the scenario's client id and secret, when it names them) with a
signed JWT that expires ``TOKEN_LIFETIME`` seconds later on the wall clock (the client
compares ``exp`` with its own clock), and refusing a request without a valid, unexpired
bearer token. It must never log a credential nor read any clock but the injected wall
clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from flux_quantum.emulator.pasqal.scenario import PasqalScenario
from flux_quantum.emulator.pasqal.wire import PasqalRefusal, pasqal_error
from flux_quantum.emulator.wire import Request, Response, json_response

TOKEN_LIFETIME = 3600


class PasqalTokens:
    """Issues and checks the bearer tokens of one emulated Pasqal Cloud."""

    def __init__(self, scenario: PasqalScenario, seed: int, wall: Callable[[], float]) -> None:
        self.scenario = scenario
        self._wall = wall
        self._key = f"flux-quantum-emulator:pasqal:{seed}:{secrets.token_hex(8)}".encode()

    def issue(self, request: Request) -> Response:
        """The token endpoint's answer to a grant (403 for wrong credentials)."""
        form = {k: v[0] for k, v in parse_qs(request.body.decode("utf-8", "replace")).items()}
        grant = form.get("grant_type", "")
        s = self.scenario
        if grant == "client_credentials":
            good = bool(form.get("client_id")) and bool(form.get("client_secret"))
            if s.client_id is not None:
                good = hmac.compare_digest(form.get("client_id", ""), s.client_id) and (
                    hmac.compare_digest(form.get("client_secret", ""), s.client_secret or "")
                )
        elif grant.endswith("password-realm"):
            good = bool(form.get("username")) and bool(form.get("password"))
        else:
            good = False
        if not good:
            return json_response(
                403, {"error": "access_denied", "error_description": "Wrong credentials."}
            )
        claims = {
            "sub": form.get("client_id") or form.get("username"),
            "exp": int(self._wall()) + TOKEN_LIFETIME,
        }
        return json_response(
            200,
            {
                "access_token": self._sign(claims),
                "expires_in": TOKEN_LIFETIME,
                "token_type": "Bearer",
            },
        )

    def _sign(self, claims: dict[str, Any]) -> str:
        def part(doc: Any) -> str:
            raw = json.dumps(doc, separators=(",", ":")).encode()
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        head = f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}"
        mac = hmac.new(self._key, head.encode(), hashlib.sha256).digest()
        return f"{head}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"

    def authorize(self, request: Request) -> None:
        """Refuse (401) a request without a bearer token this service signed that has not
        expired."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        head, _, mac = token.rpartition(".")
        expected = hmac.new(self._key, head.encode(), hashlib.sha256).digest()
        good = scheme.lower() == "bearer" and hmac.compare_digest(
            mac, base64.urlsafe_b64encode(expected).rstrip(b"=").decode()
        )
        if good:
            payload = head.partition(".")[2]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            good = claims.get("exp", 0) > self._wall()
        if not good:
            raise PasqalRefusal(pasqal_error(401, "Unauthorized: no valid bearer token."))
