"""The compile stage: a program mapped onto the device the policy chose, in the form its
vendor takes.

One module a concern: ``target`` (``DeviceTarget``: a device's qubits, basis gates,
coupling map and published errors, plain data a vendor builds), ``screen`` (the
refusals that need no parser: NUL bytes, includes, width; Braket's gate names brought to
the standard library), ``load`` (OpenQASM 2 and 3 read by Qiskit's parsers), ``mapping``
(the Qiskit target, cached per device and calibration, and the transpile), ``estimate``
(the compiled circuit's expected success on the device's errors), ``program`` (the
steps in order, in a worker), ``compiled`` (``Compiled``, what came out), ``worker`` and
``pool`` (worker processes under a memory and a time limit), ``limits``
(``[quantum.compile]``) and ``errors``. This face imports no Qiskit: only a worker does.
"""

from __future__ import annotations

from flux_quantum.compiler.compiled import Compiled
from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.limits import CompileLimits
from flux_quantum.compiler.pool import CompilePool
from flux_quantum.compiler.target import DeviceTarget

__all__ = ["CompileError", "CompileLimits", "CompilePool", "Compiled", "DeviceTarget"]
