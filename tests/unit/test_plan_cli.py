"""The plan, simulate and bench simulate commands: output, JSON, charts and user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from crosszone.plan.commands import register
from crosszone_lab.bench.commands import register as register_bench
from crosszone_lab.charts import register as register_charts

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CATALOG = str(ROOT / "examples" / "catalog.yaml")
RACK = str(ROOT / "examples" / "scenarios" / "rack.yaml")


@pytest.fixture(scope="module")
def app():
    app = typer.Typer()
    bench = typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    register_bench(app, bench)
    register_charts(app, bench)  # --chart's writers (the lab's; the product has the option)
    return app


def run(app, *args):
    return CliRunner().invoke(app, list(args))


def test_plan_json_published_figures(app):
    for demand, x86, tofino in (("1Tbps", 22, 1), ("2Tbps", 44, 2)):
        result = run(app, "plan", "--demand", demand, "--catalog", CATALOG, "--json")
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        by_name = {p["name"]: p for p in out["platforms"]}
        assert by_name["x86-software"]["devices"] == x86
        assert by_name["tofino-offload"]["devices"] == tofino
        assert "crosszone-xdp" in by_name


def test_plan_prints_the_cost_ratio_with_its_sources(app):
    """`plan --demand 2Tbps`: the seed case's comparison, 44 x86 against 2 offload gateways."""
    result = run(app, "plan", "--demand", "2Tbps", "--catalog", CATALOG)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        "Hardware cost against x86-software for 2,000 Gbps: 44 x 227,273 = 10,000,012 CNY" in lines
    )
    assert "  tofino-offload: 2 x 288,000 = 576,000 CNY, 5.8% of it (-94.2%)" in lines
    sources = lines[lines.index("Price sources:") + 1 :]
    assert sources[0].startswith("  x86-software: the seed case: 44 x86 gateways")
    assert "10M CNY" in sources[0]
    assert sources[1].startswith("  tofino-offload: estimate, no quote")


def test_plan_without_cost_baseline_prints_no_ratio(app, tmp_path):
    cat = tmp_path / "cat.yaml"
    cat.write_text(Path(CATALOG).read_text().replace("cost_baseline: x86-software\n", ""))
    result = run(app, "plan", "--demand", "2Tbps", "--catalog", str(cat))
    assert result.exit_code == 0, result.output
    assert "Hardware cost against" not in result.output


def test_plan_table_tables_and_chart(app, tmp_path):
    result = run(
        app,
        "plan",
        "--servers",
        "50",
        "--server-rate",
        "50Gbps",
        "--catalog",
        CATALOG,
        "--vpcs",
        "5000",
        "--routes",
        "10",
        "--hosts",
        "10",
        "--chart",
        str(tmp_path / "plan"),
    )
    assert result.exit_code == 0, result.output
    assert "tofino-offload" in result.output and "slow path" in result.output
    assert (tmp_path / "plan.png").stat().st_size > 1000
    assert (tmp_path / "plan.svg").read_text().startswith("<?xml")


def test_plan_with_fastpath_bench(app, tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(
        '{"scenario": "program_routes"}\n'
        '{"scenario": "ipv4_decap_1m_routes", "ns_per_pkt": 200.0}\n'
    )
    result = run(
        app,
        "plan",
        "--demand",
        "1Tbps",
        "--catalog",
        CATALOG,
        "--packet-mix",
        "64",
        "--fastpath-bench",
        str(bench),
        "--json",
    )
    assert result.exit_code == 0, result.output
    xdp = json.loads(result.output)["platforms"][2]
    assert xdp["capacity_limit"] == "cores"
    assert xdp["capacity_gbps_per_device"] == pytest.approx(16 * 1e9 / 200 * 512 / 1e9, rel=1e-3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--demand", "-1Tbps"), "--demand: must not be negative"),
        (("--demand", "2 parsecs"), "--demand: unknown rate unit"),
        (("--demand", "2000"), "has no unit"),
        ((), "--demand: missing"),
        (("--demand", "1Tbps", "--headroom", "-5%"), "--headroom: must not be negative"),
        (("--demand", "1Tbps", "--redundancy", "N-1"), "--redundancy"),
        (("--demand", "1Tbps", "--vpcs", "3"), "--routes: missing"),
        (("--demand", "1Tbps", "--vpcs", "-3", "--routes", "1", "--hosts", "1"), "vpcs: must not"),
        (("--demand", "1Tbps", "--catalog", "/nonexistent.yaml"), "/nonexistent.yaml: cannot read"),
        (("--demand", "1Tbps", "--fastpath-bench", "/nonexistent.jsonl"), "cannot read"),
        (("--demand", "1Tbps", "--intent", "/nonexistent.yaml"), "/nonexistent.yaml: cannot read"),
    ],
)
def test_plan_user_errors(app, args, message):
    full = ["plan", *args]
    if "--catalog" not in args:
        full += ["--catalog", CATALOG]
    result = run(app, *full)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_catalog_field_via_cli(app, tmp_path):
    bad = tmp_path / "cat.yaml"
    bad.write_text(Path(CATALOG).read_text().replace("    power_w: 800\n", "", 1))
    result = run(app, "plan", "--demand", "1Tbps", "--catalog", str(bad))
    assert result.exit_code == 2
    assert f"{bad}: platforms[1] (tofino-offload).power_w: required field is missing" in (
        result.output.replace("\n", "")
    )


def test_intent_counts(app):
    """--intent counts the example intent's tables: exit 0, and as many VPCs as the file has."""
    intent = ROOT / "examples" / "gateway.yaml"
    result = run(app, "plan", "--demand", "1Tbps", "--catalog", CATALOG, "--intent",
                 str(intent), "--json")
    assert result.exit_code == 0, result.output
    n_vpcs = len(yaml.safe_load(intent.read_text())["vpcs"])
    for platform in json.loads(result.output)["platforms"]:
        tables = platform["tables"]["tables"]  # the fit record; its "tables": per table
        assert tables["vpcs"]["needed"] == n_vpcs, platform
        assert tables["routes"]["needed"] > 0 and tables["hosts"]["needed"] > 0, platform


def test_intent_that_is_not_an_intent(app):
    """An emulator topology given as --intent is a user error: exit 2, one line, no traceback."""
    topo = ROOT / "examples" / "two-zone.yaml"
    result = run(app, "plan", "--demand", "1Tbps", "--catalog", CATALOG, "--intent", str(topo),
                 "--json")
    assert result.exit_code == 2, result.output
    assert f"{topo}" in result.output and "version" in result.output
    assert "Traceback" not in result.output


def test_simulate_json_and_chart(app, tmp_path):
    result = run(app, "simulate", RACK, "--json", "--chart", str(tmp_path / "sim"))
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["servers"] == 8 and len(out["tiers"]) == 2
    for tier in out["tiers"]:
        assert {
            "dataset_load_s",
            "checkpoint_stall_s",
            "small_delay_p99_us",
            "step_s",
            "training_s",
        } <= set(tier)
    assert (tmp_path / "sim.png").exists() and (tmp_path / "sim.svg").exists()


def test_simulate_table_and_errors(app, tmp_path):
    result = run(app, "simulate", RACK)
    assert result.exit_code == 0 and "crosszone-xdp" in result.output
    bad = tmp_path / "s.yaml"
    bad.write_text(Path(RACK).read_text().replace("servers: 8", "servers: -8"))
    result = run(app, "simulate", str(bad))
    assert result.exit_code == 2
    assert f"{bad}: cluster.servers:" in result.output.replace("\n", "")
    result = run(app, "simulate", "/nonexistent.yaml")
    assert result.exit_code == 2 and "cannot read" in result.output


def test_bench_simulate_small(app):
    result = run(app, "bench", "simulate", "--servers", "20", "--duration", "60s", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(text) for text in result.stdout.splitlines()]
    # One line per tier, each its own simulation of the whole cluster.
    assert [line["tier"] for line in lines] == ["x86 50G x 22", "tofino 1.6T x 1"]
    for line in lines:
        assert line["servers"] == 20 and line["simulated_s"] == 60
        assert line["flows"] > 0 and line["wall_s"] >= 0 and line["cpu_s"] >= 0
        assert line["flows_per_wall_s"] is None or line["flows_per_wall_s"] > 0
    result = run(app, "bench", "simulate", "--servers", "0", "--json")
    assert result.exit_code == 2
