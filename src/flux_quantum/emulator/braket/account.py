"""The AWS account around the emulated Braket: who the caller is (STS), its hybrid jobs role
(IAM), the tags of Braket's jobs images (ECR) and Braket's price list, as the Braket SDK
asks for them.

This module owns four small read-only answers: ECR's ``BatchGetImage`` of Braket's
hybrid jobs images (``latest`` and the verbose tag that names the image's Python, which
the SDK's ``@hybrid_job`` checks against the caller's), STS's ``GetCallerIdentity`` (the
scenario's account, a user named for the emulator) and IAM's ``ListRoles`` and
``GetRole`` (one role, ``service-role/AmazonBraketJobsExecutionRole``, the role the
SDK's ``get_default_jobs_role`` looks for), both in the AWS query protocol (a form body,
an XML answer, errors as ``ErrorResponse``), as botocore's ``sts`` 2011-06-15 and
``iam`` 2010-05-08 models have them; and the AWS Price List bulk offer file of Amazon
Braket as CSV (5 lines of metadata, then a header and a row per product), which the SDK's
cost tracker reads from ``BRAKET_PRICE_OFFERS_URL``, with a row for each device of the
scenario in each region its tasks may run in (QPU shots and tasks, simulator minutes,
and the hybrid jobs' variants), priced as the scenario prices them. It must never hold
state, accept a credential it would check, or list a device the scenario does not have.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import uuid
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from flux_quantum.emulator.braket.scenario import DeviceSpec, Scenario
from flux_quantum.emulator.wire import Request, Response

STS_PREFIX = "/sts"
IAM_PREFIX = "/iam"
ECR_PREFIX = "/ecr"
# The Braket hybrid jobs images (each one's "latest" and its verbose tag, which names its
# Python), as Braket's ECR repositories tag them.
JOB_IMAGES = {
    "amazon-braket-base-jobs": "1.0-cpu-py310-ubuntu22.04",
    "amazon-braket-pytorch-jobs": "2.4.1-gpu-py311-cu124-ubuntu22.04",
    "amazon-braket-tensorflow-jobs": "2.14.1-gpu-py310-cu118-ubuntu20.04",
    "amazon-braket-cudaq-jobs": "0.9.1-gpu-py310-cu121-ubuntu22.04",
}
PRICES_PATH = "/pricing/offers/v1.0/aws/AmazonBraket/current/index.csv"
JOBS_ROLE = "AmazonBraketJobsExecutionRole"
USER = "flux-quantum-emulator"
# The regions the SDK's AwsDevice.REGIONS lists: a global simulator's tasks may run in any.
BRAKET_REGIONS = ("us-east-1", "us-west-1", "us-west-2", "eu-west-2", "eu-north-1")
_STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"
_IAM_NS = "https://iam.amazonaws.com/doc/2010-05-08/"
_COLUMNS = (
    "SKU",
    "OfferTermCode",
    "RateCode",
    "TermType",
    "PriceDescription",
    "EffectiveDate",
    "StartingRange",
    "EndingRange",
    "Unit",
    "PricePerUnit",
    "Currency",
    "Product Family",
    "serviceCode",
    "Location",
    "Region Code",
    "DeviceName",
    "Device Name",
    "Version",
    "operation",
)


def account_service(request: Request) -> str | None:
    """Which account service a request is for (``sts``, ``iam``, ``ecr``, ``prices``), or
    None (a Braket or S3 call)."""
    if request.path == PRICES_PATH and request.method in ("GET", "HEAD"):
        return "prices"
    for prefix, service in ((STS_PREFIX, "sts"), (IAM_PREFIX, "iam"), (ECR_PREFIX, "ecr")):
        if request.path == prefix or request.path.startswith(prefix + "/"):
            return service
    return None


def account_operation(service: str, request: Request) -> str:
    """The call log's name of an account call (its action, or ``GetPriceList``)."""
    if service == "prices":
        return "GetPriceList"
    if service == "ecr":
        return request.headers.get("x-amz-target", "").rpartition(".")[2] or "ECR"
    return _action(request) or service.upper()


def account_env(url: str) -> dict[str, str]:
    """Where boto3 and the SDK reach the account's services on the emulator at ``url``."""
    return {
        "AWS_ENDPOINT_URL_STS": url + STS_PREFIX,
        "AWS_ENDPOINT_URL_IAM": url + IAM_PREFIX,
        "AWS_ENDPOINT_URL_ECR": url + ECR_PREFIX,
        "BRAKET_PRICE_OFFERS_URL": url + PRICES_PATH,
    }


class AwsAccount:
    """STS, IAM, ECR's jobs images and the price list of the scenario's account."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    def answer(self, service: str, request: Request) -> Response:
        """The answer of ``service`` (``account_service``) to ``request``."""
        match service:
            case "sts":
                return self.sts(request)
            case "iam":
                return self.iam(request)
            case "ecr":
                return self.ecr(request)
        return self.prices()

    # -- STS and IAM (query protocol) ------------------------------------------------------

    def sts(self, request: Request) -> Response:
        action = _action(request)
        if action != "GetCallerIdentity":
            return _query_error(
                400,
                "InvalidAction",
                f"the emulator's STS serves only GetCallerIdentity, not {action!r}",
            )
        account = self.scenario.account
        body = (
            f"<UserId>AIDAFLUXQUANTUMEMULATOR</UserId><Account>{account}</Account>"
            f"<Arn>arn:aws:iam::{account}:user/{USER}</Arn>"
        )
        return _query_answer("GetCallerIdentity", _STS_NS, body)

    def iam(self, request: Request) -> Response:
        action, fields = _action(request), _form(request)
        role = self._role_xml()
        match action:
            case "ListRoles":
                prefix = fields.get("PathPrefix", "/")
                members = f"<member>{role}</member>" if "/service-role/".startswith(prefix) else ""
                body = f"<IsTruncated>false</IsTruncated><Roles>{members}</Roles>"
                return _query_answer("ListRoles", _IAM_NS, body)
            case "GetRole":
                if fields.get("RoleName") != JOBS_ROLE:
                    return _query_error(
                        404,
                        "NoSuchEntity",
                        f"The role with name {fields.get('RoleName')} cannot be found.",
                    )
                return _query_answer("GetRole", _IAM_NS, f"<Role>{role}</Role>")
        return _query_error(
            400, "InvalidAction", f"the emulator's IAM serves ListRoles and GetRole, not {action!r}"
        )

    def _role_xml(self) -> str:
        arn = f"arn:aws:iam::{self.scenario.account}:role/service-role/{JOBS_ROLE}"
        return (
            f"<Path>/service-role/</Path><RoleName>{JOBS_ROLE}</RoleName>"
            f"<RoleId>AROAFLUXQUANTUMEMULATOR</RoleId><Arn>{arn}</Arn>"
            "<CreateDate>2025-01-01T00:00:00Z</CreateDate>"
        )

    # -- ECR (JSON 1.1): the jobs images' tags ------------------------------------------------

    def ecr(self, request: Request) -> Response:
        """``BatchGetImage`` of Braket's jobs images: by tag ``latest`` or by digest, the
        image under each of its tags (what the SDK reads a job image's Python from)."""
        target = request.headers.get("x-amz-target", "")
        if not target.endswith(".BatchGetImage"):
            return _json_error(
                400,
                "InvalidParameterException",
                f"the emulator's ECR serves only BatchGetImage, not {target!r}",
            )
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _json_error(400, "InvalidParameterException", "the body must be a JSON object")
        repository = str(body.get("repositoryName", ""))
        verbose = JOB_IMAGES.get(repository)
        if verbose is None:
            return _json_error(
                400,
                "RepositoryNotFoundException",
                f"The repository with name '{repository}' does not exist in the registry",
            )
        digest = "sha256:" + hashlib.sha256(repository.encode()).hexdigest()
        images, failures = [], []
        for wanted in body.get("imageIds") or []:
            tag, by_digest = wanted.get("imageTag"), wanted.get("imageDigest")
            if by_digest == digest:
                tags = ["latest", verbose]
            elif tag in ("latest", verbose):
                tags = [tag]
            else:
                failures.append(
                    {
                        "imageId": wanted,
                        "failureCode": "ImageNotFound",
                        "failureReason": "Requested image not found",
                    }
                )
                continue
            images += [
                {"registryId": str(body.get("registryId", "")), "repositoryName": repository,
                 "imageId": {"imageDigest": digest, "imageTag": t}, "imageManifest": "{}"}
                for t in tags
            ]  # fmt: skip
        answer = {"images": images, "failures": failures}
        return Response(
            200, json.dumps(answer).encode(), (("Content-Type", "application/x-amz-json-1.1"),)
        )

    # -- the price list ---------------------------------------------------------------------

    def prices(self) -> Response:
        """Braket's offer file: a row per (device, region, product family)."""
        out = io.StringIO()
        for line in (
            '"FormatVersion","v1.0"',
            '"Disclaimer","The emulated Amazon Braket price list (flux-quantum emulator)."',
            '"Publication Date","2025-01-01T00:00:00Z"',
            '"Version","flux-quantum-emulator"',
            '"OfferCode","AmazonBraket"',
        ):
            out.write(line + "\n")
        writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for spec in self.scenario.devices:
            for region in _regions(spec):
                for row in _rows(spec, region):
                    writer.writerow([row.get(column, "") for column in _COLUMNS])
        return Response(200, out.getvalue().encode(), (("Content-Type", "text/csv"),))


def _regions(spec: DeviceSpec) -> tuple[str, ...]:
    return (spec.region,) if spec.region else BRAKET_REGIONS


def _rows(spec: DeviceSpec, region: str) -> list[dict[str, str]]:
    """The products of one device in one region, as the SDK's tracker looks them up."""
    base = {
        "TermType": "OnDemand",
        "Currency": "USD",
        "serviceCode": "AmazonBraket",
        "Region Code": region,
        "EffectiveDate": "2025-01-01",
    }
    name = spec.arn.split("/")[-1]
    if spec.type == "SIMULATOR":
        version = name.upper()
        per_minute = f"{spec.cost.price:g}" if spec.cost.unit == "minute" else "0"
        return [
            {
                **base,
                "Product Family": family,
                "Version": version,
                "operation": operation,
                "Unit": "minutes",
                "PricePerUnit": per_minute,
                "PriceDescription": f"{version} {family} per minute",
            }  # fmt: skip
            for family, operation in (
                ("Simulator Task", "CompleteTask"),
                ("Braket Managed Jobs Simulator Task", "Managed-Jobs"),
            )
        ]
    device = name[0].upper() + name[1:]
    if "Ibex" in device:
        device = device.replace("Ibex", "IBEX")
    elif "2000Q" in device:
        device = "2000Q"
    elif "Advantage_system" in device:
        device = "Advantage_system"
    shot = f"{spec.cost.price:g}" if spec.cost.unit == "shot" else "0"
    task = f"{spec.cost.task_price + (spec.cost.price if spec.cost.unit == 'task' else 0):g}"
    return [
        {**base, "Product Family": "Quantum Task-Shot", "DeviceName": device,
         "Unit": "shots", "PricePerUnit": shot},
        {**base, "Product Family": "Quantum Task", "DeviceName": device,
         "Unit": "tasks", "PricePerUnit": task},
        {**base, "Product Family": "Braket Managed Jobs QPU Task Shot", "Device Name": device,
         "Unit": "shots", "PricePerUnit": shot},
        {**base, "Product Family": "Braket Managed Jobs QPU Task", "Device Name": device,
         "Unit": "tasks", "PricePerUnit": task},
    ]  # fmt: skip


def _form(request: Request) -> dict[str, str]:
    fields = parse_qs((request.body or b"").decode("utf-8", "replace"))
    query = {k: v for k, v in request.query.items() if v}
    merged = {**query, **fields}
    return {k: v[0] for k, v in merged.items()}


def _action(request: Request) -> str:
    return _form(request).get("Action", "")


def _query_answer(action: str, namespace: str, result: str) -> Response:
    body = (
        f'<{action}Response xmlns="{namespace}"><{action}Result>{result}</{action}Result>'
        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )
    return Response(200, body.encode(), (("Content-Type", "text/xml"),))


def _json_error(status: int, code: str, message: str) -> Response:
    body = json.dumps({"__type": code, "message": message}).encode()
    return Response(status, body, (("Content-Type", "application/x-amz-json-1.1"),), error=code)


def _query_error(status: int, code: str, message: str) -> Response:
    body = (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>"
        f"<Message>{escape(message)}</Message></Error>"
        f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
    return Response(status, body.encode(), (("Content-Type", "text/xml"),), error=code)
