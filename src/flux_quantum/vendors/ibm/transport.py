"""The REST reads IBM's QRMI resource lacks (the resource itself is
``flux_quantum.vendors.qrmi.QrmiResource``).

``RestReader`` makes the plain ``GET``s QRMI has no call for (list a backend's jobs, read
a job's failure reason, backend and session) with an IAM token of its own, on the same
settings. It must never retry (the vendor's ``RetryBudget`` does), never translate an
error beyond raising ``HttpError`` or ``VendorUnavailable``, and never write the API key
or a bearer token into a message.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from flux_quantum.vendors.base import Clock
from flux_quantum.vendors.errors import VendorUnavailable
from flux_quantum.vendors.ibm.errors import HttpError
from flux_quantum.vendors.ibm.settings import SETTING_PREFIX


class RestReader:
    """GETs on IBM's REST API with an IAM token of its own (refreshed before expiry)."""

    def __init__(self, config: Mapping[str, str], timeout: float, wall: Clock) -> None:
        self._endpoint = config[SETTING_PREFIX + "ENDPOINT"].rstrip("/")
        self._iam = config[SETTING_PREFIX + "IAM_ENDPOINT"].rstrip("/")
        self._apikey = config[SETTING_PREFIX + "IAM_APIKEY"]
        self._crn = config.get(SETTING_PREFIX + "SERVICE_CRN", "")
        self._timeout = timeout
        self._wall = wall
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None

    def _bearer(self) -> str:
        with self._lock:
            if self._token is not None and self._token[1] - 60 > self._wall():
                return self._token[0]
        form = urllib.parse.urlencode(
            {"grant_type": "urn:ibm:params:oauth:grant-type:apikey", "apikey": self._apikey}
        ).encode()
        request = urllib.request.Request(
            self._iam + "/identity/token",
            data=form,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
        )
        answer = self._send(request)
        token = str(answer["access_token"])
        expires = float(
            answer.get("expiration") or self._wall() + float(answer.get("expires_in", 600))
        )
        with self._lock:
            self._token = (token, expires)
        return token

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        url = self._endpoint + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self._bearer()}", "Accept": "application/json"}
        if self._crn:
            headers["Service-CRN"] = self._crn
        return self._send(urllib.request.Request(url, headers=headers))

    def _send(self, request: urllib.request.Request) -> Any:
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise HttpError(exc.code, body) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise VendorUnavailable(
                f"ibm: could not reach {request.full_url.split('?')[0]} ({exc})",
                vendor="ibm",
                vendor_code=type(exc).__name__,
            ) from None
