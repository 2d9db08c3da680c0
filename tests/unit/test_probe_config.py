"""The probe daemon's configuration: one valid file, and every kind of mistake refused with
the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosszone.probe.config import ProbeConfigError, load, loads

SHA = "ab" * 32
GOOD = f"""
name: canary-h1
role: canary
interval_s: 0.5
dscp: 46
source4: 192.168.30.5
source6: "fd00:30::5"
targets:
  - name: storage-1
    addresses: [10.20.0.11, "fd00:20::11"]
    path: /meta/shard-00000.json
    size: 120
    sha256: {SHA}
  - name: storage-2
    addresses: [10.20.0.12]
    port: 8080
    path: /meta/shard-00000.json
    size: 0
    sha256: {SHA}
"""


def test_a_valid_file_gives_one_read_per_address(tmp_path: Path) -> None:
    f = tmp_path / "probe.yaml"
    f.write_text(GOOD)
    c = load(f)
    assert (c.name, c.role, c.interval_s, c.connect_s, c.response_s) == (
        "canary-h1", "canary", 0.5, 1.0, 5.0)
    assert [(t.name, t.server, t.port, t.source, t.dscp, t.family) for t in c.targets] == [
        ("storage-1", "10.20.0.11", 80, "192.168.30.5", 46, 4),
        ("storage-1", "fd00:20::11", 80, "fd00:30::5", 46, 6),
        ("storage-2", "10.20.0.12", 8080, "192.168.30.5", 46, 4)]
    assert c.targets[0].expect.size == 120 and c.targets[0].expect.sha256 == SHA


def _with(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize(("text", "words"), [
    (_with("role: canary", "role: canary\ncolour: blue"), "unknown key(s) colour"),
    (_with("role: canary", "role: staging"), "role: 'staging'"),
    (_with("role: canary\n", ""), "role: missing"),
    (_with("name: canary-h1", "name: Canary H1"), "is not a name"),
    (_with("interval_s: 0.5", "interval_s: 0"), "interval_s: 0"),
    (_with("interval_s: 0.5", "interval_s: .inf"), "interval_s: '.inf'"),
    (_with("interval_s: 0.5", "interval_s: 1e3"), "interval_s: '1e3'"),
    (_with("interval_s: 0.5", "interval_s: true"), "interval_s: True"),
    (_with("dscp: 46", "dscp: 046"), "dscp: '046'"),
    (_with("dscp: 46", "dscp: 64"), "dscp: 64"),
    (_with("source4: 192.168.30.5", "source4: fd00::1"), "not an IPv4 address"),
    (_with('source6: "fd00:30::5"', "source6: 10.0.0.1"), "not an IPv6 address"),
    (_with("addresses: [10.20.0.12]", "addresses: [10.20.0.256]"), "not an IPv4 or IPv6"),
    (_with("addresses: [10.20.0.12]", "addresses: []"), "non-empty list"),
    (_with("addresses: [10.20.0.12]", "addresses: [10.20.0.12, 10.20.0.12]"), "twice"),
    (_with("port: 8080", "port: 0"), "port: 0"),
    (_with("port: 8080", "prot: 8080"), "unknown key(s) prot"),
    (_with("size: 0", "size: -1"), "size: -1"),
    (_with("size: 0", "size: 1_000"), "size: '1_000'"),
    (_with("size: 120", "size: 120\n    size: 121"), "given twice"),
    (_with(f"sha256: {SHA}\n  - name: storage-2", f"sha256: {SHA.upper()}\n  - name: "
                                                 "storage-2"), "64 lower-case hex"),
    (_with("path: /meta/shard-00000.json\n    size: 120", "path: meta\n    size: 120"),
     "absolute URL path"),
    (_with("path: /meta/shard-00000.json\n    size: 120",
           "path: /a b\n    size: 120"), "absolute URL path"),
    (_with("name: storage-2", "name: storage-1"), "earlier target"),
    (_with("    sha256: " + SHA + "\n  - name: storage-2", "  - name: storage-2"),
     "sha256: missing"),
    ("targets: []\nname: x\nrole: canary", "non-empty list"),
    ("- a\n- b", "not a mapping"),
    ("name: [", "not valid YAML"),
])
def test_mistakes_are_refused_naming_the_key(text: str, words: str) -> None:
    with pytest.raises(ProbeConfigError) as err:
        loads(text, "probe.yaml")
    assert words in str(err.value), str(err.value)
    assert str(err.value).startswith("probe.yaml")


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProbeConfigError, match="cannot be read"):
        load(tmp_path / "absent.yaml")
