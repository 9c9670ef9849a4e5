"""Helpers of the fuzz tests (t/test_fuzz_*.py): the jobtap plugin's C parsers loaded
through ctypes, and hypothesis strategies for ``attributes.system`` and the plugin's
request payloads. They own no state and never start Flux."""
