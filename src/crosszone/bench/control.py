"""`crosszone bench control`: control-plane figures at scale (prints JSON lines; not a test).

A synthetic cluster of 1M routes (4 VPCs x 250k pool prefixes, compact blocks) and 100k hosts
(`hosts_compact`; --verbose-hosts for YAML mappings): validate+compile seconds, seconds to program
an empty gateway (maps created from the real object, pinned in a temporary bpffs directory, no
interface attached), seconds for a restarted agent to read the maps back and find nothing to
write, the store's own commit latency, and the latency of a single-route change from the API
call to the route being in the BPF map (controller over HTTP, agent in a thread, the map polled
with lookups), p50/p99 over N changes. etcd runs on a data directory on disk (fsync on).
Needs root (BPF).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from crosszone.abi.objects import object_path


def synthetic(routes: int, hosts: int, vpcs: int = 4, compact_hosts: bool = True) -> str:
    """A version-2 intent text with `routes` pool routes and `hosts` hosts (one line each in
    `hosts_compact`, or YAML mappings in `hosts` with compact_hosts=False)."""
    per = routes // vpcs
    lines = ["version: 2", "gateways:", "  - name: gw-a", "    vtep: 10.0.0.100",
             "    interfaces:",
             '      - {name: lo, role: compute, mac: "02:00:00:00:10:01", '
             'next_hop_mac: "02:00:00:00:10:fe"}', "vpcs:"]
    for v in range(vpcs):
        lines += [f"  - {{name: t{v}, vni: {1000 + v}, prefixes: [10.{v}.0.0/16], "
                  f"storage_facing: [100.{64 + v}.0.0/16], router_mac: \"02:00:00:00:aa:0{v}\", "
                  f"storage_pools: [p{v}]}}"]
    lines.append("hosts_compact: |" if compact_hosts else "hosts:")
    for h in range(hosts):
        v = h % vpcs
        i = h // vpcs + 1
        if compact_hosts:
            lines.append(f"  h{h} t{v} 10.1.{i >> 8}.{i & 255} 02:00:00:01:00:01 "
                         f"10.{v}.{i >> 8}.{i & 255}")
        else:
            lines.append(f"  - {{name: h{h}, vpc: t{v}, vtep: 10.1.{i >> 8}.{i & 255}, "
                         f"addresses: [10.{v}.{i >> 8}.{i & 255}], mac: \"02:00:00:01:00:01\"}}")
    lines.append("storage_pools:")
    for v in range(vpcs):
        base = (20 + v) << 24
        addrs = base + (np.arange(per, dtype=np.int64) << 8)
        block = "\n".join(f"      {a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.0/24"
                          for a in addrs.tolist())
        lines += [f"  - name: p{v}", "    prefixes: |", block,
                  '    next_hops: [{name: n1, interface: lo, mac: "02:00:00:00:30:01"}]']
    return "\n".join(lines) + "\n"


def _etcd(tmp: Path) -> tuple[subprocess.Popen, str]:
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    url = f"http://127.0.0.1:{ports[0]}"
    proc = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp / "etcd"), "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{ports[1]}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{ports[1]}",
         "--initial-cluster", f"default=http://127.0.0.1:{ports[1]}",
         "--max-request-bytes", str(256 << 20), "--max-txn-ops", "100000",
         "--quota-backend-bytes", str(4 << 30)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    for _ in range(200):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return proc, url


def run(store_kind: str, routes: int, hosts: int, changes: int, compact_hosts: bool = True
        ) -> dict:
    """One benchmark line."""
    import uvicorn

    from crosszone.agent.agent import Agent
    from crosszone.compile.gateway import compile_gateway
    from crosszone.control.api import create_app
    from crosszone.control.client import Client
    from crosszone.control.service import Controller
    from crosszone.fastpath.libbpf import BpfObject
    from crosszone.fastpath.maps_io import GatewayMaps
    from crosszone.fastpath.sink import MapSink
    from crosszone.intent.cluster import parse_cluster
    from crosszone.store.store import open_store

    text = synthetic(routes, hosts, compact_hosts=compact_hosts)
    t0 = time.perf_counter()
    cluster = parse_cluster(text, "bench.yaml")
    compile_gateway(cluster, "gw-a", lambda n: 1)
    compile_s = time.perf_counter() - t0

    tmp = Path(tempfile.mkdtemp(prefix="czbench-"))
    pins = Path(tempfile.mkdtemp(prefix="czbench-", dir="/sys/fs/bpf"))
    proc = None
    try:
        if store_kind == "etcd":
            proc, url = _etcd(tmp)
            store = open_store("etcd://" + url.removeprefix("http://"))
        else:
            store = open_store(f"sqlite://{tmp}/state.db")
        ctl = Controller(store)
        app = create_app(ctl, "t")
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
        th = threading.Thread(target=server.run, daemon=True)
        th.start()
        while not server.started:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        client = Client(f"http://127.0.0.1:{port}", "t", timeout=600)
        client.apply(text)

        obj = BpfObject.open(object_path("xdp_gateway"),
                             pin_maps_dir=pins)
        maps = GatewayMaps.of(obj)
        sink = MapSink(maps)
        agent = Agent("gw-a", store, sink, lambda n: 1)
        t0 = time.perf_counter()
        agent.step()
        program_s = time.perf_counter() - t0
        assert len(agent.rec.entries["routes4"]) == routes, "not all routes programmed"

        # a restarted agent: reads the maps back (BpfMap.dump), diffs, writes nothing
        again = Agent("gw-a", store, sink, lambda n: 1, read_actual=sink.read)
        t0 = time.perf_counter()
        res = again.step()
        restart_s = time.perf_counter() - t0
        restart_writes = (res.puts + res.deletes) if res is not None else -1
        del again, res  # its copy of a million entries is not needed for the changes

        # the store's own commit latency (a small put), apart from the rest of the path
        commits = []
        for i in range(50):
            t0 = time.perf_counter()
            store.put(f"bench/commit{i % 4}", b"x")
            commits.append((time.perf_counter() - t0) * 1000)

        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                agent.step(timeout=0.2)
        at = threading.Thread(target=loop, daemon=True)
        at.start()
        routes4 = maps.maps["routes4"]
        lat = []
        vpc_id = agent.rec.ids.vpcs["t0"] if agent.rec.ids else 0
        for i in range(changes):
            a = (30 << 24) + (i << 8)
            prefix = f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.0/24"
            key = vpc_id.to_bytes(4, "little") + (24).to_bytes(4, "little") + a.to_bytes(4, "big")
            t0 = time.perf_counter()
            client.change_prefixes("p0", add=[prefix])
            while routes4.lookup(key) is None:
                time.sleep(0.0002)
            lat.append((time.perf_counter() - t0) * 1000)
        stop.set()
        at.join(5)
        server.should_exit = True
        obj.close()
        return {"store": store_kind, "routes": routes, "hosts": hosts,
                "hosts_form": "compact" if compact_hosts else "verbose",
                "compile_s": round(compile_s, 3), "program_s": round(program_s, 3),
                "change_p50_ms": round(float(np.percentile(lat, 50)), 2),
                "change_p99_ms": round(float(np.percentile(lat, 99)), 2),
                "changes": changes, "restart_s": round(restart_s, 3),
                "restart_writes": restart_writes,
                "store_commit_p50_ms": round(float(np.percentile(commits, 50)), 2),
                "etcd_data": str(tmp) if store_kind == "etcd" else None,
                "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
                "kernel": os.uname().release}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(pins, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
