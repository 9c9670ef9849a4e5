"""Hypothesis strategies for what a user or a handler can send the plugin: any JSON,
``attributes.system`` tables whose ``qpu`` is near the grammar (valid values, their
near misses, and noise), and the payloads of the plugin's services. They never call a
parser; the tests do."""

from __future__ import annotations

from hypothesis import strategies as st

from flux_quantum.protocol.request import (
    ACCOUNTS,
    DEVICE_CLASSES,
    FAILOVERS,
    MERGE_CHOICES,
    POLICIES,
    RESERVATION_ENDS,
    SESSIONS,
    TABLE_KEYS,
)
from flux_quantum.protocol.vendors import vendor_names

VENDORS = vendor_names()
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

json_scalars = (
    st.none()
    | st.booleans()
    | INT64
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)

# Text Flux can carry: jansson refuses a lone surrogate anywhere and a NUL in a key.
flux_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
keys = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=10,
)

json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)

names = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,70}", fullmatch=True)
near_names = (
    names
    | st.sampled_from(["", "Sv1", "sv 1", "-x", "a" * 64, "a" * 65, "é"])
    | st.text(max_size=12)
)
targets = st.one_of(
    st.sampled_from(["any", "sv1", "braket:sv1", "braket:any", "ibm:any", ":", "x:y", "a:b:c", ""]),
    st.builds(lambda v, d: f"{v}:{d}", st.sampled_from([*VENDORS, "aws", ""]), near_names),
    near_names,
    st.text(min_size=200, max_size=300),
)


def _choice(choices: tuple[str, ...]) -> st.SearchStrategy[object]:
    return st.sampled_from(choices) | st.sampled_from([c.upper() for c in choices]) | json_scalars


numbers = (
    INT64
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, -1, 100_000, 100_001, 0.5, 1.0, 1e300])
)
durations = numbers | st.sampled_from(
    ["90", "90s", "30m", "2h", "1.5d", "0", "-1s", "1x", "", ".5h", "5ms"]
)
paths = st.text(max_size=12) | st.just("[a.qasm]") | st.lists(st.text(max_size=8), max_size=3)

TABLE_VALUES: dict[str, st.SearchStrategy[object]] = {
    "device": targets | json_scalars,
    "vendor": _choice(VENDORS),
    "policy": _choice(POLICIES),
    "shots": numbers,
    "program": paths,
    "release_at": numbers | st.sampled_from(["running", "predict", "done", "now"]),
    "max_wait": durations,
    "max_cost": numbers,
    "min_qubits": numbers,
    "min_fidelity": numbers,
    "class": _choice(DEVICE_CLASSES),
    "failover": _choice(FAILOVERS),
    "group": near_names,
    "session": _choice(SESSIONS),
    "account": _choice(ACCOUNTS),
    "loop": near_names,
    "reservation": near_names | st.just("none"),
    "reservation_end": _choice(RESERVATION_ENDS),
    "merge": _choice(MERGE_CHOICES),
}

tables = st.fixed_dictionaries({}, optional=TABLE_VALUES) | st.dictionaries(
    st.sampled_from([*TABLE_KEYS, "shot", "qpu", ""]) | st.text(max_size=8), json_values, max_size=4
)
qpu_values = targets | tables | json_values

RESERVED = ["qpu_task", "qpu_device", "qpu_info", "qpu_shots", "qpu_", "qpuX"]
systems = st.fixed_dictionaries(
    {},
    optional={
        "qpu": qpu_values,
        "duration": numbers,
        "environment": st.dictionaries(keys, st.text(max_size=8), max_size=3),
        **{key: json_values for key in RESERVED},
    },
)

job_ids = INT64 | json_scalars
id_lists = st.lists(job_ids, max_size=5) | json_values


def _payload(required: dict, optional: dict) -> st.SearchStrategy[object]:
    return st.fixed_dictionaries(required, optional=optional) | json_values


event_names = st.sampled_from(
    ["qpu-submitted", "qpu-", "qpu-A", "qpu-x_y", "qpu-" + "a" * 60, "qpu-a\u0000b"]
) | st.text(max_size=12)
event_items = _payload({}, {"id": job_ids, "name": event_names, "context": json_values})
payloads: dict[str, st.SearchStrategy[object]] = {
    "list": _payload({}, {"generation": job_ids}),
    "release": _payload(
        {},
        {
            "id": job_ids,
            "ids": id_lists,
            "task": st.text(max_size=10) | json_scalars,
            "device": st.text(max_size=10) | json_scalars,
            "info": json_values,
            "resources": json_values,
        },
    ),
    "fail": _payload(
        {}, {"id": job_ids, "ids": id_lists, "note": st.text(max_size=20) | json_scalars}
    ),
    "event": event_items,
    "events": _payload({}, {"events": st.lists(event_items, max_size=4) | json_values}),
    "records": _payload({}, {"ids": id_lists}),
}
