"""An on-premises IBM Quantum System through QRMI (``IBMQuantumSystem``).

This package owns what is the IBM Quantum System's own: ``vendor``
(``IbmQuantumSystemVendor``: its settings, the SamplerV2 payload of IBM's vendor, a
failed job's reason, what a cancel leaves, a job's QPU time). Its errors are QRMI's
(``flux_quantum.vendors.qrmi.translate``). ``VENDOR`` is its descriptor: this face
imports nothing but the standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.vendors import MAPPED, Compiling, VendorDescriptor

VENDOR = VendorDescriptor(
    name="ibm-quantum-system",
    title="IBM Quantum System",
    vendor="flux_quantum.vendors.ibm_quantum_system.vendor:IbmQuantumSystemVendor",
    errors="flux_quantum.vendors.qrmi:translate",
    settings=("endpoint", "iam_endpoint", "s3_endpoint", "s3_bucket", "s3_region", "job_timeout"),
    credential_suffixes=("_IAM_APIKEY",),
    rank=50,
    # Its backends run ISA circuits only, as IBM's cloud's (error 1517).
    compiling=Compiling(MAPPED),
)
