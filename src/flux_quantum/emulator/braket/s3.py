"""A minimal in-memory S3, path-style, enough for the Braket SDK and boto3 to store results.

This module owns the emulator's object store and the S3 REST dialect it speaks under the
``/s3`` path prefix: GetObject, HeadObject, PutObject, DeleteObject, ListObjectsV2,
HeadBucket and CreateBucket, with S3's XML errors. It was chosen over moto's
ThreadedMotoServer because it starts in no time, shares one port and one lock with the Braket
side (a task's results.json appears atomically when the task completes) and keeps no
process-global state. It must never check signatures, persist anything to disk, or implement
more of S3 than the SDK needs (no versions, ACLs, multipart).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime
from urllib.parse import quote, unquote
from xml.sax.saxutils import escape

from flux_quantum.emulator.wire import Request, Response

PREFIX = "/s3"


@dataclass(frozen=True)
class S3Object:
    body: bytes
    etag: str
    last_modified: datetime
    content_type: str = "application/octet-stream"


@dataclass(frozen=True)
class S3Call:
    """What an S3 request asks for: the operation, bucket and key (already decoded)."""

    operation: str
    bucket: str | None
    key: str | None

    @property
    def target(self) -> str | None:
        if self.bucket is None:
            return None
        return f"s3://{self.bucket}/{self.key or ''}"


def classify(request: Request) -> S3Call:
    """Name the S3 operation of a path-style request under ``/s3``."""
    parts = request.path[len(PREFIX) :].split("?")[0].lstrip("/")
    raw_bucket, _, raw_key = parts.partition("/")
    bucket = unquote(raw_bucket) or None
    key = unquote(raw_key) or None
    method = request.method
    if bucket is None:
        operation = "ListBuckets"
    elif key is None:
        operation = {
            "GET": "ListObjectsV2",
            "HEAD": "HeadBucket",
            "PUT": "CreateBucket",
            "DELETE": "DeleteBucket",
        }.get(method, "Unknown")
    else:
        operation = {
            "GET": "GetObject",
            "HEAD": "HeadObject",
            "PUT": "PutObject",
            "DELETE": "DeleteObject",
        }.get(method, "Unknown")
    return S3Call(operation, bucket, key)


def s3_error(
    code: str, status: int, message: str, resource: str = "", head: bool = False
) -> Response:
    """An S3 XML error (HEAD requests get the status only, as S3 does)."""
    if head:
        return Response(status, b"", (), error=code)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>emulator</RequestId></Error>"
    ).encode()
    return Response(status, body, (("Content-Type", "application/xml"),), error=code)


class ObjectStore:
    """Buckets of objects in memory. Not thread-safe: the emulator holds its lock around it."""

    def __init__(self) -> None:
        self._buckets: dict[str, dict[str, S3Object]] = {}

    def create_bucket(self, bucket: str) -> None:
        self._buckets.setdefault(bucket, {})

    def has_bucket(self, bucket: str) -> bool:
        return bucket in self._buckets

    def put(
        self, bucket: str, key: str, body: bytes, when: datetime, content_type: str
    ) -> S3Object:
        obj = S3Object(body, f'"{hashlib.md5(body).hexdigest()}"', when, content_type)
        self._buckets.setdefault(bucket, {})[key] = obj
        return obj

    def get(self, bucket: str, key: str) -> S3Object | None:
        return self._buckets.get(bucket, {}).get(key)

    def delete(self, bucket: str, key: str) -> None:
        self._buckets.get(bucket, {}).pop(key, None)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        return sorted(k for k in self._buckets.get(bucket, {}) if k.startswith(prefix))

    # -- the REST dialect -------------------------------------------------------------------

    def handle(self, request: Request, call: S3Call, now: datetime) -> Response:
        """Answer one S3 request (the caller has applied faults and synced task results)."""
        head = request.method == "HEAD"
        bucket, key = call.bucket, call.key
        if bucket is None or call.operation in ("ListBuckets", "DeleteBucket", "Unknown"):
            return s3_error(
                "NotImplemented", 501, f"{call.operation} is not emulated", request.path, head
            )
        if call.operation == "CreateBucket":
            self.create_bucket(bucket)
            return Response(200, b"", (("Location", f"/{bucket}"),))
        if call.operation == "PutObject":
            body = _decode_body(request)
            ctype = request.headers.get("content-type", "application/octet-stream")
            stored = self.put(bucket, key or "", body, now, ctype)
            return Response(200, b"", (("ETag", stored.etag),))
        if not self.has_bucket(bucket):
            return s3_error(
                "NoSuchBucket", 404, "The specified bucket does not exist", bucket, head
            )
        if call.operation == "HeadBucket":
            return Response(200, b"", (("x-amz-bucket-region", "us-east-1"),))
        if call.operation == "ListObjectsV2":
            return self._list(request, bucket)
        if call.operation == "DeleteObject":
            self.delete(bucket, key or "")
            return Response(204)
        obj = self.get(bucket, key or "")
        if obj is None:
            return s3_error("NoSuchKey", 404, "The specified key does not exist.", key or "", head)
        headers = (
            ("Content-Type", obj.content_type),
            ("ETag", obj.etag),
            ("Last-Modified", format_datetime(obj.last_modified, usegmt=True)),
            ("Accept-Ranges", "bytes"),
        )
        # HEAD answers the object's length without a body; the server keeps it that way.
        return Response(200, obj.body, headers)

    def _list(self, request: Request, bucket: str) -> Response:
        prefix = request.first("prefix") or ""
        delimiter = request.first("delimiter") or ""
        url_encode = request.first("encoding-type") == "url"
        max_keys = int(request.first("max-keys") or 1000)
        start = request.first("continuation-token") or request.first("start-after") or ""
        keys = [k for k in self.keys(bucket, prefix) if k > start]
        contents: list[str] = []
        prefixes: list[str] = []
        for key in keys:
            if delimiter:
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if common not in prefixes:
                        prefixes.append(common)
                    continue
            contents.append(key)
        truncated = len(contents) > max_keys
        contents = contents[:max_keys]

        def show(text: str) -> str:
            return escape(quote(text, safe="/") if url_encode else text)

        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
            f"<Name>{escape(bucket)}</Name><Prefix>{show(prefix)}</Prefix>",
            f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
        ]
        if delimiter:
            parts.append(f"<Delimiter>{show(delimiter)}</Delimiter>")
        if url_encode:
            parts.append("<EncodingType>url</EncodingType>")
        if truncated and contents:
            parts.append(f"<NextContinuationToken>{escape(contents[-1])}</NextContinuationToken>")
        for key in contents:
            obj = self._buckets[bucket][key]
            parts.append(
                f"<Contents><Key>{show(key)}</Key>"
                f"<LastModified>{obj.last_modified.isoformat(timespec='milliseconds')[:23]}Z"
                f"</LastModified><ETag>{escape(obj.etag)}</ETag><Size>{len(obj.body)}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        for common in prefixes:
            parts.append(f"<CommonPrefixes><Prefix>{show(common)}</Prefix></CommonPrefixes>")
        parts.append("</ListBucketResult>")
        return Response(200, "".join(parts).encode(), (("Content-Type", "application/xml"),))


def _decode_body(request: Request) -> bytes:
    """The object bytes, undoing aws-chunked framing when a client streams with trailers."""
    encoding = request.headers.get("content-encoding", "")
    streaming = request.headers.get("x-amz-content-sha256", "").startswith("STREAMING-")
    if "aws-chunked" not in encoding and not streaming:
        return request.body
    data, out, pos = request.body, bytearray(), 0
    while pos < len(data):
        end = data.find(b"\r\n", pos)
        if end < 0:
            break
        size = int(data[pos:end].split(b";")[0], 16)
        if size == 0:
            break
        out += data[end + 2 : end + 2 + size]
        pos = end + 2 + size + 2
    return bytes(out)
