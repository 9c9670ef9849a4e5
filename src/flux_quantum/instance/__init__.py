"""The Flux instance as flux-quantum sees it: the quantum jobtap plugin's client
(``plugin``), pipelined RPCs (``rpc``) and the Fluxion resource graph (``graph``).
"""
