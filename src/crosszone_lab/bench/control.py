"""`crosszone bench control`: control-plane figures at scale (prints JSON lines; not a test).

A synthetic cluster of 1M routes (4 VPCs x 250k pool prefixes, compact blocks) and 100k hosts
(`hosts_compact`; --verbose-hosts for YAML mappings): validate+compile seconds, seconds to program
an empty gateway (maps created from the real object, pinned in a temporary bpffs directory, no
interface attached), seconds for a restarted agent to read the maps back and find nothing to
write, the store's own commit latency, and the latency of a single-route change from the API
call to the route being in the BPF map (controller over HTTP, agent in a thread, the map polled
with lookups), p50/p99 over N changes. etcd runs on a data directory on disk (fsync on).
Needs root (BPF).

Where a change's time goes (`breakdown_ms`, p50/p99 of each part, and the part that dominated
each of the slowest 2 %): `api` from the call to the store commit starting (HTTP, parse, the
controller's checks), `commit` (the store transaction: etcd's raft and fsync), `deliver` (commit
returned -> the agent's watch returned the event), `apply` (the agent's reconcile: parse the
chunk, compile the delta, map writes), `visible` (applied -> the poll saw the route). The
ceiling of the same store in the same run (`store_roundtrip_p99_ms`) is a bare put followed by
the watch event on another key prefix, nothing of ours in between: the tail the host and the
store alone give.
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
from crosszone_lab import local_etcd


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


def _p(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)), 2) if xs else -1.0


class _Marks:
    """Timestamps of the store commits and the agent's watch returns and applies, by revision
    (the bench wraps the store and the reconciler; nothing in the product is timed)."""

    def __init__(self) -> None:
        self.commit: dict[int, tuple[float, float]] = {}
        self.watched: dict[int, float] = {}
        self.applied: dict[int, float] = {}

    def wrap(self, store: object, agent: object) -> None:
        """Record around store.put_many and store.watch, and around the agent's on_events."""
        put_many, watch = store.put_many, store.watch  # type: ignore[attr-defined]
        rec = agent.rec  # type: ignore[attr-defined]
        on_events = rec.on_events

        def timed_put_many(items):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            rev = put_many(items)
            if any(k.startswith("intent/") for k in items):
                self.commit[rev] = (t0, time.perf_counter())
            return rev

        def timed_watch(prefix, after, timeout):  # type: ignore[no-untyped-def]
            out = watch(prefix, after, timeout)
            t = time.perf_counter()
            for e in out:
                self.watched.setdefault(e.revision, t)
            return out

        def timed_on_events(events):  # type: ignore[no-untyped-def]
            res = on_events(events)
            t = time.perf_counter()
            for e in events:
                self.applied.setdefault(e.revision, t)
            return res
        store.put_many, store.watch = timed_put_many, timed_watch  # type: ignore[attr-defined]
        rec.on_events = timed_on_events


def _roundtrip(url: str, n: int) -> list[float]:
    """Bare store: put one key, wait for its watch event (ms each)."""
    from crosszone.store.store import open_store

    s = open_store("etcd://" + url.removeprefix("http://"))
    try:
        rev = s.put("ceiling/k", b"0")
        s.watch("ceiling/", rev - 1, 2)
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            rev = s.put("ceiling/k", str(i).encode())
            while not [e for e in s.watch("ceiling/", rev - 1, 2) if e.revision == rev]:
                pass
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        s.close()


def _breakdown(marks: _Marks, changes: list[tuple[float, int, float]]) -> dict:
    """p50/p99 per part, and which part dominated each of the slowest 2 % of changes."""
    parts: dict[str, list[float]] = {}
    rows = []
    for t0, rev, t_vis in changes:
        w = marks.watched.get(rev, t0)
        a = marks.applied.get(rev, w)
        if rev in marks.commit:
            c0, c1 = marks.commit[rev]
            row = {"api": c0 - t0, "commit": c1 - c0, "deliver": w - c1}
        else:  # the controller in its own process: call -> event at the agent, as one part
            row = {"to_event": w - t0}
        row |= {"apply": a - w, "visible": t_vis - a}
        for k, v in row.items():
            parts.setdefault(k, []).append(v * 1000)
        rows.append((t_vis - t0, row))
    out: dict = {k: {"p50": _p(v, 50), "p99": _p(v, 99), "max": _p(v, 100)}
                 for k, v in parts.items()}
    worst = sorted(rows, key=lambda r: -r[0])[:max(1, len(rows) // 50)]
    out["slowest_dominated_by"] = [max(r, key=lambda k: r[k]) for _, r in worst]
    return out


def _controller_process(store_url: str, tmp: Path) -> tuple[subprocess.Popen, int]:
    """`crosszone controller` in its own process, as deployed (it shares no GIL with the agent);
    the token in the environment."""
    import socket
    import sys

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp / "controller.log", "w")  # noqa: SIM115  (the process keeps it)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from crosszone.cli import main; main()", "controller",
         "--store", store_url, "--listen", f"127.0.0.1:{port}"],
        env={**os.environ, "CROSSZONE_TOKEN": "t"}, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc, port
        except httpx.HTTPError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"controller did not start: {(tmp / 'controller.log').read_text()[-2000:]}")


def run(store_kind: str, routes: int, hosts: int, changes: int, compact_hosts: bool = True,
        controller: str = "process") -> dict:
    """One benchmark line (controller "process", as deployed, or "thread": in this process,
    which also times the store commit inside each change)."""
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
    proc = cproc = server = etcd_log = None
    try:
        if store_kind == "etcd":
            (tmp / "etcd").mkdir()
            proc, url, etcd_log = local_etcd.start_single(
                tmp / "etcd", ["--quota-backend-bytes", str(4 << 30)],
                max_request_bytes=256 << 20)
            store_url = "etcd://" + url.removeprefix("http://")
        else:
            store_url = f"sqlite://{tmp}/state.db"
        store = open_store(store_url)
        if controller == "process":
            cproc, port = _controller_process(store_url, tmp)
        else:
            ctl = Controller(store)
            app = create_app(ctl, "t")
            server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                   log_level="error"))
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

        marks = _Marks()
        marks.wrap(store, agent)
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                agent.step(timeout=0.2)
        at = threading.Thread(target=loop, daemon=True)
        at.start()
        # a deployed agent is programmed long before changes come: let it finish what a full
        # load leaves for its first idle moment (agent.warming) before the first change
        t_warm = time.perf_counter()
        while agent.warming and time.perf_counter() - t_warm < 60:
            time.sleep(0.01)
        warm_s = time.perf_counter() - t_warm
        routes4 = maps.maps["routes4"]
        lat = []
        done: list[tuple[float, int, float]] = []
        vpc_id = agent.rec.ids.vpcs["t0"] if agent.rec.ids else 0
        for i in range(changes):
            a = (30 << 24) + (i << 8)
            prefix = f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.0/24"
            key = vpc_id.to_bytes(4, "little") + (24).to_bytes(4, "little") + a.to_bytes(4, "big")
            t0 = time.perf_counter()
            answer = client.change_prefixes("p0", add=[prefix])
            while routes4.lookup(key) is None:
                time.sleep(0.0002)
            t1 = time.perf_counter()
            lat.append((t1 - t0) * 1000)
            done.append((t0, int(answer["revision"]), t1))
        stop.set()
        at.join(5)
        ceiling = _roundtrip(url, changes) if store_kind == "etcd" else []
        if server is not None:
            server.should_exit = True
        obj.close()
        return {"store": store_kind, "routes": routes, "hosts": hosts,
                "hosts_form": "compact" if compact_hosts else "verbose",
                "compile_s": round(compile_s, 3), "program_s": round(program_s, 3),
                "warm_s": round(warm_s, 3),
                "change_p50_ms": round(float(np.percentile(lat, 50)), 2),
                "change_p99_ms": round(float(np.percentile(lat, 99)), 2),
                "changes": changes, "controller": controller, "restart_s": round(restart_s, 3),
                "restart_writes": restart_writes,
                "store_commit_p50_ms": round(float(np.percentile(commits, 50)), 2),
                "store_commit_p99_ms": _p(commits, 99),
                "store_roundtrip_p50_ms": _p(ceiling, 50),
                "store_roundtrip_p99_ms": _p(ceiling, 99),
                "breakdown_ms": _breakdown(marks, done),
                "etcd_data": str(tmp) if store_kind == "etcd" else None,
                "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
                "kernel": os.uname().release}
    finally:
        if cproc is not None:
            local_etcd.stop(cproc)  # terminate, kill after 10 s: the same for any child
        if proc is not None:
            local_etcd.stop(proc, etcd_log)
        shutil.rmtree(pins, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
