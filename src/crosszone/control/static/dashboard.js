// crosszone dashboard: polls the controller's /v1/dashboard every 2 s and draws it.
// Talks to no host but the one that served the page. Data is put in the page with
// textContent only (names in the store are not trusted to be HTML).
"use strict";

const POLL_MS = 2000;
const WINDOW_S = 300;
const COLOURS = ["#2f7ed8", "#e4572e", "#17a398", "#8e44ad", "#f2a541", "#5d6d7e",
                 "#c0392b", "#27ae60", "#d35400", "#1abc9c"];
const charts = {};   // id -> {plot, keys}
let token = sessionStorage.getItem("crosszone-token") || "";
let chartsLoading = false;

function authHeaders() {
  return token ? {Authorization: `Bearer ${token}`} : {};
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function fmt(v, digits) {
  if (v === null || v === undefined) return "–";
  return Number(v).toLocaleString("en-US", {maximumFractionDigits: digits,
                                             minimumFractionDigits: digits});
}

function last(values) {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
  return null;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function sessionCell(s) {
  if (!s) return el("td", {class: "muted"}, "–");
  const cls = s.total > 0 && s.up === s.total ? "ok" : "bad";
  const td = el("td", {class: cls}, `${s.up}/${s.total} up`);
  td.title = Object.entries(s.peers).map(([p, up]) => `${p} ${up ? "up" : "down"}`).join("\n");
  return td;
}

function drawGateways(doc) {
  document.getElementById("revision").textContent = `desired revision ${doc.desired_revision}`;
  replaceRows(document.querySelector("#gateways tbody"), doc.gateways.map((g) => {
    const tr = el("tr", {"data-gateway": g.name});
    tr.append(el("td", {}, g.name));
    tr.append(el("td", {class: g.health === "ok" ? "ok" : "bad", "data-field": "health"},
                 g.health));
    tr.append(el("td", {class: g.in_sync ? "ok" : "warn", "data-field": "revision"},
                 g.revision === null ? "–" : `${g.revision}${g.in_sync ? "" : " (behind)"}`));
    tr.append(sessionCell(g.bgp));
    tr.append(sessionCell(g.bfd));
    if (g.attached) {
      const devs = Object.entries(g.attached);
      const on = devs.filter(([, a]) => a).map(([d]) => d);
      tr.append(el("td", {class: on.length ? "ok" : "bad", "data-field": "attached"},
                   on.length ? `attached (${on.join(", ")})` : "not attached"));
    } else {
      tr.append(el("td", {class: "muted", "data-field": "attached"}, "–"));
    }
    tr.append(el("td", {class: g.scraped === false ? "bad" : "muted"},
                 g.scraped === null ? "–" : (g.scraped ? "scraped" : "down")));
    tr.append(el("td", {}, g.message));
    return tr;
  }));
}

function drawVpcs(doc) {
  const rows = {};
  const put = (series, field, scale) => {
    for (const s of series) {
      rows[s.vpc] = rows[s.vpc] || {};
      rows[s.vpc][`${s.direction}.${field}`] = last(s.values) === null ? null
        : last(s.values) / scale;
    }
  };
  put(doc.series.vpc_bits, "gbps", 1e9);
  put(doc.series.vpc_packets, "pps", 1);
  replaceRows(document.querySelector("#vpcs tbody"), Object.keys(rows).sort().map((vpc) => {
    const tr = el("tr", {"data-vpc": vpc});
    tr.append(el("td", {}, vpc));
    for (const [key, digits] of [["to_storage.gbps", 3], ["to_compute.gbps", 3],
                                 ["to_storage.pps", 0], ["to_compute.pps", 0]]) {
      const v = rows[vpc][key];
      tr.append(el("td", {class: "num", "data-field": key, "data-value": v ?? ""},
                   fmt(v, digits)));
    }
    return tr;
  }));
}

// The latest value of each (series[label], class) of the given series: [[series, field, scale]].
function pivot(doc, label, fields) {
  const rows = {};
  for (const [series, field, scale] of fields) {
    for (const s of doc.series[series] || []) {
      const key = `${s[label]}\u0000${s["class"]}`;
      rows[key] = rows[key] || {[label]: s[label], cls: s["class"]};
      rows[key][field] = last(s.values) === null ? null : last(s.values) / scale;
    }
  }
  return rows;
}

function numCell(field, value, digits, bad) {
  return el("td", {class: bad ? "num bad" : "num", "data-field": field, "data-value": value ?? ""},
            fmt(value, digits));
}

// The traffic policy per VPC and class (small | bulk): so an operator sees which class pays.
function drawClasses(doc) {
  const rows = pivot(doc, "vpc", [["class_bits", "mbps", 1e6], ["class_packets", "pps", 1]]);
  const drops = {};
  for (const s of doc.series.rate_drops || []) drops[s.vpc] = last(s.values);
  replaceRows(document.querySelector("#classes tbody"), Object.keys(rows).sort().map((k) => {
    const r = rows[k];
    const d = drops[r.vpc] ?? null;
    const tr = el("tr", {"data-vpc": r.vpc, "data-class": r.cls});
    tr.append(el("td", {}, r.vpc), el("td", {}, r.cls), numCell("mbps", r.mbps, 3),
              numCell("pps", r.pps, 0), numCell("rate_drops", d, 1, d));
    return tr;
  }));
}

// The shaped queues per port group and class (small | default | bulk), where something
// exports queue counters (the emulator's queue exporter, a switch): hidden otherwise.
const QUEUE_CLASS_ORDER = {small: 0, default: 1, bulk: 2};

function drawQueues(doc) {
  const rows = pivot(doc, "group", [["queue_bits", "mbps", 1e6], ["queue_drops", "drops", 1],
                                    ["queue_backlog", "backlog_kib", 1024]]);
  const order = (r) => [r.group, QUEUE_CLASS_ORDER[r.cls] ?? 3, r.cls];
  const sorted = Object.values(rows).sort((a, b) => {
    const x = order(a), y = order(b);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  });
  document.getElementById("queues-section").hidden = sorted.length === 0;
  replaceRows(document.querySelector("#queues tbody"), sorted.map((r) => {
    const tr = el("tr", {"data-group": r.group, "data-class": r.cls});
    tr.append(el("td", {}, r.group), el("td", {}, r.cls), numCell("mbps", r.mbps, 3),
              numCell("drops", r.drops, 1, r.drops), numCell("backlog_kib", r.backlog_kib, 1));
    return tr;
  }));
}

function drawReasons(doc) {
  if (!doc.series.verdicts.length) {
    const tr = el("tr", {});
    tr.append(el("td", {colspan: "3", class: "muted"}, "no drop or pass in the window"));
    replaceRows(document.querySelector("#reasons tbody"), [tr]);
    return;
  }
  replaceRows(document.querySelector("#reasons tbody"), doc.series.verdicts.map((s) => {
    const v = last(s.values);
    const tr = el("tr", {"data-reason": s.reason, "data-verdict": s.verdict});
    tr.append(el("td", {class: s.verdict === "drop" ? "bad" : "muted"}, s.verdict));
    tr.append(el("td", {}, s.reason));
    tr.append(el("td", {class: "num", "data-value": v ?? ""}, fmt(v, 1)));
    return tr;
  }));
}

// One uPlot chart per panel; rebuilt when its set of series changes (a new drop reason),
// otherwise only its data is replaced.
function drawChart(id, doc, series, label, scale) {
  const box = document.getElementById(id);
  // From the first step any series has a value: a young deployment fills the chart's width.
  const n = doc.series.points;
  let first = n - 1;
  for (const s of series) {
    const i = s.values.findIndex((v) => v !== null);
    if (i >= 0 && i < first) first = i;
  }
  first = Math.max(0, Math.min(first, n - 30));
  const xs = Array.from({length: n - first}, (_, i) => doc.series.start
                        + (first + i) * doc.series.step);
  const keys = series.map(label);
  const data = [xs, ...series.map((s) => s.values.slice(first)
    .map((v) => v === null ? null : v / scale))];
  const have = charts[id];
  if (have && have.keys.join("\n") === keys.join("\n")) {
    have.plot.setData(data);
    return;
  }
  if (have) have.plot.destroy();
  const opts = {
    width: Math.max(box.clientWidth - 10, 300), height: 220,
    series: [{}, ...keys.map((k, i) => ({label: k, stroke: COLOURS[i % COLOURS.length],
                                          width: 1.5, spanGaps: false}))],
    axes: [{}, {size: 80}], legend: {live: false}, cursor: {drag: {x: false, y: false}},
  };
  charts[id] = {plot: new uPlot(opts, data, box), keys};
}

function drawMigration(doc) {
  const m = doc.migration;
  const box = document.getElementById("migration");
  if (!m || m.state === "none") {
    box.replaceChildren(el("p", {class: "muted", "data-state": "none"}, "no migration"));
    return;
  }
  const parts = [];
  const head = el("p", {"data-state": m.state});
  head.append(el("strong", {}, m.state));
  head.append(document.createTextNode(
    `, step ${m.step ?? "–"}, ${fmt(m.weight_new ?? 0, 0)} % on the new gateways`));
  parts.push(head);
  const bar = el("div", {class: "bar"});
  const fill = el("div", {});
  // weight_new is in percent (the migration engine's unit), 0..100
  fill.style.width = `${Math.max(0, Math.min(100, Number(m.weight_new) || 0))}%`;
  bar.append(fill);
  parts.push(bar);
  if (Array.isArray(m.guards) && m.guards.length) {
    const t = el("table", {id: "guards"});
    t.append(el("tr", {}));
    t.firstChild.append(el("th", {}, "guard"), el("th", {}, "value"), el("th", {}, "limit"),
                        el("th", {}, ""));
    for (const g of m.guards) {
      const tr = el("tr", {"data-guard": g.name});
      tr.append(el("td", {}, g.name), el("td", {class: "num"}, g.value),
                el("td", {class: "num"}, g.limit),
                el("td", {class: g.ok ? "ok" : "bad"}, g.ok ? "ok" : "tripped"));
      t.append(tr);
    }
    parts.push(t);
  }
  if (Array.isArray(m.history) && m.history.length) {
    const ul = el("ol", {id: "history"});
    for (const h of m.history.slice(-10)) {
      const when = h.t ? new Date(h.t * 1000).toLocaleTimeString() : "";
      ul.append(el("li", {"data-step": h.step ?? ""}, `${when} ${h.event} step ${h.step ?? "–"} `
        + `(${fmt(h.weight_new ?? 0, 0)} %)${h.reason ? `: ${h.reason}` : ""}`));
    }
    parts.push(ul);
  }
  box.replaceChildren(...parts);
}

// The charts are fetched like the data, with the token when there is one (an <img src>
// request cannot carry it, so with `--reads token` they never showed), and shown from blob:
// URLs. A chart the controller refuses shows its name and the status instead.
async function drawCharts(doc) {
  const box = document.getElementById("charts");
  const shown = [...box.querySelectorAll("img")].map((i) => i.dataset.name).join("\n");
  if (chartsLoading || !doc.charts.length || shown === doc.charts.join("\n")) return;
  chartsLoading = true;
  try {
    const imgs = [];
    for (const name of doc.charts) {
      const r = await fetch(`/dashboard/charts/${encodeURIComponent(name)}`,
                            {headers: authHeaders(), cache: "no-store"});
      imgs.push(r.ok ? el("img", {src: URL.createObjectURL(await r.blob()), alt: name,
                                  "data-name": name})
                     : el("img", {alt: `${name} (HTTP ${r.status})`, "data-name": name}));
    }
    for (const old of box.querySelectorAll("img")) {
      if (old.src) URL.revokeObjectURL(old.src);
    }
    box.replaceChildren(...imgs);
  } finally {
    chartsLoading = false;
  }
}

function draw(doc) {
  drawGateways(doc);
  drawVpcs(doc);
  drawClasses(doc);
  drawQueues(doc);
  drawReasons(doc);
  const vpcLabel = (s) => `${s.vpc} ${s.direction}`;
  drawChart("chart-bits", doc, doc.series.vpc_bits, vpcLabel, 1e9);
  drawChart("chart-packets", doc, doc.series.vpc_packets, vpcLabel, 1);
  drawChart("chart-verdicts", doc, doc.series.verdicts, (s) => `${s.verdict} ${s.reason}`, 1);
  drawMigration(doc);
  drawCharts(doc).catch((err) => console.warn("charts:", err));
  const p = doc.prometheus;
  document.getElementById("prometheus").textContent = p.ok ? `rates from ${p.url}`
    : `no rates: ${p.error}`;
  document.getElementById("updated").textContent =
    `updated ${new Date(doc.time * 1000).toLocaleTimeString()}`;
  document.body.dataset.updated = String(doc.time);
}

// Every POLL_MS from the start of the previous request (not from its end), so a slow answer
// does not stretch the period.
async function poll() {
  const started = Date.now();
  try {
    const r = await fetch(`/v1/dashboard?window=${WINDOW_S}`,
                          {headers: authHeaders(), cache: "no-store"});
    if (r.status === 401) {
      document.getElementById("login").hidden = false;
      document.getElementById("updated").textContent = "token needed";
    } else if (r.ok) {
      document.getElementById("login").hidden = true;
      draw(await r.json());
    } else {
      document.getElementById("updated").textContent = `controller answered ${r.status}`;
    }
  } catch (err) {
    document.getElementById("updated").textContent = `controller unreachable (${err})`;
  }
  setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = document.getElementById("token").value.trim();
  sessionStorage.setItem("crosszone-token", token);
});
poll();
