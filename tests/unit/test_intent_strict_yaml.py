"""The YAML dialect of intents (issue 12, findings 9 and 10): duplicate keys and YAML 1.1 number
and boolean forms are errors that name the file, line, object and field; an integer field is
accepted only in plain decimal and then means what it says; aliases cannot blow the document up;
`crosszone check` reads and parses the file once."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crosszone.intent.cluster import parse_cluster
from crosszone.intent.errors import InvalidIntentError

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
V1 = ROOT / "examples" / "gateway.yaml"
TEXT = CLUSTER.read_text()


def _edit(old: str, new: str, text: str = TEXT) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _line(text: str, needle: str, nth: int = 1) -> int:
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    return hits[nth - 1]


# --- duplicate keys ----------------------------------------------------------------------------

DUPLICATES = [
    # (id, old, new, marker of the second key's line, its occurrence, where)
    ("top-level key", "policy: {", "version: 2\npolicy: {", "version: 2", 2, "version"),
    ("vpc field", "    vni: 1001\n", "    vni: 1001\n    vni: 1751\n", "vni: 1751", 1,
     "vpcs[0].vni"),
    ("gateway field in flow style",
     "    vtep: 10.0.0.100\n    interfaces:\n      - {name: compute0",
     "    vtep: 10.0.0.100\n    interfaces:\n      - {name: compute0, name: storage9", "storage9",
     1, "gateways[0].interfaces[0].name"),
    ("bgp key", "bgp: {asn: 65100, router_id: 10.0.0.1,",
     "bgp: {asn: 65100, asn: 65101, router_id: 10.0.0.1,", "65101", 1, "gateways[0].bgp.asn"),
    ("whole section twice", "storage_pools:\n  - name: datasets",
     "vpcs: []\nstorage_pools:\n  - name: datasets", "vpcs: []", 1, "vpcs"),
    ("pool prefixes twice", "    prefixes: |\n      172.17.0.0/16",
     "    prefixes: [10.0.0.0/8]\n    prefixes: |\n      172.17.0.0/16", "prefixes: |", 1,
     "storage_pools[1].prefixes"),
    ("key of a next hop", '{name: ck-r1, interface: storage0,',
     '{name: ck-r1, interface: storage0, interface: storage1,', "storage1", 1,
     "storage_pools[1].next_hops[0].interface"),
    ("policy key", "small_dscp: 46,", "small_dscp: 46, small_dscp: 10,", "small_dscp: 10", 1,
     "policy.small_dscp"),
    ("same key spelled as a quoted string", "    vni: 1001\n", '    vni: 1001\n    "vni": 7\n',
     '"vni": 7', 1, "vpcs[0].vni"),
]


@pytest.mark.parametrize("case", DUPLICATES, ids=[c[0] for c in DUPLICATES])
def test_duplicate_key_is_rejected_at_its_line(case: tuple) -> None:
    _, old, new, marker, nth, where = case
    text = _edit(old, new)
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "d.yaml")
    msg = str(e.value)
    marker = marker.rstrip("\n")
    assert e.value.line == _line(text, marker, nth), msg
    assert e.value.where == where, msg
    assert msg.startswith(f"d.yaml:{e.value.line}: {where}: key ") and "twice" in msg, msg


def test_duplicate_key_in_a_version1_file() -> None:
    text = _edit("  name: gw-a\n", "  name: gw-a\n  name: gw-z\n", V1.read_text())
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "v1.yaml")
    assert e.value.where == "gateway.name" and e.value.line == _line(text, "gw-z"), str(e.value)


def test_merge_keys_may_be_overridden() -> None:
    # `<<` is how YAML shares defaults; an explicit key next to it overrides, as YAML says
    text = _edit("    vni: 1001\n", "    <<: {vni: 5}\n    vni: 1001\n")
    assert parse_cluster(text, "m.yaml").vpcs[0].vni == 1001
    text = _edit("    vni: 1001\n", "    <<: {vni: 1001}\n")
    assert parse_cluster(text, "m.yaml").vpcs[0].vni == 1001


# --- YAML 1.1 integers and booleans --------------------------------------------------------------

NOT_DECIMAL = [
    # (field line in the example, replacement, where, what YAML 1.1 reads)
    ("vni: 1001", "vni: 01751", "vpcs[0].vni", 1001),
    ("vni: 1001", "vni: 0o1751", "vpcs[0].vni", None),
    ("vni: 1001", "vni: 0x3e9", "vpcs[0].vni", 1001),
    ("vni: 1001", "vni: 0b1111101001", "vpcs[0].vni", 1001),
    ("vni: 1001", "vni: 1_001", "vpcs[0].vni", 1001),
    ("vni: 1001", "vni: 16:41", "vpcs[0].vni", 1001),
    ("vni: 1001", "vni: +1001", "vpcs[0].vni", 1001),
    ("vni: 1002", "vni: 0x3ea", "vpcs[1].vni", 1002),
    ("asn: 65100, router_id: 10.0.0.1", "asn: 0xfe4c, router_id: 10.0.0.1",
     "gateways[0].bgp.asn", 65100),
    ("asn: 65000}]}\n  - name: gw-b", "asn: 01_000}]}\n  - name: gw-b",
     "gateways[0].bgp.peers[0].asn", 512),
    ("small_dscp: 46", "small_dscp: 056", "policy.small_dscp", 46),
    ("elephant_bytes: 8388608", "elephant_bytes: 8_388_608", "policy.elephant_bytes", 8388608),
    ("bulk_dscp: 10", "bulk_dscp: 0xa", "policy.bulk_dscp", 10),
    ("version: 2", "version: 02", "version", 2),
    ("version: 2", "version: 0x2", "version", 2),
]


@pytest.mark.parametrize("case", NOT_DECIMAL, ids=[c[1] for c in NOT_DECIMAL])
def test_integer_not_in_plain_decimal_is_rejected(case: tuple) -> None:
    old, new, where, yaml11 = case
    text = _edit(old, new)
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "n.yaml")
    msg = str(e.value)
    assert e.value.where == where and e.value.line == _line(text, new.split("\n")[0]), msg
    if yaml11 is not None:
        assert "not a plain decimal integer" in msg, msg
        assert f"YAML 1.1 would read it as {yaml11})" in msg, msg


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "Yes", "OFF", "y", "1", "0"])
def test_bfd_takes_only_true_or_false(word: str) -> None:
    text = _edit("router_id: 10.0.0.1,", f"router_id: 10.0.0.1, bfd: {word},")
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "b.yaml")
    assert e.value.where == "gateways[0].bgp.bfd" and e.value.line == _line(text, "bfd:")
    if word.lower() in ("yes", "no", "on", "off"):
        assert "write true or false" in str(e.value), str(e.value)


@pytest.mark.parametrize("word", ["false", "False", "FALSE"])
def test_bfd_false_is_a_boolean(word: str) -> None:
    text = _edit("router_id: 10.0.0.1,", f"router_id: 10.0.0.1, bfd: {word},")
    assert parse_cluster(text, "b.yaml").gateways[0].bgp.bfd is False  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["on", "no", "yes", "off", "y", "n", "2001-12-14", "1e3"])
def test_yaml11_words_are_strings_where_a_string_is_expected(name: str) -> None:
    text = _edit("  - name: tenant-b ", f"  - name: {name} ").replace(
        "vpc: tenant-b,", f"vpc: {name},")
    c = parse_cluster(text, "s.yaml")
    assert c.vpcs[1].name == name and c.hosts[1].vpc == name


def test_unquoted_mac_that_yaml11_reads_as_base60_is_a_mac() -> None:
    # YAML 1.1 reads 12:00:00:00:10:fe... no: 12:00:00:00:10:59 is base 60 in YAML 1.1
    text = _edit('mac: "02:00:00:00:20:01"', "mac: 12:00:00:00:20:59")
    assert parse_cluster(text, "m.yaml").gateways[0].interfaces[1].mac == "12:00:00:00:20:59"


def test_quoted_number_is_a_string_without_a_yaml11_note() -> None:
    text = _edit("vni: 1001", 'vni: "1001"')
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "q.yaml")
    assert "YAML 1.1" not in str(e.value) and "integer" in str(e.value)
    assert e.value.where == "vpcs[0].vni" and e.value.line == _line(text, '"1001"')


def test_decimal_out_of_range_keeps_the_schema_message() -> None:
    with pytest.raises(InvalidIntentError, match="less than or equal") as e:
        parse_cluster(_edit("vni: 1001", "vni: 99999999"), "r.yaml")
    assert "YAML 1.1" not in str(e.value)


# --- aliases --------------------------------------------------------------------------------

def test_alias_expansion_bomb_is_one_quick_error() -> None:
    # 10^9 nodes once expanded; PyYAML shares them and the schema stops at the first wrong shape
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    with pytest.raises(InvalidIntentError, match="unknown key 'a0'"):
        parse_cluster(TEXT + "\n".join(lines) + "\n", "bomb.yaml")


def test_self_referencing_alias_is_one_error() -> None:
    text = TEXT.replace("storage_pools: [datasets]", "storage_pools: &l [datasets, *l]", 1)
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "loop.yaml")
    assert e.value.where is not None and e.value.where.startswith("vpcs[0].storage_pools")


def test_small_shared_defaults_are_fine() -> None:
    text = _edit('    router_mac: "02:00:00:00:bb:01"',
                 '    router_mac: &rm "02:00:00:00:bb:01"').replace(
        '"02:00:00:00:aa:01"', "*rm").replace("  - name: tenant-a", "  - name: tenant-a", 1)
    # an alias used before its anchor is a YAML error, not a crash
    with pytest.raises(InvalidIntentError):
        parse_cluster(text, "a.yaml")
    text = _edit('router_mac: "02:00:00:00:aa:01"', 'router_mac: &rm "02:00:00:00:aa:01"')
    text = _edit('router_mac: "02:00:00:00:bb:01"', "router_mac: *rm", text)
    assert parse_cluster(text, "a.yaml").vpcs[1].router_mac == "02:00:00:00:aa:01"


# --- properties -----------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.integers(-5, 1 << 25).map(str),
    st.from_regex(r"\A[-+]?(0[0-7]{1,6}|0x[0-9a-fA-F]{1,6}|0o[0-7]{1,6}|0b[01]{1,12}"
                  r"|[1-9][0-9_]{0,6}|[1-9][0-9]?(:[0-5][0-9]){1,2}|[0-9]{1,4}\.[0-9]{0,3})\Z"),
    st.sampled_from(["yes", "no", "on", "off", "true", "false", "~", "null", "", ".inf",
                     "'1001'", '"1001"', "1001 # c", "[1001]", "{a: 1}", "1001\n    vni: 7"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SCALARS)
def test_an_integer_field_means_exactly_its_decimal_text(scalar: str) -> None:
    text = _edit("vni: 1001", f"vni: {scalar}")
    try:
        c = parse_cluster(text, "p.yaml")
    except InvalidIntentError as e:
        assert e.line is not None and e.where is not None, str(e)
        return
    assert re.fullmatch(r"(0|[1-9][0-9]*)( # c)?", scalar), scalar
    assert c.vpcs[0].vni == int(scalar.split()[0])


_KEYS = ["version", "gateways", "vpcs", "name", "vni", "vtep", "asn", "bfd", "prefixes",
         "storage_facing", "storage_pools", "hosts", "policy", "<<"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, TEXT.count("\n")), st.sampled_from(_KEYS), _SCALARS,
                          st.integers(0, 6)), max_size=4))
def test_fuzz_inserted_keys_raise_only_the_project_error(edits: list) -> None:
    lines = TEXT.splitlines()
    for at, key, value, indent in edits:
        lines.insert(min(at, len(lines)), " " * indent + f"{key}: {value}")
    with contextlib.suppress(InvalidIntentError):
        parse_cluster("\n".join(lines) + "\n", "f.yaml")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("&*ab[]{}:, -\n01x<|>!'\"#%@`~?")), max_size=60))
def test_fuzz_yaml_syntax_raises_only_the_project_error(junk: str) -> None:
    with contextlib.suppress(InvalidIntentError):
        parse_cluster(junk, "j.yaml")
    with contextlib.suppress(InvalidIntentError):
        parse_cluster(TEXT + junk, "j.yaml")


def test_fuzz_deep_nesting_is_one_error() -> None:
    for text in ("[" * 5000, "a: " + "[" * 3000 + "]" * 3000, "- " * 3000 + "x",
                 TEXT + "extra: " + "{a: " * 2000 + "1" + "}" * 2000):
        with pytest.raises(InvalidIntentError):
            parse_cluster(text, "deep.yaml")


# --- one parse (finding 10) --------------------------------------------------------------------

@pytest.mark.parametrize("path", [CLUSTER, V1], ids=["version2", "version1"])
def test_check_reads_and_parses_the_file_once(path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    from typer.testing import CliRunner

    from crosszone.cli import app

    calls: dict[str, int] = {}

    def counting(name: str, fn: object) -> object:
        def wrapper(*a: object, **k: object) -> object:
            calls[name] = calls.get(name, 0) + 1
            return fn(*a, **k)  # type: ignore[operator]
        return wrapper

    for name in ("load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
                 "compose", "compose_all", "parse", "scan"):
        monkeypatch.setattr(yaml, name, counting(name, getattr(yaml, name)))
    monkeypatch.setattr(Path, "read_text", counting("read_text", Path.read_text))
    monkeypatch.setattr(Path, "read_bytes", counting("read_bytes", Path.read_bytes))
    import builtins
    real_open = builtins.open

    def open_counting(file: object, *a: object, **k: object) -> object:
        if str(file) == str(path):
            calls["open"] = calls.get("open", 0) + 1
        return real_open(file, *a, **k)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", open_counting)
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 0, r.output
    assert calls == {"load": 1, "read_text": 1}, calls
    assert ("version 1" in r.output) == (path == V1), r.output
