"""IBM Quantum behind the vendor interface, through QRMI (``qrmi``'s IBM compute service).

This package owns every call flux-quantum makes to IBM Quantum, the sampler payload built
from a request's OpenQASM 3 program, the decoding of a sampler result into counts, and the
one mapping of IBM's errors to ``flux_quantum.vendors.errors``. It never changes
``os.environ``, never retries outside its ``RetryBudget``, never writes an API key or a
session id into a message, a log line or a ``to_dict()``, and never imports qiskit.

One module a concern: ``vendor`` (``IbmVendor``: the verbs, idempotency by token, sessions,
merged tasks), ``payload`` (SamplerV2 input of one program or several, IBM's job limits,
counts per pub), ``calibration`` (backend properties as a ``Calibration``), ``errors``
(IBM's codes as vendor errors), ``settings`` (where the settings come from, QRMI's config
per backend) and ``transport`` (the qrmi resource and the REST reads QRMI has no call
for). The names below are the ones other modules use.
"""

from flux_quantum.vendors.ibm.calibration import read_calibration
from flux_quantum.vendors.ibm.errors import classify, translate_error
from flux_quantum.vendors.ibm.payload import (
    MAX_EXECUTIONS,
    MAX_INPUT_BYTES,
    OverLimit,
    counts_from_result,
    mark_program,
    program_token,
    sampler_input,
    sampler_set_input,
    split_result,
)
from flux_quantum.vendors.ibm.settings import (
    IbmSettings,
    emulator_settings,
    resource_config,
    session_environment,
)
from flux_quantum.vendors.ibm.vendor import IbmVendor

__all__ = [
    "MAX_EXECUTIONS",
    "MAX_INPUT_BYTES",
    "IbmSettings",
    "IbmVendor",
    "OverLimit",
    "classify",
    "counts_from_result",
    "emulator_settings",
    "mark_program",
    "program_token",
    "read_calibration",
    "resource_config",
    "sampler_input",
    "sampler_set_input",
    "session_environment",
    "split_result",
    "translate_error",
]
