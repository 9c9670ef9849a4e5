"""The ``flux quantum`` command (console script ``flux-quantum``)."""
