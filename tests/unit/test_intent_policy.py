"""The traffic policy's intent fields and the per-VPC rate: each mistake rejected with the field
named, and what valid values compile to (config flags and fields, token-bucket figures)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crosszone.abi import layout
from crosszone.compile.encode import encode_config, encode_vpc
from crosszone.compile.tables import compile_tables, rate_fields
from crosszone.intent.cluster import parse_cluster
from crosszone.intent.errors import InvalidIntentError

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def _parse(policy: dict | None = None, vpc: dict | None = None):
    d = yaml.safe_load(CLUSTER.read_text())
    if policy is not None:
        d["policy"] = policy
    if vpc is not None:
        d["vpcs"][0].update(vpc)
    return parse_cluster(yaml.safe_dump(d), "p.yaml")


@pytest.mark.parametrize(("policy", "vpc", "where", "says"), [
    ({"small_dscp": 64}, None, "policy.small_dscp", "less than or equal to 63"),
    ({"bulk_dscp": -1}, None, "policy.bulk_dscp", "greater than or equal to 0"),
    ({"small_dscp": 10, "bulk_dscp": 10}, None, "policy.bulk_dscp", "share one class"),
    ({"elephant_bytes": 0}, None, "policy.elephant_bytes", "greater than or equal to 1"),
    ({"elephant_bytes": "10M"}, None, "policy.elephant_bytes", "integer"),
    ({"flowlet_gap_us": 0}, None, "policy.flowlet_gap_us", "greater than or equal to 1"),
    ({"flowlet_gap_us": 2000, "flow_idle_ms": 2}, None, "policy.flowlet_gap_us",
     "not below flow_idle_ms"),
    ({"flow_idle_ms": 0}, None, "policy.flow_idle_ms", "greater than or equal to 1"),
    ({"enabled": "yes"}, None, "policy.enabled", "boolean"),
    ({"enabled": 1}, None, "policy.enabled", "boolean"),
    ({"elephant": 5}, None, "policy", "unknown key 'elephant'"),
    (None, {"rate_mbps": 0}, "vpcs[0].rate_mbps", "greater than or equal to 1"),
    (None, {"rate_mbps": 1.5}, "vpcs[0].rate_mbps", "not a value of this field"),
    (None, {"rate_mbps": 100, "burst_kib": 8}, "vpcs[0].burst_kib",
     "greater than or equal to 16"),
    (None, {"weight": 3}, "vpcs[0]", "unknown key 'weight'"),
])
def test_bad_policy_is_rejected_naming_the_field(policy, vpc, where, says):
    with pytest.raises(InvalidIntentError) as e:
        _parse(policy, vpc)
    assert f": {where}" in str(e.value) and says in str(e.value), str(e.value)


def test_policy_is_off_unless_enabled_and_compiles_to_the_config():
    off = compile_tables(_parse({"elephant_bytes": 1000}), "gw-a")
    assert off.flags == 0 and off.elephant_bytes == 1000
    on = compile_tables(_parse({"enabled": True, "elephant_bytes": 1000, "flowlet_gap_us": 250,
                                "flow_idle_ms": 30}), "gw-a")
    assert on.flags == layout.CZ_CFG_POLICY
    assert (on.flowlet_gap_ns, on.flow_idle_ns) == (250_000, 30_000_000)
    # in jiffies (abi/ticks.py): 250 us -> ceil(0.25 / 4) + 1 = 2 ticks of 4 ms (HZ=250);
    # 30 ms -> 8 + 1 = 9 ticks of 4 ms, 3 + 1 = 4 of 10 ms (HZ=100), 30 + 1 = 31 of 1 ms
    for tick_ns, gap, idle in ((4_000_000, 2, 9), (10_000_000, 2, 4), (1_000_000, 2, 31)):
        cfg = layout.CzConfig.from_buffer_copy(encode_config(on, tick_ns))
        assert (cfg.flags, cfg.elephant_bytes, cfg.flowlet_gap_ticks, cfg.flow_idle_ticks,
                cfg.small_dscp, cfg.bulk_dscp) == (layout.CZ_CFG_POLICY, 1000, gap, idle, 46, 10)


def test_a_vpc_rate_compiles_to_its_token_bucket():
    t = compile_tables(_parse(vpc={"rate_mbps": 8000, "burst_kib": 256}), "gw-a")
    assert t.flags == layout.CZ_CFG_RATES
    name = yaml.safe_load(CLUSTER.read_text())["vpcs"][0]["name"]
    v = next(v for v in t.vpcs if v.name == name)
    rec = layout.CzVpc.from_buffer_copy(encode_vpc(v))
    # 8 Gbit/s: a MiB (8,388,608 bits) takes 1,048,576 ns; 256 KiB take 262,144 ns
    assert (rec.rate_ns_per_mib, rec.burst_ns) == (1_048_576, 262_144)
    assert all(o.rate_ns_per_mib == 0 for o in t.vpcs if o.name != name)


@pytest.mark.parametrize(("mbps", "kib"), [(1, 16), (3, 1000), (999, 17), (100_000_000, 4096)])
def test_rate_fields_round_to_the_nearest_ns(mbps, kib):
    per_mib, burst = rate_fields(mbps, kib)
    assert abs(per_mib - (8 << 20) * 1000 / mbps) <= 0.5
    assert abs(burst - kib * 8192 * 1000 / mbps) <= 0.5
    assert rate_fields(None, kib) == (0, 0)
