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
has no call for). ``VENDOR`` is its descriptor, with IBM's limits on a Sampler job of
several pubs (``SAMPLER_JOBS``): this face imports nothing but the standard library and
``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.merged_tasks import PUBS, Limits
from flux_quantum.protocol.vendors import MAPPED, Compiling, VendorDescriptor

# IBM's job limits (its job validation, per job, not per pub): a Sampler job's
# executions (circuits x shots: without parameters, the pubs' shots summed) and its
# input's size; IBM sets none on the number of pubs.
MAX_EXECUTIONS = 10_000_000
MAX_INPUT_BYTES = 64 * 1024 * 1024
# Bytes a Sampler input adds to each program's JSON text: the token line
# ``// flux-quantum-token: TOKEN`` (token <= 128) with its escaped newline, a final
# newline, and the pub around it (``[..., null, SHOTS]`` and a comma); and to the whole
# input (``{"pubs": [...], "version": 2, "support_qiskit": false}``). Both rounded up.
PUB_OVERHEAD = 192
INPUT_OVERHEAD = 64


def sampler_jobs(
    *, max_executions: int = MAX_EXECUTIONS, max_bytes: int = MAX_INPUT_BYTES
) -> Limits:
    """What one Sampler job of several pubs (one a program, its own shots) may hold."""
    return Limits(
        layout=PUBS,
        max_executions=max_executions,
        max_bytes=max_bytes,
        program_overhead=PUB_OVERHEAD,
        base_overhead=INPUT_OVERHEAD,
    )


SAMPLER_JOBS = sampler_jobs()

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
    merged_tasks=SAMPLER_JOBS,
    # IBM runs ISA circuits only (error 1517): mapped onto the backend, as OpenQASM 3.
    compiling=Compiling(MAPPED),
)
