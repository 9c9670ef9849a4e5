# Loaded by `flux modprobe rc1` at broker start: the flux-quantum qpu handler
# service (described in ../modprobe.d/flux-quantum.toml: rank 0, after the
# job-manager).
def setup(context):
    context.load_modules(["qpu_handlers"])
