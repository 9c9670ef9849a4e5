"""Unit tier: the service's kept session ids on disk (``SessionKeys``): owner-only,
whole or absent, found by a successor, forgotten once closed, and a stray or damaged
file skipped with one line."""

from __future__ import annotations

import os
import stat

from flux_quantum.service.sessionkeys import SessionKeys, directory_for
from flux_quantum.vendors.base import VendorSession

SESSION = VendorSession("ibm", "fez", "dedicated", "secret-session-1")


def test_a_kept_session_is_found_by_a_successor_and_dropped_once_closed(tmp_path):
    keys = SessionKeys(tmp_path / "sessions")
    keys.keep(SESSION)
    assert keys.left() == {}  # opened here: not a predecessor's
    successor = SessionKeys(tmp_path / "sessions")
    [(fingerprint, found)] = successor.left().items()
    assert fingerprint == SESSION.fingerprint
    assert (found.vendor, found.device, found.mode, found.session_id) == (
        "ibm",
        "fez",
        "dedicated",
        "secret-session-1",
    )
    assert successor.get(SESSION.fingerprint) == found
    successor.drop(SESSION.fingerprint)
    assert SessionKeys(tmp_path / "sessions").kept() == {}


def test_the_directory_and_files_are_the_owners_only(tmp_path):
    directory = tmp_path / "state" / "sessions"
    SessionKeys(directory).keep(SESSION)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    [path] = directory.iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.name == f"{SESSION.fingerprint}.json"


def test_a_damaged_or_misnamed_file_is_skipped_and_said_once(tmp_path):
    said: list[str] = []
    directory = tmp_path / "sessions"
    SessionKeys(directory).keep(SESSION)
    (directory / "0123456789ab.json").write_text("{not json")
    other = VendorSession("ibm", "fez", "batch", "secret-session-2")
    (directory / "ba9876543210.json").write_text(
        '{"vendor": "ibm", "device": "fez", "mode": "batch", "session_id": "secret-session-2"}'
    )
    (directory / "notes.txt").write_text("ignored")
    keys = SessionKeys(directory, log=said.append)
    assert list(keys.kept()) == [SESSION.fingerprint]
    keys.kept()
    assert len(said) == 2, said  # each said once, never the id itself
    assert not any("secret-session" in line for line in said)
    assert other.fingerprint != "ba9876543210"


def test_an_unwritable_directory_raises_for_the_caller_to_close_the_session(tmp_path):
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("")
        directory = blocker / "sessions"  # under a regular file: fails even for root
    else:
        tmp_path.chmod(0o500)
        directory = tmp_path / "sessions"
    keys = SessionKeys(directory)
    try:
        keys.keep(SESSION)
    except OSError:
        pass
    else:
        raise AssertionError("keep() wrote where it cannot")


def test_where_the_keys_live():
    assert str(directory_for(owner=True, statedir="/var/lib/flux", rundir="/run/x", uri="u")) == (
        "/var/lib/flux/flux-quantum/sessions"
    )
    assert str(directory_for(owner=True, statedir=None, rundir="/tmp/f", uri="u")) == (
        "/tmp/f/flux-quantum/sessions"
    )
    guest = directory_for(
        owner=False,
        statedir="/var/lib/flux",
        rundir="/run/flux",
        uri="local:///run/flux/local",
        env={"XDG_STATE_HOME": "/home/alice/.st"},
    )
    assert guest is not None and str(guest.parent) == "/home/alice/.st/flux-quantum/sessions"
    other = directory_for(
        owner=False,
        statedir=None,
        rundir=None,
        uri="local:///tmp/x/local",
        env={"XDG_STATE_HOME": "/home/alice/.st"},
    )
    assert other != guest  # another instance: another directory
    assert directory_for(owner=False, statedir=None, rundir=None, uri="u", env={}) is None
