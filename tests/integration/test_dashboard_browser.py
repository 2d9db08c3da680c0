"""The dashboard in a real browser (headless Chromium through selenium) against a running
emulation: its controller, its agents and its Prometheus (all started by `emulate up`).

While traffic flows through the crosszone gateways the per-VPC figures move; a drop reason
appears within seconds of sending bad packets; a migration step written to the store shows up;
and over the whole session the page asks nothing of any host but the controller. Screenshots go
to $CROSSZONE_SCREENSHOT_DIR (docs/img when refreshing the README's), else a temporary dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from emulate_helpers import require, sh

from crosszone.store.store import open_store
from crosszone_lab.emulate import deploy, topology
from crosszone_lab.workload import runner

from browser import chromium, foreign, requested_urls, wait_for

BAD_VNI = 0xABCDE  # no VPC has it: the fast path drops these frames by reason

BAD_PACKETS = """
import socket, struct, time
# ten sockets, ten source ports: every gateway of the ECMP set sees some of the frames
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(10)]
vxlan = struct.pack("!II", 0x08000000, {vni} << 8)   # I flag, VNI in the upper 24 bits
inner = bytes.fromhex("020000000001020000000002" "0800") + bytes(46)
started = False
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    for s in socks:
        s.sendto(vxlan + inner, ({vtep!r}, 4789))
    if not started:
        print("sending", flush=True)   # the test's clock starts at the first frame
        started = True
    time.sleep(0.01)
"""


def _status() -> dict[str, Any]:
    out = sh(sys.executable, "-m", "crosszone.cli", "emulate", "status", "--json")
    doc: dict[str, Any] = json.loads(out)
    return doc


def _cells(driver: Any, css: str) -> list[dict[str, str]]:
    """The data attributes of the cells the selector finds (one round trip)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => ({...e.dataset,"
        " row: JSON.stringify(e.closest('tr') ? e.closest('tr').dataset : {})}))", css)


def _vpc_rates(driver: Any) -> dict[str, float]:
    """'vpc direction.unit' -> value now, from the per-VPC table."""
    out = {}
    for c in _cells(driver, "#vpcs td[data-field]"):
        if c.get("value"):
            out[f"{json.loads(c['row'])['vpc']} {c['field']}"] = float(c["value"])
    return out


def _drops(driver: Any) -> dict[str, float]:
    """Drop reason -> packets/s now, from the reasons table."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#reasons tr[data-verdict=drop]')].map("
        "r => [r.dataset.reason, r.querySelector('[data-value]').dataset.value])")
    return {reason: float(v) for reason, v in rows if v}


def _drops_json(ctl: str, before: dict[str, float]) -> bool:
    """Whether the controller's /v1/dashboard has a drop reason above zero not in `before`."""
    try:
        doc = httpx.get(f"{ctl}/v1/dashboard", params={"window": 30}, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    return any(s["verdict"] == "drop" and before.get(s["reason"], 0) == 0
               and any(v for v in s["values"][-3:] if v) for s in doc["series"]["verdicts"])


def _screenshot(driver: Any, name: str, tmp_path: Path) -> Path:
    where = Path(os.environ.get("CROSSZONE_SCREENSHOT_DIR") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    path = where / name
    driver.save_screenshot(str(path))
    return path


def _traffic(dep: deploy.Deployment, seconds: float, results: list[Any]) -> threading.Thread:
    t = threading.Thread(target=lambda: results.append(runner.run(
        topology.workload_targets(dep.plan), duration=seconds, loaders=1)), daemon=True)
    t.start()
    return t


def test_dashboard_in_a_browser(deployment: deploy.Deployment, tmp_path: Path) -> None:
    require(deployment, "crosszone")
    deployment.switch("crosszone")
    status = _status()
    ctl = status["controller"]["url"]
    assert status["prometheus"]["running"] and status["prometheus"]["url"].startswith(
        "http://127.0.0.1:")
    charts = Path(status["dashboard"]["charts"])
    sh(sys.executable, "-m", "crosszone.cli", "plan", "--demand", "2Tbps", "--chart",
       str(charts / "plan"), timeout=120)
    crosszone_gws = [g.name for g in deployment.plan.gateways_of("crosszone")]
    figures: dict[str, float] = {}
    with chromium() as driver:
        driver.get(f"{ctl}/dashboard")

        def gateways_ready() -> bool:
            rows = {r["gateway"]: r for r in driver.execute_script(
                "return [...document.querySelectorAll('#gateways tr[data-gateway]')].map(r =>"
                " ({gateway: r.dataset.gateway, text: r.innerText}))")}
            return all(g in rows and "ok" in rows[g]["text"] and "attached" in rows[g]["text"]
                       and "up" in rows[g]["text"] for g in crosszone_gws)

        wait_for("every crosszone gateway ok, attached, sessions up", gateways_ready, 30)
        row = driver.find_element("css selector",
                                  f"#gateways tr[data-gateway='{crosszone_gws[0]}']")
        assert "not attached" not in row.text and "0/" not in row.text, row.text

        # ---- figures move while traffic flows ----
        done: list[Any] = []
        flow = _traffic(deployment, 25.0, done)
        t_traffic = time.monotonic()
        first = wait_for("per-VPC rates above zero",
                         lambda: {k: v for k, v in _vpc_rates(driver).items() if v > 0}, 20)
        t0 = time.monotonic()
        second = wait_for("per-VPC rates that change",
                          lambda: (r := _vpc_rates(driver)) and any(
                              r.get(k) not in (None, v) for k, v in first.items()) and r, 15)
        figures["rates_moved_after_s"] = round(time.monotonic() - t0, 1)
        gbps = max(v for k, v in second.items() if k.endswith("gbps"))
        assert gbps > 0
        figures["vpc_gbps_max_seen"] = round(gbps, 3)
        wait_for("the per-VPC chart drawn", lambda: driver.execute_script(
            "return document.querySelectorAll('#chart-bits canvas').length > 0"), 10)
        time.sleep(max(0.0, t_traffic + 16 - time.monotonic()))  # a chart worth a look
        _screenshot(driver, "dashboard.png", tmp_path)
        flow.join(40)
        assert done and not done[0].errors, "the workload failed"

        # ---- a drop reason appears within seconds of bad packets ----
        before = _drops(driver)
        vtep = str(deployment.plan.spec.anycast_vtep)
        sender = subprocess.Popen(
            ["ip", "netns", "exec", deployment.plan.hosts[0].ns, sys.executable, "-c",
             BAD_PACKETS.format(vni=BAD_VNI, seconds=12, vtep=vtep)], stdout=subprocess.PIPE,
            text=True)
        assert sender.stdout is not None and sender.stdout.readline().strip() == "sending"
        t0 = time.monotonic()
        seen: dict[str, float] = {}  # where -> seconds after the first bad frame

        def shown() -> dict[str, float]:
            if "controller" not in seen and _drops_json(ctl, before):
                seen["controller"] = time.monotonic() - t0
            found = {r: v for r, v in _drops(driver).items() if v > 0 and before.get(r, 0) == 0}
            if found:
                seen["page"] = time.monotonic() - t0
            return found

        try:
            new = wait_for("a drop reason for the bad packets", shown, 15)
        finally:
            sender.wait(20)
        figures["drop_reason_on_page_after_s"] = round(seen["page"], 1)
        if "controller" in seen:  # the controller's JSON, polled by the test directly
            figures["drop_reason_in_controller_json_after_s"] = round(seen["controller"], 1)
        assert set(new) & {"drop_unknown_vni", "drop_vtep_not_allowed"}, new
        _screenshot(driver, "dashboard-drops.png", tmp_path)

        # ---- a migration step shows up ----
        store = open_store(status["controller"]["store"])
        now = time.time()
        record = {"state": "shifting", "step": 2, "weight_new": 25,  # percent, as the engine
                  "history": [{"t": now - 8, "event": "start", "step": 0, "weight_new": 0,
                               "reason": "canary address proven"},
                              {"t": now, "event": "step", "step": 2, "weight_new": 25,
                               "reason": "guards held for 30 s"}],
                  "guards": [{"name": "lost_packets", "value": 0, "limit": 0, "ok": True},
                             {"name": "bfd_down", "value": 0, "limit": 0, "ok": True}]}
        try:
            store.put("migration/state", json.dumps(record).encode())
        finally:
            store.close()
        t0 = time.monotonic()
        wait_for("the migration step on the page", lambda: driver.execute_script(
            "const m = document.querySelector('#migration [data-state=shifting]');"
            "return m && m.innerText.includes('step 2, 25 % on the new gateways') && "
            "document.querySelectorAll('#history li[data-step=\"2\"]').length === 1"), 10)
        figures["migration_step_shown_after_s"] = round(time.monotonic() - t0, 1)
        assert driver.find_elements("css selector", "#guards tr[data-guard=lost_packets]")
        wait_for("the plan chart", lambda: driver.execute_script(
            "const i = document.querySelector('#charts img[data-name=\"plan.svg\"]');"
            "return i && i.complete && i.naturalWidth > 0"), 10)
        _screenshot(driver, "dashboard-migration.png", tmp_path)

        # ---- the page asked nothing of any other host ----
        urls = requested_urls(driver)
        assert any(u.endswith("/v1/dashboard?window=300") for u in urls)
        assert foreign(urls, ctl) == [], foreign(urls, ctl)

    # the terminal view reads the same figures
    top = sh(sys.executable, "-m", "crosszone.cli", "top", "--once", "--controller", ctl)
    assert "shifting, step 2" in top and "drop_unknown_vni" in top
    prom = status["prometheus"]["url"]
    rules = httpx.get(f"{prom}/api/v1/rules", timeout=5).json()["data"]["groups"]
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    print(json.dumps({"bench": "dashboard_browser", **figures}))

