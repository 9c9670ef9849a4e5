"""Braket's failures as ``flux_quantum.vendors.errors``: the one translation.

This module owns the mapping of what boto3 and botocore raise on a Braket, S3 or SQS
(the events queue) call (a ``ClientError`` with the service's error code, a timeout, a
refused connection, missing credentials) to the project's vendor errors, with the code
and the service's message kept in the text. It must never retry, never call Braket,
and never write a credential into a message: only the service's own answer, the
operation and its subject.
"""

from __future__ import annotations

from collections.abc import Mapping

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    DeviceOffline,
    DeviceRetired,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    VendorError,
    VendorThrottled,
    VendorUnavailable,
)

# What botocore raises that this module translates; anything else is not Braket's answer.
TRANSLATED: tuple[type[BaseException], ...] = (ClientError, BotoCoreError)

# Braket's error codes (botocore model 2019-09-01), S3's and SQS's, to our error classes.
_ERROR_CLASSES: Mapping[str, type[VendorError]] = {
    "ThrottlingException": VendorThrottled,
    "TooManyRequestsException": VendorThrottled,
    "SlowDown": VendorThrottled,
    "InternalServiceException": VendorUnavailable,
    "ServiceUnavailableException": VendorUnavailable,
    "InternalError": VendorUnavailable,
    "ServiceUnavailable": VendorUnavailable,
    "DeviceOfflineException": DeviceOffline,
    "DeviceRetiredException": DeviceRetired,
    "ValidationException": InvalidRequest,
    "AccessDeniedException": AccessDenied,
    "AccessDenied": AccessDenied,
    "UnrecognizedClientException": AccessDenied,
    "InvalidSignatureException": AccessDenied,
    "ExpiredTokenException": AccessDenied,
    "InvalidClientTokenId": AccessDenied,
    "ResourceNotFoundException": NotFound,
    "NoSuchKey": NotFound,
    "NoSuchBucket": NotFound,
    "ServiceQuotaExceededException": QuotaExceeded,
    "ConflictException": Conflict,
    # SQS (the events queue): its JSON protocol keeps the old query codes in Code.
    "AWS.SimpleQueueService.NonExistentQueue": NotFound,
    "QueueDoesNotExist": NotFound,
    "RequestThrottled": VendorThrottled,
    "OverLimit": VendorThrottled,
    "InvalidSecurity": AccessDenied,
}


def translate_error(
    exc: BaseException, *, vendor: str, operation: str, subject: str
) -> VendorError:
    """One project error for an exception raised by boto3/botocore during ``operation``."""
    if isinstance(exc, VendorError):
        return exc
    what = f"{vendor} {operation} for {subject}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or "").strip()
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        cls = _ERROR_CLASSES.get(code)
        if cls is None:
            cls = VendorUnavailable if status >= 500 else VendorError
        detail = f": {message}" if message else ""
        return cls(
            f"{what} failed with {code}{detail}",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    code = type(exc).__name__
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return VendorUnavailable(
            f"{what} timed out ({code})", vendor=vendor, vendor_code=code, operation=operation
        )
    if isinstance(exc, EndpointConnectionError | ConnectionClosedError):
        return VendorUnavailable(
            f"{what} could not connect ({code}: {exc})",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AccessDenied(
            f"{what} failed: no usable AWS credentials ({code}); set a profile or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the job's owner",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    if isinstance(exc, ParamValidationError):
        return InvalidRequest(
            f"{what} was refused before sending: {exc}",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    if isinstance(exc, BotoCoreError):
        return VendorUnavailable(
            f"{what} failed ({code}: {exc})", vendor=vendor, vendor_code=code, operation=operation
        )
    raise exc


def name_first_failure(exc: ClientError) -> None:
    """Add Braket's first ``programSetValidationFailures`` entry to a refused program
    set's message, as the SDK does (which program, which inputs, what is wrong)."""
    failures = exc.response.get("programSetValidationFailures")
    if not isinstance(failures, list) or not failures or not isinstance(failures[0], Mapping):
        return
    first = failures[0]
    where = f"program {first.get('programIndex')}"
    if first.get("inputsIndex") is not None:
        where += f" inputs {first.get('inputsIndex')}"
    errors = first.get("errors")
    error = exc.response.setdefault("Error", {})
    message = str(error.get("Message") or "").rstrip(".")
    detail = "; ".join(map(str, errors)) if isinstance(errors, list) else ""
    if detail and detail not in message:  # Braket's message may already say it
        error["Message"] = f"{message} (first failure: {where}: {detail})"
