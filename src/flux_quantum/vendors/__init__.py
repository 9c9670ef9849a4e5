"""Vendor modules behind one interface (``flux_quantum.vendors.base.Vendor``).

One module per vendor: ``braket`` (Amazon Braket through amazon-braket-sdk and boto3),
``local`` (the flux-quantum emulator, same wire protocol, no credentials) and ``ibm``
(not supported yet). Nothing outside this package imports a vendor SDK.
"""
