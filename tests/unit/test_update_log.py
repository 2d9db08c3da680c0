# ruff: noqa: E501  (FRR log lines quoted whole)
"""Reading FRR's received-update log back (no FRR needed)."""

from __future__ import annotations

from datetime import datetime

from crosszone_lab.emulate import update_log

LOG = """\
2026/12/02 23:59:08.053875 BGP: [T5AAP-5GA85] 10.10.2.2(czemu-lgw2) rcvd UPDATE w/ attr: nexthop 10.10.2.2, origin i
2026/12/02 23:59:08.053877 BGP: [PCFFM-WMARW] 10.10.2.2(czemu-lgw2) rcvd UPDATE wlen 0 attrlen 28 alen 5
2026/12/02 23:59:08.053892 BGP: [NJYMB-R5FFH] 10.10.2.2(czemu-lgw2) rcvd 10.0.0.100/32 IPv4 unicast...duplicate ignored
2026/12/02 23:59:08.100001 BGP: [NJYMB-R5FFH] 10.10.3.2(czemu-xgw1) rcvd 10.0.0.100/32 IPv4 unicast
2026/12/02 23:59:08.120002 BGP: [NJYMB-R5FFH] 10.20.1.2(czemu-lgw1) rcvd fd64:a::/65 IPv6 unicast
2026/12/02 23:59:08.130003 BGP: [M59KS-A3ZXZ] bgp_update_receive: rcvd End-of-RIB for IPv4 Unicast from 10.10.1.2 in vrf default
2026/12/02 23:59:08.140004 BGP: [X] 10.20.2.2(czemu-lgw2) rcvd UPDATE about 100.64.0.0/16 IPv4 unicast -- withdrawn
2026/12/02 23:59:08.150005 ZEBRA: [X] something else rcvd 1.2.3.0/24 IPv4 unicast
"""


def _t(s: str) -> float:
    return datetime.strptime(f"2026/12/02 {s}", "%Y/%m/%d %H:%M:%S.%f").timestamp()


def test_only_routes_that_were_news_count_withdrawals_included() -> None:
    assert update_log.changed_routes(LOG) == [
        (_t("23:59:08.100001"), "10.10.3.2(czemu-xgw1)", "10.0.0.100/32"),
        (_t("23:59:08.120002"), "10.20.1.2(czemu-lgw1)", "fd64:a::/65"),
        (_t("23:59:08.140004"), "10.20.2.2(czemu-lgw2)", "100.64.0.0/16")]


def test_last_change_within_a_window() -> None:
    times = [1.0, 2.0, 3.0, 4.0]
    assert update_log.last_change(times, 1.5, 3.5) == 3.0
    assert update_log.last_change(times, 4.5, 9.0) is None
    assert update_log.last_change(times, 4.0, 4.0) == 4.0


def test_debug_commands_undo_each_other() -> None:
    on, off = update_log.debug_on("czemu-cr"), update_log.debug_off("czemu-cr")
    assert "debug bgp updates in" in on and "no debug bgp updates in" in off
    assert any(x.endswith("frr.log debugging") for x in on)
    assert any(x.endswith("frr.log informational") for x in off)


def test_unreadable_logs_are_skipped(tmp_path) -> None:
    assert update_log.read_times(["czemu-does-not-exist"]) == ([], [])


ZEBRA = """\
2026/12/03 00:07:00.621043 ZEBRA: [YXPF5-B2CE0] netlink_route_multipath_msg_encode: RTM_NEWROUTE 10.0.0.100/32 vrf 0(254)
2026/12/03 00:07:00.621089 ZEBRA: [XFCJM-2E8BE] _netlink_route_build_multipath: (multipath): 10.0.0.100/32 nexthop via 10.10.1.2  if 5 vrf default(0)
2026/12/03 00:07:00.700000 ZEBRA: [YXPF5-B2CE0] netlink_route_multipath_msg_encode: RTM_NEWROUTE fd64:a::/64 vrf 0(254)
2026/12/03 00:07:00.800000 ZEBRA: [YXPF5-B2CE0] netlink_route_multipath_msg_encode: RTM_DELROUTE 100.64.0.0/16 vrf 0(254)
2026/12/03 00:07:00.900000 BGP: [YXPF5-B2CE0] netlink_route_multipath_msg_encode: RTM_NEWROUTE 1.2.3.0/24 vrf 0(254)
"""


def test_zebra_kernel_writes_new_and_deleted_routes() -> None:
    got = update_log.kernel_writes(ZEBRA)
    assert [p for _t, p in got] == ["10.0.0.100/32", "fd64:a::/64", "100.64.0.0/16"]
    assert got[0][0] == datetime.strptime("2026/12/03 00:07:00.621043",
                                          "%Y/%m/%d %H:%M:%S.%f").timestamp()


def test_both_daemons_have_debug_commands() -> None:
    assert update_log.debug_on("czemu-cr", "zebra")[-1] == "debug zebra kernel"
    assert update_log.debug_off("czemu-cr", "zebra")[0] == "no debug zebra kernel"
