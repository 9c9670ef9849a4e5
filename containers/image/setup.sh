#!/bin/bash
# Runs once at image build time, as root, on top of a fluxrm/flux-sched image
# (or containers/build-base's stand-in).  Adds what a multi-user system
# instance needs and the public images lack, then installs and configures
# flux-quantum for it.  Offline: Python packages come from /tmp/wheels.
set -euxo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CTX=$(dirname "$HERE")
VENV=/opt/flux-quantum
CONF=/etc/flux/system/conf.d
CATALOG=/etc/flux-quantum/backends.yaml
HOSTS="node[0-2]"
CORES="0-1"
EMULATOR_URL=http://emulator:8080

# --- users: the instance owner and three ordinary users ---------------------------
# carol has an account and no flux-accounting association: her jobs are refused.
useradd --system --user-group --home-dir /var/lib/flux --create-home --shell /bin/bash flux
useradd --create-home --uid 1001 --shell /bin/bash alice
useradd --create-home --uid 1002 --shell /bin/bash bob
useradd --create-home --uid 1003 --shell /bin/bash carol
install -d -o flux -g flux -m 0755 /run/flux /var/lib/flux

# --- flux-accounting, built from its release source -----------------------------
# (the public fluxrm/flux-sched images lack it): into flux-core's prefix, so that
# its commands (flux account ...), its Python package and mf_priority.so are where
# flux-core looks for them.
FA_VERSION=$(cat "$CTX/flux-accounting.version")
FLUX_PREFIX=$(dirname "$(dirname "$(command -v flux)")")
mkdir -p /usr/src/flux-accounting
tar -xzf "$CTX/flux-accounting.tar.gz" -C /usr/src/flux-accounting --strip-components=1
(
    cd /usr/src/flux-accounting
    if [ ! -x configure ]; then
        # An archive of the release tag: configure.ac takes the version from git.
        sed -i "s|m4_esyscmd(\[git describe[^]]*\]))|[${FA_VERSION}])|" configure.ac
        grep -q "^ *\[${FA_VERSION}\])" configure.ac
        ./autogen.sh >/dev/null
    fi
    PYTHON=/usr/bin/python3 ./configure --prefix="$FLUX_PREFIX" --sysconfdir=/etc \
        --localstatedir=/var >/dev/null
    make -j2 >/dev/null
    make install >/dev/null
)
rm -rf /usr/src/flux-accounting
ldconfig
flux account --help >/dev/null
MF_PRIORITY=""
for dir in $(flux config builtin jobtap_pluginpath | tr : ' '); do
    [ -f "$dir/mf_priority.so" ] && MF_PRIORITY=$dir/mf_priority.so && break
done
test -n "$MF_PRIORITY"

# Its database (where its commands look by default): a parent bank and two sub-banks
# for alice and bob, bank shared for both (t/multiuser/test_merging.py), ops for the
# owner, limits the suite never reaches (t/multiuser/test_accounting.py lowers
# alice's). Made by flux-accounting's own code, as the owner who runs its service.
FA_DB=/var/lib/flux/FluxAccounting.db
runuser -u flux -- flux python - "$FA_DB" "$(id -u flux)" <<'PY'
import sqlite3, sys
from fluxacct.accounting import bank_subcommands, create_db, user_subcommands
path, owner = sys.argv[1], int(sys.argv[2])
create_db.create_db(path)
conn = sqlite3.connect(path)
for bank, parent in (("root", ""), ("physics", "root"), ("chemistry", "root"),
                     ("shared", "root"), ("ops", "root")):
    bank_subcommands.add_bank(conn, bank=bank, shares=1, parent_bank=parent)
for user, uid, bank in (("alice", 1001, "physics"), ("alice", 1001, "shared"),
                        ("bob", 1002, "chemistry"), ("bob", 1002, "shared"),
                        ("flux", owner, "ops")):
    user_subcommands.add_user(conn, username=user, bank=bank, uid=uid,
                              max_running_jobs=100, max_active_jobs=1000)
conn.commit()
PY

# --- flux-quantum in a venv of the image's python3 ------------------------------
python3 -m venv "$VENV"
mkdir -p /tmp/flux-quantum-src
tar -C /tmp/flux-quantum-src -xf "$CTX/flux-quantum-src.tar"
# The README is left out of the context (editing it must not rebuild the image);
# pip needs the file the project's metadata names.
[ -f /tmp/flux-quantum-src/README.md ] ||
    echo "flux-quantum: see the project's README.md" >/tmp/flux-quantum-src/README.md
# The project is built here, not on the host: its jobtap and job-shell plugins
# compile against this image's flux-core and python.
"$VENV/bin/pip" install --no-index --find-links "$CTX/wheels" /tmp/flux-quantum-src pytest
rm -rf /tmp/flux-quantum-src
ln -s "$VENV/bin/flux-quantum" /usr/local/bin/flux-quantum
FQ="$VENV/bin/flux-quantum"
PLUGIN=$("$FQ" plugin-path)

# --- flux-security: setuid IMP, munge signing -----------------------------------
IMP=$(find /usr/libexec /usr/local/libexec -name flux-imp -type f 2>/dev/null | head -1 || true)
SHELL_PATH=$(flux config builtin shell_path)
test -x "$IMP"
chmod 4755 "$IMP"
mkdir -p /etc/flux/imp/conf.d /etc/flux/security/conf.d
cat >/etc/flux/imp/conf.d/imp.toml <<TOML
[exec]
allowed-users = ["flux"]
allowed-shells = ["$SHELL_PATH"]
TOML
cat >/etc/flux/security/conf.d/sign.toml <<'TOML'
[sign]
max-ttl = 1209600
default-type = "munge"
allowed-types = ["munge"]
TOML

# --- the catalog: the packaged example, its local devices on the emulator ------
mkdir -p /etc/flux-quantum
"$VENV/bin/python" - "$CATALOG" "$EMULATOR_URL" <<'PY'
import sys
from importlib import resources
import yaml
path, url = sys.argv[1:]
text = (resources.files("flux_quantum") / "data" / "backends.yaml").read_text()
doc = yaml.safe_load(text)
doc.setdefault("vendors", {}).setdefault("local", {})
doc["vendors"]["local"] = dict(doc["vendors"]["local"] or {}, url=url)
# Four tasks at once on local-garnet (t/multiuser/test_merging.py: a merged task and
# two tasks of their own in flight together).
for device in doc["devices"]:
    if device["name"] == "local-garnet":
        device["slots"] = 4
# The on-premises Pasqal QPU behind its warden (the emulator container's), reached
# through QRMI's PasqalLocal: every call but the status carries a munge credential
# (t/multiuser/test_qrmi_onprem.py).
doc["vendors"]["pasqal"] = dict(
    doc["vendors"].get("pasqal") or {}, warden_url=url + "/pasqal-local/FRESNEL_ONPREM"
)
with open(path, "w") as out:
    out.write("# flux-quantum catalog of this cluster: the packaged example, with the\n"
              "# local vendor pointed at the emulator container.\n")
    yaml.safe_dump(doc, out, sort_keys=False)
PY

# --- the system instance's configuration ---------------------------------------
mkdir -p "$CONF"
flux keygen /etc/flux/system/curve.cert
chown flux:flux /etc/flux/system/curve.cert
chmod 0400 /etc/flux/system/curve.cert
cat >"$CONF/bootstrap.toml" <<TOML
# One broker per container; each container's hostname is its entry here.
[bootstrap]
curve_cert = "/etc/flux/system/curve.cert"
default_port = 8050
default_bind = "tcp://eth0:%p"
default_connect = "tcp://%h:%p"
hosts = [ { host = "$HOSTS" } ]
TOML
cat >"$CONF/access.toml" <<'TOML'
[access]
allow-guest-user = true
allow-root-owner = true
TOML
cat >"$CONF/exec.toml" <<TOML
[exec]
imp = "$IMP"
TOML
# A crashed rank 0 (SIGKILL, power loss) restarts from the KVS's last checkpoint:
# without a period that is the last orderly shutdown, and every job since is lost.
cat >"$CONF/kvs.toml" <<'TOML'
[kvs]
checkpoint-period = "30s"
TOML
# Fluxion's graph: the nodes plus the catalog's QPU vertices, static so they
# survive a Fluxion reload (README "QPUs in the Fluxion graph").
flux R encode --hosts="$HOSTS" --cores="$CORES" >/etc/flux/system/R.json
"$FQ" graph jgf "$CATALOG" --R /etc/flux/system/R.json -O /etc/flux/system/graph.json
cat >"$CONF/resource.toml" <<'TOML'
[resource]
noverify = true
# Rank 0 (node0) is the management node: jobs run on node1 and node2.
exclude = "0"
path = "/etc/flux/system/R.json"
scheduling = "/etc/flux/system/graph.json"

[sched-fluxion-qmanager]
queue-policy = "easy"
TOML
# The jobtap plugins (flux-accounting's mf_priority.so first, the order that spares
# priority events), the ingest validator and Fluxion's rv1 match format.
"$FQ" config >"$CONF/quantum.toml"
sed -i "s|^plugins = \[ |plugins = [ { load = \"$MF_PRIORITY\" }, |" "$CONF/quantum.toml"
grep -q "mf_priority.so\" }, { load = \"$PLUGIN\"" "$CONF/quantum.toml"
cat >>"$CONF/quantum.toml" <<TOML

[quantum]
backends = "$CATALOG"

# Guests' jobs on these vendors/devices are the system service's, paid by the
# site's credentials (~flux/.aws/credentials); others need qpu.account=user.
[quantum.accounts]
site = ["local", "pasqal:pasqal-fresnel-onprem"]

# Merged tasks on one QPU only; users share a task only within bank "shared"
# (t/multiuser/test_merging.py).
[quantum.merge]
devices = ["local-garnet"]
across_users = ["shared"]
max_wait = "20s"

# flux-accounting's banks are the site's (the service reads its database, read-only),
# and settled QPU spend counts in its fair-share: \$1 is a node-hour of usage, fed by
# the update cycle (/etc/flux/system/cron.d/accounting).
[quantum.accounting]
db = "$FA_DB"
qpu_weight = 3600.0
TOML

# flux-accounting's update cycle, with the QPU spend fed in its place, from flux cron
# (node-start gives the broker this cron.directory, as flux.service does): every
# five minutes here, where a site runs it hourly.
mkdir -p /etc/flux/system/cron.d
cat >/etc/flux/system/cron.d/accounting <<'CRON'
*/5 * * * * flux quantum accounting update
CRON

# --- the site's vendor credentials: the instance owner's, 0600 -----------------
# Marker values: the multi-user suite proves they appear nowhere else.
install -d -o flux -g flux -m 0700 /var/lib/flux/.aws
cat >/var/lib/flux/.aws/credentials <<'INI'
[default]
aws_access_key_id = AKIAFLUXQSITEMARKER
aws_secret_access_key = FLUXQ-MARKER-site-secret-42e1
INI
chown flux:flux /var/lib/flux/.aws/credentials
chmod 0600 /var/lib/flux/.aws/credentials

# --- the job-shell plugin, for every job of every instance on the node ---------
INITRC=$(flux config builtin shell_initrc)
mkdir -p "$(dirname "$INITRC")/lua.d"
"$VENV/bin/python" -c 'from flux_quantum.job.consumer import shell_initrc_line, shell_plugin_path
print(shell_initrc_line(shell_plugin_path()))' >"$(dirname "$INITRC")/lua.d/flux-quantum.lua"

# --- the handler service, loaded at boot on rank 0 -----------------------------
MODULE=$("$FQ" service module-path)
mkdir -p /etc/flux/modprobe/modprobe.d /etc/flux/modprobe/rc1.d
cat >/etc/flux/modprobe/modprobe.d/flux-quantum.toml <<TOML
# The qpu handler service of the system instance (flux quantum service).
[[modules]]
name = "qpu_handlers"
module = "$MODULE"
ranks = "0"
after = ["job-manager"]
requires = ["job-manager"]
# /etc/flux/modprobe is read by every instance on the node, a user's own
# flux start or flux alloc included: only the system instance (the one with
# this cluster's [bootstrap] certificate) runs the site's service.
needs-config = ["bootstrap.curve_cert"]
args = ["python=$VENV/bin/python", "catalog=$CATALOG", "emulator_url=$EMULATOR_URL"]
TOML
install -m 0644 "$HERE/flux-quantum-rc1.py" /etc/flux/modprobe/rc1.d/flux-quantum.py

# --- entry point and the files it uses ---------------------------------------------
install -d /usr/local/share/flux-quantum-image
install -m 0755 "$HERE/node-start" /usr/local/share/flux-quantum-image/node-start
install -m 0644 "$HERE/relay.py" /usr/local/share/flux-quantum-image/relay.py
# Every login shell (runuser -l, docker exec bash -l) finds the system instance.
echo 'export FLUX_URI=local:///run/flux/local' >/etc/profile.d/flux-uri.sh

# What was configured, for the build log.
cat "$CONF"/*.toml /etc/flux/modprobe/modprobe.d/flux-quantum.toml /etc/flux/system/cron.d/*
echo "plugin: $PLUGIN"
echo "flux-accounting $FA_VERSION: $MF_PRIORITY, $FA_DB"
