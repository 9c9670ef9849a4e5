"""Every vendor behind one interface (``base.Vendor``), one package a vendor.

A vendor is a package ``vendors/<name>/`` whose face (``__init__.py``) is its descriptor
(``VENDOR``, a ``flux_quantum.protocol.vendors.VendorDescriptor``: standard library
only, read in Flux's own Python too) and whose modules are named for what they hold:
``vendor`` (its ``CatalogVendor``), ``errors`` (its one error mapping), ``program``
(what it checks of a program), ``settings`` and more where it needs them. Shipped:
``braket`` (Amazon Braket through amazon-braket-sdk and boto3), ``ibm`` (IBM Quantum),
``iqm``, ``pasqal``, ``ibm_quantum_system`` and ``felis`` (through QRMI), ``oqtopus``
(OQTOPUS Cloud through oqtopus-client), ``ionq`` (IonQ through ionq-core) and ``local``
(the flux-quantum emulator). The registry finds them (every package here is a vendor's);
this folder's modules serve them all: ``base`` (the interface, its records, the one
retry loop and the shared constructor), ``errors`` (the project's vendor errors),
``qrmi`` (what every QRMI vendor shares), ``factory`` (``make_vendor``), ``probing``
(``probe_devices``), ``task_state`` and ``task_events`` (a task's states and a vendor's
feed of them) and ``relayed`` (a released job's task read through the service). Nothing
outside this package imports a vendor SDK; nothing here keeps global state. This face
imports nothing: Flux's Python imports the vendor packages' faces through it.
"""
