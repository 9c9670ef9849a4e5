"""Fuzzing the two parsers of a ``qpu`` request, and that they agree.

``flux_quantum.protocol.request`` (the one full parser, run by the ingest validator) and
the jobtap plugin's own check (jobtap/qpu_request.c, run in job.validate) see every
submission. Generated ``attributes.system`` tables, near the grammar and far from it,
must never make the Python parser raise anything but a one-sentence RequestError, and an
accepted request must round-trip through its canonical form. The C check is the part of
the grammar the plugin relies on (the release keys absent; ``qpu`` a string of 1 to 256
bytes or a table), loaded through ctypes from the very sources quantum.so is built
from. They agree on every input: the plugin never refuses what the validator accepts,
and what the plugin refuses the validator refuses too, for the same field; so an
instance that runs both (every instance ``flux quantum config`` sets up) accepts exactly
what the Python parser accepts. The payloads the Python client (``PluginClient``) sends
the plugin's services are accepted by the plugin's C payload parsers.

FLUXQ_FUZZ_EXAMPLES sets the examples per property (CI: the default, a few seconds
each; bench/fuzz.py runs many more).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

hypothesis = pytest.importorskip(
    "hypothesis", reason="hypothesis fuzz tests SKIPPED: pip install '.[test]' brings hypothesis"
)
from fuzzing import fixtures  # noqa: E402
from fuzzing import strategies as gen  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flux_quantum.instance.plugin import PluginClient  # noqa: E402
from flux_quantum.protocol import events  # noqa: E402
from flux_quantum.protocol.request import (  # noqa: E402
    QpuRequest,
    RequestError,
    check_jobspec_attributes,
    parse_request,
)

# The session's C parsers (fixtures), built once.
fuzz_build = fixtures.fuzz_build
c_parsers = fixtures.c_parsers

FAST = settings(
    max_examples=fixtures.examples(1500),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The release keys the C check refuses (qpu_protocol.h); Python refuses every qpu_* key.
C_RELEASE_KEYS = ("qpu_task", "qpu_device", "qpu_info")


def python_verdict(system: dict[str, Any]) -> RequestError | QpuRequest | None:
    try:
        return check_jobspec_attributes(system)
    except RequestError as exc:
        return exc


def one_sentence(message: str) -> bool:
    return bool(message) and "\n" not in message and len(message) <= 400


@FAST
@given(gen.qpu_values)
def test_parse_request_refuses_with_one_sentence_or_round_trips(value: object) -> None:
    try:
        request = parse_request(value)
    except RequestError as exc:
        assert one_sentence(str(exc)), str(exc)
        assert exc.field.startswith("qpu"), exc.field
        return
    assert parse_request(request.to_attr()) == request
    assert one_sentence(request.describe())


@FAST
@given(gen.systems)
def test_check_jobspec_attributes_refuses_with_one_sentence(system: dict[str, Any]) -> None:
    verdict = python_verdict(system)
    if isinstance(verdict, RequestError):
        assert one_sentence(str(verdict)), str(verdict)
    elif verdict is None:
        assert "qpu" not in system
    else:
        assert verdict == parse_request(system["qpu"])


@FAST
@given(gen.systems)
def test_the_plugin_and_the_validator_agree_on_every_system(
    c_parsers, system: dict[str, Any]
) -> None:
    c = c_parsers.parse("request", system)
    if c is None:  # not JSON jansson reads (an int out of int64): no jobspec holds it
        return
    python = python_verdict(system)
    if not isinstance(python, RequestError):
        assert c.accepted, f"the plugin refuses what the validator accepts: {c.reason}"
        return
    # Together (both run in every configured instance): exactly the Python verdict.
    if c.accepted:
        return
    assert one_sentence(c.reason), c.reason
    # What the plugin refuses, the validator refuses for the same field, even alone:
    # the plugin's verdict depends on the release keys and qpu only.
    part = {key: system[key] for key in ("qpu", *C_RELEASE_KEYS) if key in system}
    assert c_parsers.parse("request", part) == c
    alone = python_verdict(part)
    assert isinstance(alone, RequestError), (part, c.reason)
    if any(key in part for key in C_RELEASE_KEYS):
        assert alone.field in C_RELEASE_KEYS, (alone.field, c.reason)
        assert "set by flux-quantum at release" in c.reason
    else:
        assert alone.field == "qpu", (alone.field, c.reason)
        assert c.reason.startswith("qpu must be"), c.reason


@FAST
@given(
    st.sampled_from(sorted(gen.payloads)).flatmap(
        lambda name: st.tuples(st.just(name), gen.payloads[name])
    )
)
def test_every_payload_gets_an_answer_in_one_sentence(c_parsers, item: tuple[str, Any]) -> None:
    target, payload = item
    verdict = c_parsers.parse(target, payload)
    if verdict is not None and not verdict.accepted:
        assert one_sentence(verdict.reason), verdict.reason


class RecordingHandle:
    """A Flux handle that records the payloads PluginClient sends through ``rpc`` (list,
    release, fail) and answers like a plugin that accepted them; the client's own code
    runs unchanged. (``events`` and ``records`` go out pipelined through libflux: the
    flux tier's memcheck test drives those against the real plugin.)"""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def rpc(self, topic: str, payload: dict[str, Any]) -> RecordingHandle:
        self.sent.append((topic.rsplit(".", 1)[1], json.loads(json.dumps(payload))))
        self.answer = {
            "release": {"released": [1]},
            "fail": {"failed": [1]},
            "events": {"errors": [None] * len(payload.get("events", []))},
            "records": {"jobs": []},
            "list": {"jobs": [], "generation": 1},
        }.get(topic.rsplit(".", 1)[1], {})
        return self

    def get(self) -> dict[str, Any]:
        return self.answer


job_ids = st.integers(min_value=1, max_value=2**63 - 1)
texts = gen.flux_text


@FAST
@given(
    ids=job_ids | st.lists(job_ids, min_size=1, max_size=5),
    task=st.none() | texts,
    device=st.none() | texts,
    # No NUL in a key, no lone surrogate: Flux's decoder (jansson) refuses the whole
    # message (EPROTO) before the plugin sees it; test_text_flux_cannot_carry_...
    info=st.none() | st.dictionaries(gen.keys, gen.json_values, max_size=3),
    note=texts,
    generation=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
)
def test_the_plugin_accepts_every_payload_the_python_client_sends(
    c_parsers, ids, task, device, info, note, generation
) -> None:
    handle = RecordingHandle()
    client = PluginClient(handle)
    client.release(ids, task=task, device=device, info=info)
    client.fail(ids, note)
    client.list_since(generation)
    assert [t for t, _ in handle.sent] == ["release", "fail", "list"]
    for target, payload in handle.sent:
        verdict = c_parsers.parse(target, payload)
        assert verdict is not None and verdict.accepted, (target, payload, verdict)


def test_every_event_name_the_handlers_post_is_one_the_plugin_accepts(c_parsers) -> None:
    names = [
        v
        for k, v in vars(events).items()
        if k.isupper() and isinstance(v, str) and v.startswith("qpu-")
    ]
    assert len(names) >= 15
    for name in names:
        assert c_parsers.parse("event", {"id": 1, "name": name}).accepted, name


def test_text_flux_cannot_carry_is_refused_before_the_plugin(c_parsers) -> None:
    """Found by the client test: an ``info`` key holding NUL, or a lone surrogate in any
    string, cannot travel; jansson refuses the text, so Flux answers EPROTO and the
    plugin never runs (the handler's release fails with that error, nothing crashes)."""
    assert c_parsers.parse("release", {"id": 1, "info": {"\x00": None}}) is None
    assert c_parsers.parse("release", {"id": 1, "task": "\ud800"}) is None
    assert c_parsers.parse("release", {"id": 1, "info": {"a": "\x00"}}).accepted
