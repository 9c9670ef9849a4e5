"""IBM Quantum behind the vendor interface, through QRMI (``qrmi``'s IBM compute service).

This package owns every call flux-quantum makes to IBM Quantum, the sampler payload
built from a request's OpenQASM 3 program, the decoding of a sampler result into counts,
and the one mapping of IBM's errors to ``flux_quantum.vendors.errors``. It never changes
``os.environ``, never retries outside its ``RetryBudget``, never writes an API key or a
session id into a message, a log line or a ``to_dict()``, and never imports qiskit.

One module a concern: ``vendor`` (``IbmVendor``: the verbs, idempotency by token,
sessions, merged tasks), ``payload`` (SamplerV2 input of one program or several, IBM's
job limits, counts per pub), ``calibration`` (backend properties as a ``Calibration``),
``errors`` (IBM's codes as vendor errors), ``settings`` (where the settings come from,
QRMI's config per backend) and ``transport`` (the qrmi resource and the REST reads QRMI
has no call for). ``VENDOR`` is its descriptor: this face imports nothing but the
standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.vendors import VendorDescriptor

VENDOR = VendorDescriptor(
    name="ibm",
    title="IBM Quantum",
    vendor="flux_quantum.vendors.ibm.vendor:IbmVendor",
    errors="flux_quantum.vendors.ibm.errors:translate_error",
    settings=("channel", "instance", "endpoint", "iam_endpoint", "session_mode"),
    credentials=("QISKIT_IBM_TOKEN",),
    # QRMI's per-backend API key, and the sessions a job's own tasks ride.
    credential_suffixes=("_IAM_APIKEY", "QRMI_JOB_ACQUISITION_TOKEN", "_QRMI_IBM_QCS_SESSION_ID"),
    rank=20,
)
