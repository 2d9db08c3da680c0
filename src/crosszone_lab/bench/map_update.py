"""Benchmark: writing 1M entries into a BPF hash map from Python through the ctypes libbpf binding.

Prints one JSON line per method: update_batch (BATCH_CHUNK entries per bpf_map_update_batch
syscall), the per-entry ctypes loop that update_batch falls back to, and the baseline of one
BpfMap.update() call per entry, each measured in this run on a fresh map, with the ratio to the
baseline. Keys are 12 bytes (a flow key), values 8 bytes. Needs root.

    .venv/bin/python -m crosszone_lab.bench.map_update [--entries N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import time
from collections.abc import Callable

from crosszone.fastpath.libbpf import BATCH_CHUNK, BpfMap, MapType, possible_cpus


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run(name: str, n: int, write: Callable[[BpfMap], None]) -> float:
    m = BpfMap.create(MapType.HASH, 12, 8, n, name="czbench")
    try:
        t = time.perf_counter()
        write(m)
        seconds = time.perf_counter() - t
        probe = struct.pack("<IIHH", n - 1, (n - 1) ^ 0x5A5A5A5A, (n - 1) & 0xFFFF, 4789)
        assert m.lookup(probe) == struct.pack("<Q", n - 1), f"{name}: last entry missing"
        return seconds
    finally:
        m.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    n = ap.parse_args().entries
    keys = [struct.pack("<IIHH", i, i ^ 0x5A5A5A5A, i & 0xFFFF, 4789) for i in range(n)]
    vals = [struct.pack("<Q", i) for i in range(n)]

    def batch(m: BpfMap) -> None:
        m.update_batch(keys, vals)

    def ctypes_loop(m: BpfMap) -> None:
        m.use_batch_syscall = False  # the path taken for map types without batch ops
        m.update_batch(keys, vals)

    def single(m: BpfMap) -> None:
        upd = m.update
        for k, v in zip(keys, vals, strict=True):
            upd(k, v)

    conditions = {
        "kernel": platform.release(),
        "cpu": cpu_model(),
        "possible_cpus": possible_cpus(),
        "key_size": 12,
        "value_size": 8,
        "chunk": BATCH_CHUNK,
        "python": platform.python_version(),
        "pid": os.getpid(),
    }
    base = run("single", n, single)
    results = [
        ("hash_update_batch", run("batch", n, batch)),
        ("hash_update_batch_fallback_loop", run("loop", n, ctypes_loop)),
        ("hash_update_single", base),
    ]
    for bench, seconds in results:
        line = {
            "bench": bench,
            "entries": n,
            "seconds": round(seconds, 4),
            "entries_per_s": round(n / seconds),
            "speedup_vs_single": round(base / seconds, 2),
            **conditions,
        }
        print(json.dumps(line))


if __name__ == "__main__":
    main()
