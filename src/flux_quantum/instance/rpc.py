"""Many RPCs to Flux at once, at the cost of the C calls and the JSON, nothing more.

flux-python's ``handle.rpc(...).get()`` wraps every future in Python objects (a
``Future``, its inner wrapper, a function wrapper per call): about 0.2 ms of Python
per RPC, which is most of the time when the service reads 10,000 held jobs' records
or posts an event to each job of a batch. ``pipelined`` sends a window of requests
straight through libflux's ``flux_rpc`` (the same function ``handle.rpc`` calls), then
reads every answer with ``flux_rpc_get``: one round trip per window, and no wrapper
objects. Only the answers' JSON is decoded in Python.

It uses ``_flux._core``'s ``ffi``/``lib``, the cffi module every flux-python ships
(``flux.core.inner`` is built on it), and the handle's ``handle`` attribute, the
``flux_t *`` it wraps.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

WINDOW = 256  # requests in flight at once

Request = tuple[str, Mapping[str, Any]]


class RpcError(OSError):
    """One request of a pipelined batch failed: its errno and Flux's message."""


def pipelined(
    handle: Any, requests: Sequence[Request], window: int = WINDOW
) -> list[Any | RpcError]:
    """Send ``requests`` (topic, payload) on ``handle``, ``window`` at a time, and return
    one outcome per request, in order: the decoded answer (None for an empty one) or
    an ``RpcError``. Requests to one service are answered in the order sent."""
    from _flux._core import ffi, lib

    raw_handle = getattr(handle, "handle", handle)
    nodeid = lib.FLUX_NODEID_ANY
    out: list[Any | RpcError] = []
    answer = ffi.new("char *[1]")
    for start in range(0, len(requests), window):
        futures: list[tuple[Any, RpcError | None]] = []  # (future, or the error making it)
        try:
            for topic, payload in requests[start : start + window]:
                future = lib.flux_rpc(
                    raw_handle, topic.encode(), json.dumps(payload).encode(), nodeid, 0
                )
                if future == ffi.NULL:
                    errno = ffi.errno
                    futures.append((None, RpcError(errno, os.strerror(errno))))
                else:
                    futures.append((future, None))
            for future, error in futures:
                if future is None:
                    out.append(error)
                    continue
                if lib.flux_rpc_get(future, answer) < 0:
                    errno = ffi.errno
                    text = lib.flux_future_error_string(future)
                    message = ffi.string(text).decode() if text != ffi.NULL else os.strerror(errno)
                    out.append(RpcError(errno, message))
                elif answer[0] == ffi.NULL:
                    out.append(None)
                else:
                    out.append(json.loads(ffi.string(answer[0])))
        finally:
            for future, _ in futures:
                if future is not None:
                    lib.flux_future_destroy(future)
    return out
