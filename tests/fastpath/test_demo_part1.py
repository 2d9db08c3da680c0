"""The demo's part 1 runs each sample frame in on the port it would arrive on, so the storage
replies are translated back and wrapped in VXLAN (they were refused as arriving on the compute
port, against what the demo's closing line says)."""

from __future__ import annotations

import os

import pytest
from rich.console import Console

from crosszone_lab.demo import fastpath_demo
from crosszone_lab.sample_traffic import ingress_of, sample_frames

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root")


def test_every_sample_frame_gets_the_verdict_of_its_port() -> None:
    console = Console(record=True, width=250)
    assert fastpath_demo(console) == len(sample_frames())
    text = console.export_text()
    replies = [ln for ln in text.splitlines() if "storage replies" in ln]
    assert len(replies) == 3
    assert all("redirect" in ln and "fwd_to_compute" in ln for ln in replies), replies
    assert "drop_reply_wrong_port" not in text
    assert {ingress_of(p) for _, p in sample_frames()} == {"compute0", "storage0"}
