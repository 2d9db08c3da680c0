"""`crosszone top`: the dashboard's live figures in a terminal, for operators on SSH.

It polls the same `GET /v1/dashboard` the browser polls and draws it with rich: gateways
(health, revision, BGP, BFD, fast path), per-VPC Gbit/s and packets/s in both directions, per
traffic class of the policy Mbit/s and packets/s (and each VPC's rate drops), per class of the
shaped queues Mbit/s, drops/s and backlog (only where something exports queue counters), drops
and passes by reason, and the migration's step, weight and guards. Names and messages from the
store are escaped (rich.markup.escape) or put in Text objects, never read as markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from crosszone.control.dashboard import latest, weight_share


def _sessions(s: dict[str, Any] | None) -> Text:
    if not s:
        return Text("-", style="dim")
    ok = s["total"] > 0 and s["up"] == s["total"]
    return Text(f"{s['up']}/{s['total']} up", style="green" if ok else "bold red")


def _attached(a: dict[str, bool] | None) -> Text:
    if a is None:
        return Text("-", style="dim")
    on = [d for d, v in a.items() if v]
    return Text(f"attached ({', '.join(on)})" if on else "not attached",
                style="green" if on else "bold red")


def gateway_table(doc: dict[str, Any]) -> Table:
    """One row per gateway."""
    t = Table(title=escape(f"gateways (desired revision {doc.get('desired_revision')})"),
              title_justify="left")
    for col in ("gateway", "health", "revision", "BGP", "BFD", "fast path", "message"):
        t.add_column(col)
    for g in doc["gateways"]:
        rev = "-" if g["revision"] is None else str(g["revision"])
        t.add_row(escape(str(g["name"])),
                  Text(str(g["health"]), style="green" if g["health"] == "ok" else "red"),
                  Text(rev if g["in_sync"] else f"{rev} (behind)",
                       style="" if g["in_sync"] else "yellow"),
                  _sessions(g["bgp"]), _sessions(g["bfd"]), _attached(g["attached"]),
                  escape(str(g["message"])))
    return t


def vpc_rows(doc: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """vpc -> {"to_storage.gbps", "to_compute.gbps", "to_storage.pps", "to_compute.pps"}."""
    rows: dict[str, dict[str, float | None]] = {}
    for key, unit, scale in (("vpc_bits", "gbps", 1e9), ("vpc_packets", "pps", 1.0)):
        for s in latest(doc["series"][key]):
            v = s["value"]
            rows.setdefault(s["vpc"], {})[f"{s['direction']}.{unit}"] = (
                None if v is None else v / scale)
    return rows


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def vpc_table(doc: dict[str, Any]) -> Table:
    """Per VPC, now: Gbit/s and packets/s, both directions."""
    t = Table(title="per VPC, now", title_justify="left")
    t.add_column("VPC")
    cols = (("to_storage.gbps", "to storage Gbps", 3), ("to_compute.gbps", "to compute Gbps", 3),
            ("to_storage.pps", "to storage pps", 0), ("to_compute.pps", "to compute pps", 0))
    for _, title, _ in cols:
        t.add_column(title, justify="right")
    for vpc, row in sorted(vpc_rows(doc).items()):
        t.add_row(escape(str(vpc)), *(_num(row.get(k), d) for k, _, d in cols))
    return t


def _pivot(doc: dict[str, Any], label: str, fields: tuple[tuple[str, str, float], ...]
           ) -> dict[tuple[str, str], dict[str, float | None]]:
    """(series[label], series["class"]) -> {field: latest value / scale} for each (series key,
    field, scale) in `fields`."""
    rows: dict[tuple[str, str], dict[str, float | None]] = {}
    for key, field, scale in fields:
        for s in latest(doc["series"].get(key, [])):
            v = s["value"]
            rows.setdefault((s[label], s["class"]), {})[field] = None if v is None else v / scale
    return rows


def class_rows(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, float | None]]:
    """(vpc, class) -> {"mbps", "pps", "rate_drops"} of the traffic policy, now (rate drops are
    the VPC's, whatever the class: shown on each of its rows)."""
    rows = _pivot(doc, "vpc", (("class_bits", "mbps", 1e6), ("class_packets", "pps", 1.0)))
    drops = {s["vpc"]: s["value"] for s in latest(doc["series"].get("rate_drops", []))}
    for (vpc, _), row in rows.items():
        row["rate_drops"] = drops.get(vpc)
    return rows


def class_table(doc: dict[str, Any]) -> Table:
    """Per VPC and traffic class, now: what the policy marked (so an operator sees which class
    pays), and the VPC's rate drops."""
    t = Table(title="per traffic class, now", title_justify="left")
    for col, j in (("VPC", "left"), ("class", "left"), ("Mbit/s", "right"),
                   ("packets/s", "right"), ("VPC rate drops/s", "right")):
        t.add_column(col, justify=j)  # type: ignore[arg-type]
    for (vpc, cls), row in sorted(class_rows(doc).items()):
        drops = row.get("rate_drops")
        t.add_row(escape(str(vpc)), escape(str(cls)), _num(row.get("mbps"), 3),
                  _num(row.get("pps"), 0),
                  Text(_num(drops, 1), style="red" if drops else ""))
    return t


#: the queues' classes in the order they are served (strict priority); other names after
QUEUE_CLASS_ORDER = {"small": 0, "default": 1, "bulk": 2}


def queue_rows(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, float | None]]:
    """(group, class) -> {"mbps", "drops", "backlog_kib"} of the shaped queues, now (empty when
    nothing exports queue counters)."""
    return _pivot(doc, "group", (("queue_bits", "mbps", 1e6), ("queue_drops", "drops", 1.0),
                                 ("queue_backlog", "backlog_kib", 1024.0)))


def queue_table(doc: dict[str, Any]) -> Table | None:
    """Per port group and queue class, now: what each class sends, drops and holds at the
    shaped queues; None when nothing exports queue counters."""
    rows = queue_rows(doc)
    if not rows:
        return None
    t = Table(title="queues per class, now", title_justify="left")
    for col, j in (("group", "left"), ("class", "left"), ("Mbit/s", "right"),
                   ("drops/s", "right"), ("backlog KiB", "right")):
        t.add_column(col, justify=j)  # type: ignore[arg-type]
    order = sorted(rows, key=lambda k: (k[0], QUEUE_CLASS_ORDER.get(k[1], 3), k[1]))
    for group, cls in order:
        row = rows[(group, cls)]
        drops = row.get("drops")
        t.add_row(escape(str(group)), escape(str(cls)), _num(row.get("mbps"), 3),
                  Text(_num(drops, 1), style="red" if drops else ""),
                  _num(row.get("backlog_kib"), 1))
    return t


def reason_table(doc: dict[str, Any]) -> Table:
    """Drops and passes by reason, packets/s now."""
    t = Table(title="drops and passes by reason", title_justify="left")
    for col, j in (("verdict", "left"), ("reason", "left"), ("packets/s", "right")):
        t.add_column(col, justify=j)  # type: ignore[arg-type]
    for s in latest(doc["series"]["verdicts"]):
        t.add_row(Text(str(s["verdict"]), style="red" if s["verdict"] == "drop" else "dim"),
                  escape(str(s["reason"])), _num(s["value"], 1))
    return t


def migration_text(doc: dict[str, Any]) -> Text:
    """One line for the migration, plus its guards."""
    m = doc["migration"]
    if m.get("state") in (None, "none"):
        return Text("migration: none", style="dim")
    w = min(1.0, max(0.0, weight_share(m) or 0.0))  # the record holds percent
    bar = "#" * round(20 * w) + "." * (20 - round(20 * w))
    text = Text(f"migration: {m['state']}, step {m.get('step', '-')} [{bar}] "
                f"{w * 100:.0f} % on the new gateways")
    guards = m.get("guards")
    for g in (x for x in (guards if isinstance(guards, list) else []) if isinstance(x, dict)):
        text.append(f"\n  guard {g.get('name')}: {g.get('value')} (limit {g.get('limit')}) ",
                    style="")
        text.append("ok" if g.get("ok") else "TRIPPED", style="green" if g.get("ok") else "red")
    return text


def render(doc: dict[str, Any]) -> Group:
    """The whole screen for one dashboard document."""
    p = doc["prometheus"]
    head = Text(f"rates from {p['url']}" if p["ok"] else f"no rates: {p['error']}",
                style="dim" if p["ok"] else "yellow")
    queues = queue_table(doc)
    return Group(head, gateway_table(doc), vpc_table(doc), class_table(doc),
                 *([queues] if queues is not None else []), reason_table(doc),
                 migration_text(doc))
