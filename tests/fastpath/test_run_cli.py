"""`crosszone fastpath run`: a pcap through the real program, JSON per packet, rewritten pcap."""

from __future__ import annotations

import json

import pytest
from scapy.utils import rdpcap
from typer.testing import CliRunner

from crosszone import cli
from crosszone.fastpath.commands import fastpath_app
from crosszone_lab.sample_traffic import sample_frames, write_pcap

from packet_fixtures import EXAMPLE

assert cli.app  # reading it registers the lab's `run` on the fastpath group

runner = CliRunner()


def _run(*args):
    return runner.invoke(fastpath_app, ["run", *map(str, args)])


@pytest.fixture()
def pcap(tmp_path):
    path = tmp_path / "in.pcap"
    write_pcap(path)
    return path


def test_json_lines_and_output_pcap(pcap, tmp_path):
    out = tmp_path / "out.pcap"
    res = _run("--intent", EXAMPLE, "--pcap", pcap, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert [r["index"] for r in rows] == list(range(len(sample_frames())))
    assert all(set(r) == {"index", "verdict", "reason", "egress", "len"} for r in rows)
    first = rows[0]
    assert (first["verdict"], first["reason"], first["egress"]) == (
        "redirect",
        "fwd_to_storage",
        "storage0",
    )
    assert first["len"] == len(bytes(sample_frames()[0][1])) - 50
    verdicts = {r["verdict"] for r in rows}
    assert verdicts == {"redirect", "pass", "drop"}
    written = rdpcap(str(out))
    assert len(written) == sum(r["verdict"] in ("redirect", "tx") for r in rows)
    assert [len(p) for p in written] == [r["len"] for r in rows if r["egress"]]


def test_model_mode_gives_the_same_lines(pcap, tmp_path):
    kernel = _run(
        "--intent",
        EXAMPLE,
        "--pcap",
        pcap,
        "--out",
        tmp_path / "k.pcap",
        "--json",
        "--ingress",
        "storage0",
    )
    model = _run(
        "--intent",
        EXAMPLE,
        "--pcap",
        pcap,
        "--out",
        tmp_path / "m.pcap",
        "--json",
        "--ingress",
        "storage0",
        "--model",
    )
    assert kernel.exit_code == model.exit_code == 0
    assert kernel.output == model.output
    assert '"verdict": "tx"' in kernel.output  # storage traffic leaves through the ingress port
    assert (tmp_path / "k.pcap").read_bytes() == (tmp_path / "m.pcap").read_bytes()


def test_table_output(pcap, tmp_path):
    res = _run("--intent", EXAMPLE, "--pcap", pcap, "--out", tmp_path / "o.pcap")
    assert res.exit_code == 0
    assert "fwd_to_storage" in res.output and "100.64.1.10" in res.output


def test_bad_inputs_give_one_clear_error(pcap, tmp_path):
    res = _run("--intent", tmp_path / "missing.yaml", "--pcap", pcap, "--out", tmp_path / "o")
    assert res.exit_code == 2 and "cannot read" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("vni: 1002", "vni: 1001"))
    res = _run("--intent", bad, "--pcap", pcap, "--out", tmp_path / "o")
    assert res.exit_code == 2 and "vpcs[1].vni" in res.output and "bad.yaml:" in res.output
    res = _run("--intent", EXAMPLE, "--pcap", tmp_path / "nope.pcap", "--out", tmp_path / "o")
    assert res.exit_code == 2 and "no such file" in res.output
    res = _run("--intent", EXAMPLE, "--pcap", pcap, "--out", tmp_path / "o", "--ingress", "eth9")
    assert res.exit_code == 2 and "eth9" in res.output
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a pcap at all")
    res = _run("--intent", EXAMPLE, "--pcap", junk, "--out", tmp_path / "o")
    assert res.exit_code == 2 and "junk.pcap" in res.output


def _pcap_with(tmp_path, *frames: bytes):
    from scapy.utils import PcapWriter

    path = tmp_path / "odd.pcap"
    with PcapWriter(str(path), linktype=1, snaplen=262144) as w:
        w.write_header(None)
        for i, f in enumerate(frames):
            w.write_packet(f, sec=1_700_000_000 + i, usec=0)
    return path


@pytest.mark.parametrize("mode", [[], ["--model"]])
def test_runt_gets_a_verdict_and_the_run_goes_on(tmp_path, mode):
    """A 3-byte frame between valid ones: 'drop'/'kernel_runt' (a device drops it before XDP),
    and the frames after it still run, in both modes (issue 12, finding 13)."""
    valid = [bytes(p) for _, p in sample_frames()[:2]]
    pcap = _pcap_with(tmp_path, valid[0], b"\x01\x02\x03", valid[1])
    res = _run("--intent", EXAMPLE, "--pcap", pcap, "--out", tmp_path / "o.pcap", "--json", *mode)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert [(r["index"], r["verdict"], r["reason"]) for r in rows] == [
        (0, "redirect", "fwd_to_storage"),
        (1, "drop", "kernel_runt"),
        (2, "redirect", "fwd_to_storage"),
    ]
    assert rows[1]["len"] == 3 and rows[1]["egress"] is None
    assert len(rdpcap(str(tmp_path / "o.pcap"))) == 2


def test_frame_the_test_run_refuses_gets_a_verdict(gateway_object):
    """A frame longer than BPF_PROG_TEST_RUN builds from pages (ENOMEM; a pcap record stops at
    65535 bytes here, so the runner's step is called directly): 'drop'/'kernel_refused'."""
    from crosszone.fastpath.testing.testrun import TestRunner
    from crosszone_lab.pcap_run import _verdict

    from packet_fixtures import tables

    valid = bytes(sample_frames()[0][1])
    with TestRunner(tables(), gateway_object) as r:
        assert _verdict(valid + b"x" * 100_000, r, r.tables) == (None, "kernel_refused")
        res, reason = _verdict(valid, r, r.tables)
        assert res is not None and reason == "fwd_to_storage"
        assert _verdict(valid[:13], r, r.tables) == (None, "kernel_runt")
