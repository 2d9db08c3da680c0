"""Tests of the ctypes libbpf binding and the BTF reader against a small compiled fixture.

They load real programs and maps into the kernel, so they need root; veth pairs and namespaces get
unique names (czlb...) and are removed in finally/yield even when a test fails.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from crosszone.fastpath import libbpf as bpf
from crosszone.fastpath.btf import enum_values, struct_layout

pytestmark = [
    pytest.mark.fastpath,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs and maps: needs root"),
]

HERE = Path(__file__).parent
FIXTURE_C = HERE / "bpf_fixtures" / "libbpf_fixture.c"
CLANG = ["clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c"]
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")


def frame(size: int = 64) -> bytes:
    """An Ethernet frame dst=MAC_A src=MAC_B, IPv4 ethertype, patterned payload."""
    payload = bytes(i & 0xFF for i in range(size - 14))
    return MAC_A + MAC_B + b"\x08\x00" + payload


def swapped(f: bytes) -> bytes:
    return f[6:12] + f[0:6] + f[12:]


def flow_key(i: int) -> bytes:
    """struct fx_key {u32 src, dst; u16 sport, dport} = 12 bytes."""
    return struct.pack("<IIHH", i, i ^ 0x5A5A5A5A, i & 0xFFFF, 4789)


def u32(i: int) -> bytes:
    return struct.pack("<I", i)


def u64(i: int) -> bytes:
    return struct.pack("<Q", i)


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def fixture_obj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bpf") / "libbpf_fixture.o"
    subprocess.run([*CLANG, str(FIXTURE_C), "-o", str(out)], check=True)
    return out


@pytest.fixture
def obj(fixture_obj: Path) -> Iterator[bpf.BpfObject]:
    with bpf.BpfObject.open(fixture_obj) as o:
        yield o


@pytest.fixture
def bpffs_dir() -> Iterator[Path]:
    if subprocess.run(["mountpoint", "-q", "/sys/fs/bpf"], check=False).returncode != 0:
        sh("mount", "-t", "bpf", "bpf", "/sys/fs/bpf")
    d = Path("/sys/fs/bpf") / f"czlb-{secrets.token_hex(4)}"
    d.mkdir()
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the block with this thread in a named network namespace (Python 3.11 has no setns)."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            yield
        finally:
            if _libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(home)
        os.close(target)


@pytest.fixture
def veth_root() -> Iterator[tuple[str, str]]:
    tag = secrets.token_hex(3)
    a, b = f"czlb{tag}a", f"czlb{tag}b"
    sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
    try:
        sh("ip", "link", "set", a, "up")
        sh("ip", "link", "set", b, "up")
        yield a, b
    finally:
        subprocess.run(["ip", "link", "del", a], check=False, capture_output=True)


@pytest.fixture
def veth_netns() -> Iterator[tuple[str, str, str]]:
    ns = f"czlb-{secrets.token_hex(4)}"
    sh("ip", "netns", "add", ns)
    try:
        # No IPv6: router solicitations and DAD would add frames to the peer's count.
        for conf in ("all", "default"):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{conf}.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "add", "czlba", "type", "veth", "peer", "name", "czlbb")
        sh("ip", "-n", ns, "link", "set", "czlba", "up")
        sh("ip", "-n", ns, "link", "set", "czlbb", "up")
        yield ns, "czlba", "czlbb"
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def counter(obj: bpf.BpfObject, idx: int) -> int:
    return sum(struct.unpack("<Q", v)[0] for v in obj.map("fx_counters").lookup_percpu(u32(idx)))


# --- maps -----------------------------------------------------------------------------------


def test_object_lists_maps_and_programs_with_kernel_sizes(obj: bpf.BpfObject) -> None:
    flows = obj.map("fx_flows")
    assert (flows.map_type, flows.key_size, flows.value_size) == (bpf.MapType.HASH, 12, 8)
    assert flows.max_entries == 262144
    assert obj.map("fx_routes").map_type == bpf.MapType.LPM_TRIE
    assert obj.map("fx_counters").map_type == bpf.MapType.PERCPU_ARRAY
    assert obj.map("fx_ports").map_type == bpf.MapType.DEVMAP
    assert obj.map("fx_records").value_size == 48
    assert set(obj.programs) == {"fx_swap", "fx_frags", "fx_pass"}
    assert obj.program("fx_frags").section == "xdp.frags"
    assert obj.program("fx_swap").prog_type == bpf.ProgType.XDP
    assert all(p.fd > 0 for p in obj.programs.values())


def test_hash_update_lookup_delete_round_trip(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    k = flow_key(7)
    assert m.lookup(k) is None
    m.update(k, u64(41))
    assert m.lookup(k) == u64(41)
    m.update(k, u64(42), bpf.BPF_EXIST)
    assert m.lookup(k) == u64(42)
    assert m.delete(k) is True
    assert m.lookup(k) is None
    assert m.delete(k) is False


def test_update_flags_are_enforced_by_the_kernel(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    with pytest.raises(bpf.BpfError) as e:
        m.update(flow_key(1), u64(1), bpf.BPF_EXIST)
    assert e.value.errno == errno.ENOENT and e.value.call == "bpf_map_update_elem"
    m.update(flow_key(1), u64(1), bpf.BPF_NOEXIST)
    with pytest.raises(bpf.BpfError) as e:
        m.update(flow_key(1), u64(2), bpf.BPF_NOEXIST)
    assert e.value.errno == errno.EEXIST
    assert "fx_flows" in str(e.value)


def test_keys_and_items_walk_every_entry(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    want = {flow_key(i): u64(i * 3) for i in range(50)}
    for k, v in want.items():
        m.update(k, v)
    assert sorted(m.keys()) == sorted(want)
    assert dict(m.items()) == want


def test_array_and_devmap_values(obj: bpf.BpfObject) -> None:
    arr = obj.map("fx_records")
    assert arr.lookup(u32(3)) == bytes(48)  # arrays are zero-filled
    arr.update(u32(3), bytes(range(48)))
    assert arr.lookup(u32(3)) == bytes(range(48))
    assert arr.lookup(u32(8)) is None  # out of range reads as absent
    with pytest.raises(bpf.BpfError) as e:
        arr.delete(u32(3))  # array entries cannot be deleted
    assert e.value.errno == errno.EINVAL
    ports = obj.map("fx_ports")
    ports.update(u32(0), u32(socket.if_nametoindex("lo")))
    assert ports.lookup(u32(0)) == u32(1)
    with pytest.raises(bpf.BpfError):
        ports.update(u32(1), u32(0x7FFFFFF0))  # no such device


def test_update_batch_200k_then_sample_lookups(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    n = 200_000
    keys = [flow_key(i) for i in range(n)]
    vals = [u64(i * 7 + 1) for i in range(n)]
    t = time.perf_counter()
    assert m.update_batch(keys, vals) == n
    elapsed = time.perf_counter() - t
    assert m.use_batch_syscall
    for i in (0, 1, 65535, 65536, 131071, 199_999, *range(1000, 200_000, 9973)):
        assert m.lookup(keys[i]) == vals[i]
    assert m.lookup(flow_key(n)) is None
    assert elapsed < 2.0, f"200k batch update took {elapsed:.2f}s"
    # Concatenated buffers are accepted as-is.
    assert m.update_batch(b"".join(keys[:10]), b"".join(u64(5) for _ in range(10))) == 10
    assert m.lookup(keys[9]) == u64(5)
    # delete_batch skips keys that are absent (the kernel stops there) and counts the rest.
    doomed = keys[:1000] + [flow_key(10**9)] + keys[:5] + keys[1000:3000]
    assert m.delete_batch(doomed) == 3000
    assert m.lookup(keys[0]) is None and m.lookup(keys[2999]) is None
    assert m.lookup(keys[3000]) == vals[3000]


def test_update_batch_rejects_bad_sizes(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    with pytest.raises(bpf.BpfError, match=r"key #1 is 11 bytes, expected 12"):
        m.update_batch([flow_key(0), flow_key(1)[:11]], [u64(0), u64(1)])
    with pytest.raises(bpf.BpfError, match=r"2 keys but 1 values"):
        m.update_batch([flow_key(0), flow_key(1)], [u64(0)])
    with pytest.raises(bpf.BpfError, match="not a multiple of 8"):
        m.update_batch(flow_key(0), b"\0" * 7)
    assert m.lookup(flow_key(0)) is None  # nothing was written


def test_update_batch_reports_the_failing_entry(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    m.update(flow_key(5), u64(0))
    with pytest.raises(bpf.BpfError) as e:
        m.update_batch(
            [flow_key(i) for i in range(10)], [u64(i) for i in range(10)], bpf.BPF_NOEXIST
        )
    assert e.value.errno == errno.EEXIST and "entry #5 of 10" in str(e.value)
    assert m.lookup(flow_key(4)) == u64(4)


def test_lpm_trie_batch_and_longest_prefix_match(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_routes")

    def key(plen: int, addr: str) -> bytes:
        return struct.pack("<I", plen) + socket.inet_aton(addr)

    routes = [key(8, "10.0.0.0"), key(24, "10.1.2.0"), key(32, "10.1.2.3")]
    m.update_batch(routes, [u32(1), u32(2), u32(3)])
    assert m.lookup(key(32, "10.9.9.9")) == u32(1)
    assert m.lookup(key(32, "10.1.2.77")) == u32(2)
    assert m.lookup(key(32, "10.1.2.3")) == u32(3)
    assert m.lookup(key(32, "11.0.0.1")) is None
    assert m.delete_batch(routes[1:]) == 2
    assert m.lookup(key(32, "10.1.2.3")) == u32(1)


def test_lpm_trie_per_entry_fallback(obj: bpf.BpfObject) -> None:
    # Kernels before LPM batch support answer ENOTSUPP; force the loop that path takes.
    m = obj.map("fx_routes")
    m.use_batch_syscall = False
    n = 20_000
    keys = [struct.pack("<I", 32) + struct.pack(">I", 0x0A000000 + i) for i in range(n)]
    assert m.update_batch(keys, [u32(i) for i in range(n)]) == n
    assert m.lookup(keys[12345]) == u32(12345)
    assert m.delete_batch(keys[:100] + keys[:100]) == 100
    assert m.lookup(keys[99]) is None and m.lookup(keys[100]) == u32(100)


def test_map_without_batch_ops_falls_back_to_loop(obj: bpf.BpfObject) -> None:
    ports = obj.map("fx_ports")  # devmap: the kernel has no map_update_batch (ENOTSUPP)
    lo = u32(socket.if_nametoindex("lo"))
    assert ports.update_batch([u32(i) for i in range(4)], [lo] * 4) == 4
    assert ports.use_batch_syscall is False
    assert [ports.lookup(u32(i)) for i in range(5)] == [lo] * 4 + [None]  # empty slot: ENOENT
    assert ports.delete_batch([u32(1), u32(2)]) == 2
    assert ports.lookup(u32(1)) is None and ports.lookup(u32(3)) == lo


def test_standalone_map_create(obj: bpf.BpfObject) -> None:
    with bpf.BpfMap.create(bpf.MapType.HASH, 4, 4, 16, name="czlb_t") as m:
        assert m.fd > 0 and m.map_type == bpf.MapType.HASH
        m.update(u32(1), u32(2))
        assert m.lookup(u32(1)) == u32(2)
        assert m.id > 0
    assert m.fd == -1


# --- per-CPU maps ---------------------------------------------------------------------------


def test_percpu_values_follow_test_runs(obj: bpf.BpfObject) -> None:
    pc = obj.map("fx_counters")
    ncpu = bpf.possible_cpus()
    assert ncpu == os.cpu_count() or ncpu >= 1
    assert pc.value_stride == 8 * ncpu
    values = pc.lookup_percpu(u32(0))
    assert values == [bytes(8)] * ncpu
    obj.program("fx_swap").test_run(frame(), repeat=5)
    obj.program("fx_pass").test_run(frame())
    assert counter(obj, 0) == 5
    assert counter(obj, 2) == 1
    assert counter(obj, 1) == 0


def test_percpu_update_round_trip_and_errors(obj: bpf.BpfObject) -> None:
    pc = obj.map("fx_counters")
    ncpu = bpf.possible_cpus()
    vals = [u64(100 + c) for c in range(ncpu)]
    pc.update_percpu(u32(3), vals)
    assert pc.lookup_percpu(u32(3)) == vals
    assert pc.lookup(u32(3)) == b"".join(vals)
    with pytest.raises(bpf.BpfError, match=f"value is 3 bytes, map expects {8 * ncpu}"):
        pc.update(u32(3), b"abc")
    # Batches of per-CPU values use the same stride: one 8-byte slot per possible CPU.
    blobs = [b"".join(u64(i * 10 + c) for c in range(ncpu)) for i in range(4)]
    assert pc.update_batch([u32(i) for i in range(4)], blobs) == 4
    assert pc.lookup_percpu(u32(2)) == [u64(20 + c) for c in range(ncpu)]
    with pytest.raises(bpf.BpfError, match="not a per-CPU map"):
        obj.map("fx_flows").lookup_percpu(flow_key(0))


# --- test_run -------------------------------------------------------------------------------


def test_test_run_swaps_macs_and_returns_tx(obj: bpf.BpfObject) -> None:
    f = frame(98)
    r = obj.program("fx_swap").test_run(f)
    assert r.retval == bpf.XDP_TX
    assert r.data_out == swapped(f)
    assert r.ctx_out == b""


def test_test_run_short_frame_is_dropped(obj: bpf.BpfObject) -> None:
    r = obj.program("fx_swap").test_run(frame()[:14])
    assert (r.retval, r.data_out) == (bpf.XDP_TX, swapped(frame()[:14]))
    with pytest.raises(bpf.BpfError) as e:
        obj.program("fx_swap").test_run(b"\0" * 13)  # below ETH_HLEN: refused by the kernel
    assert e.value.errno == errno.EINVAL and e.value.call == "bpf_prog_test_run_opts"


def test_test_run_repeat_reports_duration(obj: bpf.BpfObject) -> None:
    f = frame()
    r = obj.program("fx_swap").test_run(f, repeat=1001)
    assert r.data_out == swapped(f)  # odd number of swaps on the same buffer
    assert 0 < r.duration_ns < 100_000
    assert counter(obj, 0) == 1001


def test_test_run_with_xdp_ctx(obj: bpf.BpfObject) -> None:
    lo = socket.if_nametoindex("lo")
    f = frame(200)
    r = obj.program("fx_swap").test_run(f, ctx=bpf.xdp_ctx(ingress_ifindex=lo))
    assert r.data_out == swapped(f)
    assert struct.unpack("<6I", r.ctx_out[:24]) == (0, len(f), 0, lo, 0, 0)
    assert bpf.xdp_ctx(3, 0, 64) == struct.pack("<6I", 0, 64, 0, 3, 0, 0)
    with pytest.raises(bpf.BpfError) as e:  # data_end may not point past the frame
        obj.program("fx_swap").test_run(f, ctx=bpf.xdp_ctx(lo, 0, len(f) + 1))
    assert e.value.errno == errno.EINVAL
    with pytest.raises(bpf.BpfError):  # only queue 0 exists on lo
        obj.program("fx_swap").test_run(f, ctx=bpf.xdp_ctx(lo, 1000))


def test_jumbo_frame_through_frags_program(obj: bpf.BpfObject) -> None:
    f = frame(9000)
    r = obj.program("fx_frags").test_run(f)
    assert r.retval == bpf.XDP_TX
    assert len(r.data_out) == 9000
    assert r.data_out == swapped(f)
    rec = obj.map("fx_records").lookup(u32(0))
    assert rec is not None
    assert struct.unpack_from("<Q", rec, 16)[0] == 9000  # bpf_xdp_get_buff_len saw all frags
    assert struct.unpack_from("<I", rec, 32)[0] == 0x10000
    assert counter(obj, 1) == 1
    with pytest.raises(bpf.BpfError) as e:
        obj.program("fx_frags").test_run(f, data_out_size=1000)
    assert e.value.errno == errno.ENOSPC and "data_out_size" in str(e.value)


def test_live_frames_reach_the_veth_peer(
    obj: bpf.BpfObject, veth_netns: tuple[str, str, str]
) -> None:
    # Live frames are optional (fastpath/live_frames.py); a frame sent by an ordinary sender
    # reaching the veth peer is tested everywhere in test_sender.py.
    from crosszone.fastpath.live_frames import probe

    answer = probe()
    if not answer.allowed:
        pytest.skip(f"live-frames test runs refused by this kernel: {answer.unavailable()}")
    ns, a, b = veth_netns
    n = 2000
    with in_netns(ns):
        ia, ib = socket.if_nametoindex(a), socket.if_nametoindex(b)
        # XDP_TX out of a lands in b, which needs an XDP program to take XDP frames.
        bpf.xdp_attach(ib, obj.program("fx_pass").fd)
        r = obj.program("fx_swap").test_run(
            frame(1500),
            ctx=bpf.xdp_ctx(ingress_ifindex=ia),
            repeat=n,
            flags=bpf.BPF_F_TEST_XDP_LIVE_FRAMES,
            batch_size=64,
        )
        assert r.data_out == b""
        deadline = time.monotonic() + 2.0
        while counter(obj, 2) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        bpf.xdp_detach(ib)
    assert counter(obj, 0) == n
    assert counter(obj, 2) == n


# --- XDP attach -----------------------------------------------------------------------------


def test_xdp_attach_replace_detach(obj: bpf.BpfObject, veth_root: tuple[str, str]) -> None:
    ifindex = socket.if_nametoindex(veth_root[0])
    swap, pas = obj.program("fx_swap"), obj.program("fx_pass")
    assert bpf.xdp_query_prog_id(ifindex) == 0
    bpf.xdp_attach(ifindex, swap.fd)
    assert bpf.xdp_query_prog_id(ifindex) == swap.id
    assert bpf.xdp_query_prog_id(ifindex, bpf.XDP_FLAGS_DRV_MODE) == swap.id
    with pytest.raises(bpf.BpfError) as e:  # old program does not match: refused atomically
        bpf.xdp_attach(ifindex, pas.fd, old_prog_fd=pas.fd)
    assert e.value.errno == errno.EEXIST and e.value.call == "bpf_xdp_attach"
    assert bpf.xdp_query_prog_id(ifindex) == swap.id
    bpf.xdp_attach(ifindex, pas.fd, old_prog_fd=swap.fd)
    assert bpf.xdp_query_prog_id(ifindex) == pas.id != swap.id
    bpf.xdp_detach(ifindex)
    assert bpf.xdp_query_prog_id(ifindex) == 0


def test_xdp_attach_bad_ifindex(obj: bpf.BpfObject) -> None:
    with pytest.raises(bpf.BpfError, match=r"bpf_xdp_attach\(ifindex 2147480000\)") as e:
        bpf.xdp_attach(2147480000, obj.program("fx_pass").fd)
    assert e.value.errno == errno.ENODEV
    assert bpf.xdp_query_prog_id(2147480000) == 0  # libbpf: no such link, no program


# --- pinning --------------------------------------------------------------------------------


def test_pin_and_from_pinned_round_trip(obj: bpf.BpfObject, bpffs_dir: Path) -> None:
    flows = obj.map("fx_flows")
    flows.pin(bpffs_dir / "flows")
    obj.program("fx_swap").pin(bpffs_dir / "swap")
    with bpf.BpfMap.from_pinned(bpffs_dir / "flows") as again:
        assert (again.map_type, again.key_size, again.value_size, again.max_entries) == (
            bpf.MapType.HASH,
            12,
            8,
            262144,
        )
        assert again.name == "fx_flows"
        assert again.id == flows.id
        again.update(flow_key(9), u64(99))
        assert flows.lookup(flow_key(9)) == u64(99)
    prog = bpf.BpfProgram.from_pinned(bpffs_dir / "swap")
    try:
        assert prog.id == obj.program("fx_swap").id
        assert prog.test_run(frame()).data_out == swapped(frame())
    finally:
        prog.close()
    fd = bpf.obj_get(bpffs_dir / "flows")
    os.close(fd)
    bpf.BpfMap.unpin(bpffs_dir / "flows")
    with pytest.raises(bpf.BpfError) as e:
        bpf.BpfMap.from_pinned(bpffs_dir / "flows")
    assert e.value.errno == errno.ENOENT and e.value.call == "bpf_obj_get"


def test_pin_maps_dir_reuses_live_map(fixture_obj: Path, bpffs_dir: Path) -> None:
    pins = bpffs_dir / "maps"  # created by open()
    with bpf.BpfObject.open(fixture_obj, pin_maps_dir=pins) as first:
        first.map("fx_flows").update(flow_key(1), u64(1234))
        first_id = first.map("fx_flows").id
    assert sorted(p.name for p in pins.iterdir()) == sorted(
        ["fx_flows", "fx_routes", "fx_counters", "fx_records", "fx_ports"]
    )
    with bpf.BpfObject.open(fixture_obj, pin_maps_dir=pins) as second:
        assert second.map("fx_flows").id == first_id
        assert second.map("fx_flows").lookup(flow_key(1)) == u64(1234)
        # The reloaded program uses the same map.
        second.program("fx_swap").test_run(frame())
    with bpf.BpfMap.from_pinned(pins / "fx_counters") as pc:
        assert sum(struct.unpack("<Q", v)[0] for v in pc.lookup_percpu(u32(0))) == 1
    with bpf.BpfObject.open(fixture_obj) as unpinned:  # without pins: a fresh, empty map
        assert unpinned.map("fx_flows").lookup(flow_key(1)) is None


# --- errors ---------------------------------------------------------------------------------


def test_bad_key_size_is_a_clear_error(obj: bpf.BpfObject) -> None:
    m = obj.map("fx_flows")
    for call in (lambda: m.lookup(b"abc"), lambda: m.update(b"abc", u64(0)), lambda: m.delete(b"")):
        with pytest.raises(bpf.BpfError) as e:
            call()
        assert e.value.errno == errno.EINVAL
        assert "fx_flows" in str(e.value) and "map expects 12" in str(e.value)
    with pytest.raises(bpf.BpfError, match="value is 4 bytes, map expects 8"):
        m.update(flow_key(0), u32(0))


def test_missing_names_list_what_exists(obj: bpf.BpfObject) -> None:
    with pytest.raises(KeyError) as e:
        obj.map("fx_nope")
    assert isinstance(e.value, bpf.BpfError)
    assert "fx_nope" in str(e.value) and "fx_flows" in str(e.value)
    with pytest.raises(bpf.BpfError, match="fx_swap"):
        obj.program("nope")


def test_open_errors_name_the_call(tmp_path: Path) -> None:
    with pytest.raises(bpf.BpfError) as e:
        bpf.BpfObject.open(tmp_path / "missing.o")
    assert e.value.errno == errno.ENOENT and e.value.call == "bpf_object__open_file"
    bad = tmp_path / "bad.c"
    bad.write_text(
        "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"
        'SEC("xdp") int oob(struct xdp_md *ctx) {\n'
        "  return *(unsigned char *)(long)(ctx->data + 100);\n}\n"
        'char LICENSE[] SEC("license") = "GPL";\n'
    )
    subprocess.run([*CLANG, str(bad), "-o", str(tmp_path / "bad.o")], check=True)
    with pytest.raises(bpf.BpfError) as e:
        bpf.BpfObject.open(tmp_path / "bad.o")
    assert e.value.call == "bpf_object__load"
    assert e.value.errno == errno.EACCES
    assert "prog 'oob'" in str(e.value) and "PROG LOAD LOG" in str(e.value)  # verifier log


# --- BTF ------------------------------------------------------------------------------------


class FxInner(ctypes.Structure):
    _fields_ = [("port", ctypes.c_uint16), ("proto", ctypes.c_uint8), ("flags", ctypes.c_uint8)]


class FxU(ctypes.Union):
    _fields_ = [("vni", ctypes.c_uint32), ("raw", ctypes.c_uint8 * 4)]


class FxAnon(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint16), ("hi", ctypes.c_uint16)]


class FxRecord(ctypes.Structure):
    """Mirror of struct fx_record in bpf_fixtures/libbpf_fixture.c."""

    _anonymous_ = ("_anon",)
    _fields_ = [
        ("addr", ctypes.c_uint32),
        ("inner", FxInner),
        ("mac", ctypes.c_uint8 * 6),
        ("counter", ctypes.c_uint64),
        ("u", FxU),
        ("_anon", FxAnon),
        ("reason", ctypes.c_uint32),
        ("hops", FxInner * 3),
    ]


def test_btf_struct_layout_matches_c_definition(fixture_obj: Path) -> None:
    layout = struct_layout(fixture_obj, "fx_record")
    assert layout.size == ctypes.sizeof(FxRecord) == 48
    expected: dict[str, tuple[int, int]] = {}
    for name, ctype, *_ in FxRecord._fields_:
        desc = getattr(FxRecord, name)
        if name == "_anon":
            for sub, *_ in FxAnon._fields_:
                expected[sub] = (
                    desc.offset + getattr(FxAnon, sub).offset,
                    getattr(FxAnon, sub).size,
                )
            continue
        expected[name] = (desc.offset, desc.size)
        if ctype in (FxInner, FxU):
            for sub, *_ in ctype._fields_:
                sd = getattr(ctype, sub)
                expected[f"{name}.{sub}"] = (desc.offset + sd.offset, sd.size)
    assert layout.fields == expected
    assert list(layout.fields)[:3] == ["addr", "inner", "inner.port"]
    key = struct_layout(fixture_obj, "fx_key")
    assert (key.size, key.fields["dport"]) == (12, (10, 2))


def test_btf_enum_values(fixture_obj: Path) -> None:
    assert enum_values(fixture_obj, "fx_reason") == {
        "FX_REASON_NONE": 0,
        "FX_REASON_TX": 3,
        "FX_REASON_SHORT": 7,
        "FX_REASON_BIG": 0x10000,
    }


def test_btf_lookup_errors(fixture_obj: Path, tmp_path: Path) -> None:
    with pytest.raises(bpf.BpfError, match="no struct/union/typedef named 'fx_nope'"):
        struct_layout(fixture_obj, "fx_nope")
    with pytest.raises(bpf.BpfError, match="no enum"):
        enum_values(fixture_obj, "fx_record")
    with pytest.raises(bpf.BpfError) as e:
        struct_layout(tmp_path / "missing.o", "fx_record")
    assert e.value.call == "btf__parse_elf"


def test_dump_reads_every_entry_in_batches():
    """BpfMap.dump: all entries of a hash (batch syscall, several chunks) and of an LPM trie or
    array, equal to what per-key iteration sees."""
    import struct as _struct

    with bpf.BpfMap.create(bpf.MapType.HASH, 12, 8, 300_000) as m:
        keys = b"".join(_struct.pack("<III", i, i * 7, 1) for i in range(200_000))
        vals = b"".join(_struct.pack("<Q", i * 3) for i in range(200_000))
        m.update_batch(keys, vals)
        k, v, n = m.dump(chunk=65_536)
        assert n == 200_000 and len(k) == n * 12 and len(v) == n * 8
        got = {k[i * 12:(i + 1) * 12]: v[i * 8:(i + 1) * 8] for i in range(n)}
        assert got == {keys[i * 12:(i + 1) * 12]: vals[i * 8:(i + 1) * 8] for i in range(200_000)}
    with bpf.BpfMap.create(bpf.MapType.ARRAY, 4, 8, 1000) as a:
        a.update(_struct.pack("<I", 5), _struct.pack("<Q", 42))
        k, v, n = a.dump()
        assert n == 1000 and v[5 * 8:6 * 8] == _struct.pack("<Q", 42)
