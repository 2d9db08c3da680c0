"""The etcd store against a real etcd with authentication (and over https with client certs).

An unauthenticated or wrongly authenticated store is refused with a StoreAuthError that says
what to configure; an authenticated one puts, reads and watches. The password comes from the
environment or a file, never from the URL (issue 12, finding 6).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from crosszone.store.etcd_store import EtcdStore
from crosszone.store.store import StoreAuthError, StoreUnavailable, open_store
from etcd_fixture import EtcdServer, etcd_auth, etcd_tls  # noqa: F401  (fixtures)


def _hostport(url: str) -> str:
    return url.split("://", 1)[1]


def _round_trip(store: EtcdStore) -> None:
    """put, get, and a watch that sees a later put."""
    store.root = f"/auth{time.monotonic_ns()}/"
    r0 = store.put("intent/a", b"1")
    assert store.get("intent/a") == b"1"
    assert store.get_prefix("intent/")[1] >= r0
    later = threading.Timer(0.1, lambda: store.put("intent/a", b"2"))
    later.start()
    got = store.watch("intent/", r0, 5)
    later.join(5)  # the event may arrive before the put's own reply
    assert [(e.key, e.value) for e in got] == [("intent/a", b"2")]


def test_unauthenticated_store_is_refused_clearly(etcd_auth: EtcdServer) -> None:  # noqa: F811
    s = EtcdStore(etcd_auth.url)
    try:
        for call in (lambda: s.get_prefix("intent/"), lambda: s.put("intent/a", b"x"),
                     lambda: s.watch("intent/", 0, 1)):
            with pytest.raises(StoreAuthError, match=r"requires authentication.*USER@"):
                call()
    finally:
        s.close()


def test_wrong_password_is_refused(etcd_auth: EtcdServer) -> None:  # noqa: F811
    s = open_store(f"etcd://root@{_hostport(etcd_auth.url)}",
                   env={"CROSSZONE_ETCD_PASSWORD": "not-it"})
    try:
        with pytest.raises(StoreAuthError, match="refused user 'root'"):
            s.get_prefix("intent/")
    finally:
        s.close()


def test_authenticated_store_puts_reads_and_watches(etcd_auth: EtcdServer) -> None:  # noqa: F811
    assert etcd_auth.password is not None
    s = open_store(f"etcd://root@{_hostport(etcd_auth.url)}",
                   env={"CROSSZONE_ETCD_PASSWORD": etcd_auth.password})
    assert isinstance(s, EtcdStore)
    try:
        _round_trip(s)
        # a token etcd no longer knows (expired, or etcd restarted): renewed, request retried
        s._token = "stale.1"
        assert s.get("intent/a") == b"2"
        assert s._token != "stale.1"
    finally:
        s.close()


def test_password_from_a_file(etcd_auth: EtcdServer, tmp_path: Path) -> None:  # noqa: F811
    f = tmp_path / "pw"
    f.write_text(f"{etcd_auth.password}\n")
    f.chmod(0o600)
    s = open_store(f"etcd://root@{_hostport(etcd_auth.url)}",
                   env={"CROSSZONE_ETCD_PASSWORD_FILE": str(f)})
    try:
        s.put("intent/f", b"1")
    finally:
        s.close()


@pytest.mark.parametrize("url,env,match", [
    ("etcd://root:secret@127.0.0.1:2379", {}, "password in the store URL"),
    ("etcd://root@127.0.0.1:2379", {}, "needs a password"),
    ("etcd://127.0.0.1:2379", {"CROSSZONE_ETCD_CA": "/x.pem"}, "use etcds://"),
    ("etcds://127.0.0.1:2379", {"CROSSZONE_ETCD_CERT": "/c.pem"}, "needs both"),
])
def test_bad_etcd_configuration_is_a_clear_error(url: str, env: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        open_store(url, env=env)


def test_https_with_client_certificate_and_password(etcd_tls: EtcdServer) -> None:  # noqa: F811
    assert etcd_tls.password is not None
    env = {"CROSSZONE_ETCD_PASSWORD": etcd_tls.password, "CROSSZONE_ETCD_CA": str(etcd_tls.ca),
           "CROSSZONE_ETCD_CERT": str(etcd_tls.cert), "CROSSZONE_ETCD_KEY": str(etcd_tls.key)}
    url = f"etcds://root@{_hostport(etcd_tls.url)}"
    s = open_store(url, env=env)
    assert isinstance(s, EtcdStore)
    try:
        _round_trip(s)
    finally:
        s.close()
    # no client certificate: the TLS handshake fails; no CA: the server is not trusted
    for drop in (("CROSSZONE_ETCD_CERT", "CROSSZONE_ETCD_KEY"), ("CROSSZONE_ETCD_CA",)):
        s = open_store(url, env={k: v for k, v in env.items() if k not in drop})
        try:
            with pytest.raises(StoreUnavailable):
                s.get_prefix("intent/")
        finally:
            s.close()


def test_bad_etcd_files_and_passwords_name_their_variable(tmp_path: Path) -> None:
    """Issue 26, point 9: an empty password was accepted; a missing password or CA file
    raised FileNotFoundError (and a file that is no PEM an ssl.SSLError) from deep inside
    the store, instead of the ValueError naming the variable."""
    empty, junk = tmp_path / "empty", tmp_path / "junk.pem"
    empty.write_text("\n")
    junk.write_text("not a certificate\n")
    missing = str(tmp_path / "missing.pem")
    user = "etcd://root@127.0.0.1:2379"
    tls = "etcds://root@127.0.0.1:2379"
    pw = {"CROSSZONE_ETCD_PASSWORD": "pw"}
    for url, env, match in [
        (user, {"CROSSZONE_ETCD_PASSWORD": ""}, "CROSSZONE_ETCD_PASSWORD is empty"),
        (user, {"CROSSZONE_ETCD_PASSWORD_FILE": missing},
         "CROSSZONE_ETCD_PASSWORD_FILE .*missing.pem: No such file"),
        (user, {"CROSSZONE_ETCD_PASSWORD_FILE": str(empty)},
         "CROSSZONE_ETCD_PASSWORD_FILE .*empty is empty"),
        (user, {"CROSSZONE_ETCD_PASSWORD_FILE": str(tmp_path)},
         "CROSSZONE_ETCD_PASSWORD_FILE .*: Is a directory"),
        (tls, {**pw, "CROSSZONE_ETCD_CA": missing}, "CROSSZONE_ETCD_CA .*missing.pem: No such"),
        (tls, {**pw, "CROSSZONE_ETCD_CA": str(junk)}, "CROSSZONE_ETCD_CA .*not a PEM CA"),
        (tls, {**pw, "CROSSZONE_ETCD_CERT": missing, "CROSSZONE_ETCD_KEY": str(junk)},
         "CROSSZONE_ETCD_CERT .*missing.pem: No such"),
        (tls, {**pw, "CROSSZONE_ETCD_CERT": str(junk), "CROSSZONE_ETCD_KEY": missing},
         "CROSSZONE_ETCD_KEY .*missing.pem: No such"),
        (tls, {**pw, "CROSSZONE_ETCD_CERT": str(junk), "CROSSZONE_ETCD_KEY": str(junk)},
         "CROSSZONE_ETCD_CERT .* and CROSSZONE_ETCD_KEY .*: not a PEM certificate"),
    ]:
        with pytest.raises(ValueError, match=match):
            open_store(url, env=env)


@pytest.mark.parametrize("url,warned", [
    ("etcd://root@10.0.0.1:2379", True),
    ("etcd://root@127.0.0.1:2379,etcd-b.example:2379", True),
    ("etcd://root@127.0.0.1:2379,[::1]:2379,localhost:2379", False),
    ("etcds://root@10.0.0.1:2379", False),
    ("etcd://10.0.0.1:2379", False),   # no user: no password to leak
])
def test_a_password_over_plain_http_is_warned_about(url: str, warned: bool, caplog) -> None:
    import logging

    caplog.set_level(logging.WARNING, logger="crosszone.store")
    s = open_store(url, env={"CROSSZONE_ETCD_PASSWORD": "pw"})
    s.close()
    said = [r.getMessage() for r in caplog.records if r.name == "crosszone.store"]
    if warned:
        assert len(said) == 1 and "in clear over http" in said[0] and "etcds://" in said[0]
        assert "pw" not in said[0].replace("password", "")
    else:
        assert said == []


def test_the_commands_say_which_store_option_is_wrong(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crosszone.cli import app

    env = {"CROSSZONE_TOKEN": "t", "CROSSZONE_ETCD_PASSWORD_FILE": str(tmp_path / "none")}
    for cmd in (["controller", "--store", "etcd://root@127.0.0.1:2379"],
                ["agent", "--gateway", "gw-a", "--store", "etcd://root@127.0.0.1:2379"]):
        r = CliRunner().invoke(app, cmd, env=env)
        assert r.exit_code == 2, (cmd, r.output, r.exception)
        assert "--store: CROSSZONE_ETCD_PASSWORD_FILE" in r.output and "No such file" in r.output
