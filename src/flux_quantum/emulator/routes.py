"""A vendor side's routes as a table: which method and path pattern name which operation.

This module owns the declarative form every path-routed side of the emulator writes its
API in (``Route``: a method, a path pattern, the operation it is, the name of the side's
handler, what the call log names as its target and which device its faults select on),
the matching of a request against a side's table (``RouteTable.match``, first match
wins) and what a match gives the side (``SideRoute``). A pattern is an absolute path
whose segments are literals, ``<name>`` (one segment) or at most one ``<name*>`` (one
segment or more, joined with ``/``: an ARN or an object key); segments compare
percent-decoded and an empty segment (a trailing ``/``) is ignored, as every client
the sides serve is. It must never know a vendor's paths or answers (those are each side's
``ROUTES``), hold state, or do I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from flux_quantum.emulator.wire import Request, Response, body_field

_FIELD = re.compile(r"<(\w+)(\*?)>")


class Owners(Protocol):
    """What a side answers about what it holds: the device of the job (or session, or
    batch: ``kind`` is the path field's name) that ``key`` names, None if it has none."""

    def _device_of(self, kind: str, key: str) -> str | None: ...


@dataclass(frozen=True)
class Body:
    """The device a call names in its JSON body: the first of ``keys`` that is a string
    (none: None, as for a body that is not JSON; the handler refuses that)."""

    keys: tuple[str, ...]

    def __init__(self, *keys: str) -> None:
        object.__setattr__(self, "keys", keys)

    def device(self, side: Owners, request: Request, fields: Mapping[str, str]) -> str | None:
        return next((v for v in (body_field(request, k) for k in self.keys) if v), None)


@dataclass(frozen=True)
class Query:
    """The device a call names in its query string (``key``)."""

    key: str

    def device(self, side: Owners, request: Request, fields: Mapping[str, str]) -> str | None:
        return request.first(self.key)


@dataclass(frozen=True)
class OwnerOf:
    """The device of what the path field ``name`` names (a job, a session), as the side
    knows it (``Owners._device_of``)."""

    name: str

    def device(self, side: Owners, request: Request, fields: Mapping[str, str]) -> str | None:
        return side._device_of(self.name, fields[self.name])


Device = Body | Query | OwnerOf


@dataclass(frozen=True)
class Route:
    """One entry of a side's table: ``method`` and ``path`` (a pattern) are ``operation``,
    answered by the side's method named ``handler``. ``target`` is what the call log names
    (a template of the path's fields, ``"<job>"``, or read from the body); ``device`` is
    what the side's faults select on (a template, or read from the body, the query or the
    side). A route that
    ``creates`` something is answered by a handler that also says what it created and is
    told the faults that fired (a job that will fail)."""

    method: str
    path: str
    operation: str
    handler: str
    target: str | Device | None = None
    device: str | Device | None = None
    creates: bool = False

    def __post_init__(self) -> None:
        stars = [star for _, star in _FIELD.findall(self.path) if star]
        if len(stars) > 1:
            raise ValueError(f"route {self.operation}: at most one <name*> in {self.path!r}")

    @property
    def segments(self) -> list[str]:
        return [s for s in self.path.split("/") if s]

    def match(self, method: str, parts: Sequence[str]) -> dict[str, str] | None:
        """The path's fields when ``method`` and the path's segments ``parts`` are this
        route's, else None."""
        if method != self.method:
            return None
        pattern = self.segments
        star = next((i for i, s in enumerate(pattern) if s.endswith("*>")), None)
        if star is None:
            if len(parts) != len(pattern):
                return None
            pairs = list(zip(pattern, parts, strict=True))
        else:
            tail = len(pattern) - star - 1
            if len(parts) < len(pattern):
                return None
            middle = "/".join(parts[star : len(parts) - tail])
            pairs = [
                *zip(pattern[:star], parts[:star], strict=True),
                (pattern[star], middle),
                *zip(pattern[star + 1 :], parts[len(parts) - tail :], strict=True),
            ]
        fields: dict[str, str] = {}
        for want, got in pairs:
            named = _FIELD.fullmatch(want)
            if named is not None:
                fields[named.group(1)] = got
            elif want != got:
                return None
        return fields


def owned(method: str, path: str, operation: str, handler: str, name: str = "job") -> Route:
    """A route on one thing the path's field ``name`` names (a job, a session): the call
    log names it, and the faults select on its device, as the side knows it."""
    return Route(method, path, operation, handler, f"<{name}>", OwnerOf(name))


def on_device(method: str, path: str, operation: str, handler: str, name: str) -> Route:
    """A route on the device the path's field ``name`` names: the call log names it, and
    the faults select on it."""
    return Route(method, path, operation, handler, f"<{name}>", f"<{name}>")


def fill(template: str | None, fields: Mapping[str, str]) -> str | None:
    """``template`` with each ``<name>`` replaced by the path's field."""
    if template is None:
        return None
    return _FIELD.sub(lambda m: fields[m.group(1)], template)


@dataclass(frozen=True)
class SideRoute:
    """A request resolved by a side's table: its operation, the handler that answers it,
    what it names (``target``), the device its faults select on, and the path's fields.
    A refused request is logged as ``Unknown``."""

    operation: str
    handler: Callable[..., Any]
    target: str | None = None
    device: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    creates: bool = False


def _unrouted(*args: Any) -> Response:
    raise AssertionError("a refused request has no handler")


UNKNOWN = SideRoute("Unknown", _unrouted)


class RouteTable:
    """A side's routes, matched in order against a request."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = tuple(routes)

    def handlers(self) -> set[str]:
        return {route.handler for route in self.routes}

    def operations(self) -> set[str]:
        return {route.operation for route in self.routes}

    def resolve(self, side: Any, request: Request) -> SideRoute | None:
        """The first route ``request`` matches, bound to ``side``; None when none does."""
        parts = request.segments()
        for route in self.routes:
            fields = route.match(request.method, parts)
            if fields is None:
                continue
            return SideRoute(
                operation=route.operation,
                handler=getattr(side, route.handler),
                target=_resolve(route.target, side, request, fields),
                device=_resolve(route.device, side, request, fields),
                fields=fields,
                creates=route.creates,
            )
        return None


def _resolve(
    what: str | Device | None, side: Any, request: Request, fields: Mapping[str, str]
) -> str | None:
    if what is None or isinstance(what, str):
        return fill(what, fields)
    return what.device(side, request, fields)
