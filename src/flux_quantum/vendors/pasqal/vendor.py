"""``PasqalVendor``: Pasqal's neutral-atom QPUs, in the cloud and on premises, through QRMI.

This module owns what is Pasqal's on top of ``QrmiVendor``: the settings of each device
(QRMI's names, from the job owner's environment, then the catalog's ``vendors.pasqal``
section, which never holds a secret), the payload (a Pulser sequence as abstract JSON,
``job_runs`` = shots, checked by ``program``), the result as counts, and finding a
create again. A device is reached as QRMI's ``PasqalCloud`` (its catalog id a Pasqal
device type such as ``FRESNEL``) or ``PasqalLocal`` (an on-premises warden); its
``properties.pasqal_access`` (``cloud`` or ``local``) says which, by default ``cloud``
for Pasqal's device types and ``local`` otherwise. It must never change ``os.environ``,
never retry outside its ``RetryBudget`` and never write a token, password, client
secret or munge credential into a message.

- Settings, cloud: ``<id>_QRMI_PASQAL_CLOUD_<KEY>``, else ``QRMI_PASQAL_CLOUD_<KEY>``, for
  BASE_URL, AUTH_ENDPOINT, PROJECT_ID, AUTH_TOKEN, CLIENT_ID, CLIENT_SECRET; then the
  catalog's ``base_url``, ``auth_endpoint``, ``project_id``; ``PASQAL_USERNAME`` and
  ``PASQAL_PASSWORD``, ``PASQAL_CONFIG_ROOT`` and ``HOME`` (QRMI's ``.pasqal/config``)
  pass through. Local: ``<id>_QRMI_WARDEN_URL`` (or ``QRMI_WARDEN_URL``, or the catalog's
  ``warden_url``), ``QRMI_JOB_UID`` (default: this process's uid), ``QRMI_JOB_ID``
  (default: ``FLUX_JOB_ID``, else 0) and the warden session ``QRMI_JOB_ACQUISITION_TOKEN``
  (without one, this process acquires a session with the device's first call and uses
  it for every task, as QRMI's Slurm plugin acquires one per job).
- Idempotency: QRMI's create sends no token, so the token rides the sequence's ``name``
  (``program.mark``); Pasqal keeps a batch's sequence as sent (``sequence_builder``
  in a batch document; the warden keeps a job's ``sequence``). ``find_task`` lists the
  device type's batches created since the recorded create (minus ``skew``:
  ``GET /core-fast/api/v2/batches?device_type=&start_date=``, paged) and returns the one
  whose sequence carries the token; on premises it lists the warden's ``GET /jobs`` (with
  a munge credential of its own; without munged it raises ``VendorUnavailable`` rather
  than answer "none", so no second job is made). Before ``since + settle`` it raises
  ``VendorUnavailable``: a create in flight may not be listed yet.
- Results: ``task_result().value`` is ``{"counter": {bitstring: count}}``, one character
  per atom in register order. ``billed_seconds``: a cloud batch's end minus start, when
  its document gives both.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import CatalogSettings, TaskRef, TaskResult, VendorSession
from flux_quantum.vendors.errors import AccessDenied, VendorError, VendorUnavailable
from flux_quantum.vendors.pasqal import VENDOR
from flux_quantum.vendors.pasqal import program as pasqal_program
from flux_quantum.vendors.qrmi import QrmiResource, QrmiVendor

CLOUD = "QRMI_PASQAL_CLOUD_"
CLOUD_KEYS = ("BASE_URL", "AUTH_ENDPOINT", "PROJECT_ID", "AUTH_TOKEN", "CLIENT_ID", "CLIENT_SECRET")
CLOUD_DEVICES = ("FRESNEL", "FRESNEL_CAN1", "EMU_MPS", "EMU_FREE", "EMU_FRESNEL")
DEFAULT_BASE_URL = "https://apis.pasqal.cloud"
DEFAULT_AUTH_ENDPOINT = "https://authenticate.pasqal.cloud/oauth/token"
AUDIENCE = "https://apis.pasqal.cloud/account/api/v1"
USER_CLIENT_ID = "PeZvo7Atx7IVv3iel59asJSb4Ig7vuSB"  # Pasqal's public client for user logins
LIST_PAGE = 100
LIST_PAGES_MAX = 20


@dataclass(frozen=True)
class PasqalSettings(CatalogSettings):
    """Site settings (the catalog's ``vendors.pasqal``) and ``find_task``'s margins."""

    base_url: str | None = None
    auth_endpoint: str | None = None
    project_id: str | None = None
    warden_url: str | None = None
    timeout: float = 20.0
    skew: float = 300.0
    settle: float = 60.0


def access_of(device: Device) -> str:
    """``cloud`` or ``local``: how ``device`` is reached."""
    access = device.properties.get("pasqal_access")
    if access in ("cloud", "local"):
        return access
    return "cloud" if device.id in CLOUD_DEVICES else "local"


class PasqalVendor(QrmiVendor[PasqalSettings]):
    """Pasqal's QPUs through QRMI's ``PasqalCloud`` and ``PasqalLocal`` resources."""

    descriptor = VENDOR
    settings_type = PasqalSettings
    resource_type = "PasqalCloud"

    def __init__(self, settings: PasqalSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._tokens: dict[str, tuple[str, float]] = {}
        self._in_session: dict[str, QrmiResource] = {}  # on premises: device -> in a session
        self._token_lock = threading.Lock()

    # -- settings

    def _config(self, device: Device) -> dict[str, str]:
        s = self.settings
        if access_of(device) == "local":
            url = self.setting(device, "QRMI_WARDEN_URL", s.warden_url)
            if not url:
                raise AccessDenied(
                    f"{self.name}: no warden for {device.name}: set {device.id}_QRMI_WARDEN_URL "
                    "(or vendors.pasqal.warden_url in the catalog)",
                    vendor=self.name,
                    vendor_code="NoWarden",
                )
            config = {
                "QRMI_WARDEN_URL": url,
                "QRMI_JOB_UID": self._environ.get("QRMI_JOB_UID") or str(os.getuid()),
                "QRMI_JOB_ID": self._environ.get("QRMI_JOB_ID")
                or self._environ.get("FLUX_JOB_ID")
                or "0",
            }
            session = self.setting(device, "QRMI_JOB_ACQUISITION_TOKEN")
            if session:
                config["QRMI_JOB_ACQUISITION_TOKEN"] = session
            return config
        defaults = {
            "BASE_URL": s.base_url or DEFAULT_BASE_URL,
            "AUTH_ENDPOINT": s.auth_endpoint or DEFAULT_AUTH_ENDPOINT,
            "PROJECT_ID": s.project_id,
        }
        config = {}
        for key in CLOUD_KEYS:
            value = self.setting(device, CLOUD + key, defaults.get(key))
            if value:
                config[CLOUD + key] = value
        for key in ("PASQAL_USERNAME", "PASQAL_PASSWORD", "PASQAL_CONFIG_ROOT", "HOME"):
            if self._environ.get(key):
                config[key] = self._environ[key]
        has_login = (
            CLOUD + "AUTH_TOKEN" in config
            or {CLOUD + "CLIENT_ID", CLOUD + "CLIENT_SECRET"} <= config.keys()
            or {"PASQAL_USERNAME", "PASQAL_PASSWORD"} <= config.keys()
            or self._config_file(config)
        )
        if not has_login:
            raise AccessDenied(
                f"{self.name}: no Pasqal Cloud credentials for {device.name}: set "
                f"{device.id}_{CLOUD}CLIENT_ID and _CLIENT_SECRET, or PASQAL_USERNAME and "
                "PASQAL_PASSWORD, or a .pasqal/config, in the job owner's environment",
                vendor=self.name,
                vendor_code="NoCredentials",
            )
        return config

    @staticmethod
    def _config_file(config: Mapping[str, str]) -> bool:
        roots = [config.get("PASQAL_CONFIG_ROOT"), config.get("HOME")]
        return any(r and os.path.isfile(os.path.join(r, ".pasqal", "config")) for r in roots)

    def _resource_type(self, device: Device) -> str:
        return "PasqalLocal" if access_of(device) == "local" else "PasqalCloud"

    def _task_resource(self, device: Device, session: VendorSession | None = None) -> QrmiResource:
        """On premises, a task is created in a warden session (what QRMI's Slurm plugin
        acquires for a job): the one configured, else one this process acquires with
        the device's first task and keeps (the status needs none)."""
        config = self._config(device)
        if access_of(device) != "local" or "QRMI_JOB_ACQUISITION_TOKEN" in config:
            return self._resource(device)
        with self._lock:
            resource = self._in_session.get(device.name)
        if resource is not None:
            return resource
        import qrmi

        kind = qrmi.ResourceType.PasqalLocal
        opener = self._resource(device)
        session = self._call("acquire", device.name, lambda: opener.acquire())
        config["QRMI_JOB_ACQUISITION_TOKEN"] = str(session)
        try:
            created = qrmi.QuantumResource.from_config(device.id, kind, config)
        except Exception as exc:
            raise self._translate(exc, "configure", device.name) from None
        with self._lock:
            return self._in_session.setdefault(device.name, QrmiResource(created))

    # -- what is Pasqal's

    def _payload(self, device: Device, program_text: str, shots: int, token: str) -> Any:
        problem = pasqal_program.check(program_text, device.qubits)
        if problem is not None:
            raise ValueError(problem)
        import qrmi

        return qrmi.Payload.PasqalCloud(
            sequence=pasqal_program.mark(program_text, token), job_runs=shots
        )

    def _results(self, task: TaskRef, value: str) -> list[TaskResult]:
        doc = json.loads(value)
        counter = doc["counter"]
        counts = {str(k): int(v) for k, v in counter.items()}
        if any(v < 0 for v in counts.values()):
            raise ValueError("a count is negative")
        return [TaskResult(task=task, counts=counts, raw=doc)]

    def _settle(self) -> float:
        """A batch (a job, on premises) an earlier create made is trusted absent only
        ``settings.settle`` seconds after that create's recorded start."""
        return self.settings.settle

    def _find(self, device: Device, token: str, since: float) -> TaskRef | None:
        if access_of(device) == "local":
            return self._find_local(device, token)
        config = self._config(device)
        base = config[CLOUD + "BASE_URL"].rstrip("/")
        after = datetime.fromtimestamp(since - self.settings.skew, UTC).isoformat()
        for page in range(LIST_PAGES_MAX):
            query = {
                "device_type": device.id,
                "start_date": after,
                "offset": str(page * LIST_PAGE),
                "limit": str(LIST_PAGE),
            }
            url = f"{base}/core-fast/api/v2/batches?{urllib.parse.urlencode(query)}"
            batches = self._get(url, self._bearer(device, config)).get("data") or []
            for batch in batches:
                sequence = batch.get("sequence_builder")
                if sequence is None:
                    quoted = urllib.parse.quote(str(batch.get("id")), safe="")
                    one = self._get(
                        f"{base}/core-fast/api/v2/batches/{quoted}", self._bearer(device, config)
                    )
                    sequence = (one.get("data") or {}).get("sequence_builder")
                if pasqal_program.token_of(sequence) == token:
                    return TaskRef(self.name, device.name, str(batch["id"]), token)
            if len(batches) < LIST_PAGE:
                return None
        raise VendorUnavailable(
            f"{self.name} find for {device.name}: more than {LIST_PAGE * LIST_PAGES_MAX} "
            "batches since the recorded create; not sure the task is absent, so not creating "
            "another",
            vendor=self.name,
            vendor_code="TooManyBatches",
            operation="find",
        )

    def _find_local(self, device: Device, token: str) -> TaskRef | None:
        url = self._config(device)["QRMI_WARDEN_URL"].rstrip("/") + "/jobs"
        try:
            credential = munge_credential()
        except OSError as exc:
            raise VendorUnavailable(
                f"{self.name} find for {device.name}: cannot make a munge credential to list "
                f"the warden's jobs ({exc}); not creating another",
                vendor=self.name,
                vendor_code="NoMunge",
                operation="find",
            ) from None
        jobs = self._get(url, None, {"x-munge-cred": credential})
        for job in jobs if isinstance(jobs, list) else []:
            if pasqal_program.token_of(job.get("sequence")) == token:
                return TaskRef(self.name, device.name, str(job["id"]), token)
        return None

    def billed_seconds(self, task: TaskRef) -> float | None:
        device = self.device_of(task.device)
        if access_of(device) == "local":
            return None
        config = self._config(device)
        quoted = urllib.parse.quote(task.task_id, safe="")
        url = f"{config[CLOUD + 'BASE_URL'].rstrip('/')}/core-fast/api/v2/batches/{quoted}"
        try:
            doc = self._call(
                "batch", task.task_id, lambda: self._get(url, self._bearer(device, config))
            )
        except VendorError:
            return None
        data = doc.get("data") or {}
        start, end = data.get("start_datetime"), data.get("end_datetime")
        if data.get("status") != "DONE" or not start or not end:
            return None
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
        return seconds if seconds >= 0 else None

    # -- plain HTTP for what QRMI has no call for

    def _bearer(self, device: Device, config: Mapping[str, str]) -> str:
        token = config.get(CLOUD + "AUTH_TOKEN")
        if token:
            return token
        now = self._clock()
        with self._token_lock:
            cached = self._tokens.get(device.name)
            if cached is not None and cached[1] > now:
                return cached[0]
        if {CLOUD + "CLIENT_ID", CLOUD + "CLIENT_SECRET"} <= config.keys():
            form = {
                "grant_type": "client_credentials",
                "client_id": config[CLOUD + "CLIENT_ID"],
                "client_secret": config[CLOUD + "CLIENT_SECRET"],
                "audience": AUDIENCE,
            }
        elif {"PASQAL_USERNAME", "PASQAL_PASSWORD"} <= config.keys():
            form = {
                "grant_type": "http://auth0.com/oauth/grant-type/password-realm",
                "realm": "pcs-users",
                "client_id": USER_CLIENT_ID,
                "audience": AUDIENCE,
                "username": config["PASQAL_USERNAME"],
                "password": config["PASQAL_PASSWORD"],
            }
        else:
            raise AccessDenied(
                f"{self.name}: finding a batch on {device.name} needs a token, a service "
                "account or a username and password in the job owner's environment",
                vendor=self.name,
                vendor_code="NoCredentials",
            )
        endpoint = config[CLOUD + "AUTH_ENDPOINT"]
        if "://" not in endpoint:
            endpoint = "https://" + endpoint
        request = urllib.request.Request(
            endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        answer = self._send(request)
        token = str(answer["access_token"])
        lifetime = float(answer.get("expires_in") or 600)
        with self._token_lock:
            self._tokens[device.name] = (token, now + lifetime - 60)
        return token

    def _get(self, url: str, bearer: str | None, headers: Mapping[str, str] | None = None) -> Any:
        sent = {"Accept": "application/json", **(headers or {})}
        if bearer:
            sent["Authorization"] = f"Bearer {bearer}"
        return self._send(urllib.request.Request(url, headers=sent))

    def _send(self, request: urllib.request.Request) -> Any:
        return self._http_json(request, self.settings.timeout)


def munge_credential() -> str:
    """A munge credential from libmunge (the one the warden expects in ``x-munge-cred``);
    OSError when libmunge is missing or munged does not answer."""
    try:
        lib = ctypes.CDLL("libmunge.so.2")
    except OSError as exc:
        raise OSError(f"libmunge is not installed: {exc}") from None
    credential = ctypes.c_char_p()
    status = lib.munge_encode(ctypes.byref(credential), None, None, 0)
    if status != 0:
        lib.munge_strerror.restype = ctypes.c_char_p
        reason = lib.munge_strerror(status) or b"unknown error"
        raise OSError(f"munge_encode failed: {reason.decode(errors='replace')}")
    value = (credential.value or b"").decode()
    libc = ctypes.CDLL(None)
    libc.free(credential)
    return value
