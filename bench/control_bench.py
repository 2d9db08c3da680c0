"""Control-plane benchmark: same as `crosszone bench control --json` (prints JSON lines)."""

import sys

from crosszone.control.bench import run

if __name__ == "__main__":
    routes = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    hosts = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    import json

    for kind in ("sqlite", "etcd"):
        print(json.dumps(run(kind, routes, hosts, 200)), flush=True)
