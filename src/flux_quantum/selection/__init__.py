"""Choosing a device: the selection policies with their explanations and the drain
estimate behind the expected waits (``policies``), what kind of program a device can run
(``program_kinds``) and a cheap OpenQASM reader (``qasm``). When a job is released and
when its task is polled again are ``flux_quantum.timing``'s.
"""
