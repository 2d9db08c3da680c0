"""The fake map backend against the kernel's: the same tables programmed through the one path
into a loaded object's maps and into fakes of the same object read back byte for byte equal."""

from __future__ import annotations

import pytest

from crosszone.abi.objects import BUILD_DIR as BUILD
from crosszone.abi.objects import ROOT
from crosszone.compile.diff import MAP_ORDER
from crosszone.compile.gateway import compile_gateway
from crosszone.fastpath.libbpf import BpfObject, map_specs
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import MapSink, program
from crosszone.fastpath.testing.fake_maps import fake_gateway
from crosszone.intent.cluster import load_cluster

CLUSTER = ROOT / "examples" / "cluster.yaml"


@pytest.mark.parametrize("obj_name", ["xdp_gateway.o", "xdp_gateway_lpm.o"])
def test_fake_and_kernel_maps_hold_the_same_bytes(obj_name: str) -> None:
    path = BUILD / obj_name
    c = load_cluster(CLUSTER)
    first = compile_gateway(c, "gw-a", lambda n: 1)  # lo: the devmap needs a real device
    second = compile_gateway(c, "gw-b", lambda n: 1, first.ids)
    fake = fake_gateway(path)
    with BpfObject.open(path) as obj:
        real = GatewayMaps.of(obj)
        specs = map_specs(path)
        for m in obj.maps.values():  # the fakes have the shapes the kernel gave the maps
            if m.name not in specs:  # internal maps (.rodata): not the program's tables
                continue
            spec = specs[m.name]
            assert (spec.key_size, spec.value_size, spec.max_entries) == (
                m.key_size, m.value_size, m.max_entries), m.name
        for d, old in ((first, None), (second, first.entries)):
            ops_real = program(real, d.entries, old)
            ops_fake = program(fake, d.entries, old)
            assert [(o.kind, o.map, len(o)) for o in ops_real] == [
                (o.kind, o.map, len(o)) for o in ops_fake]
            got_real = MapSink(real).read(d.entries, MAP_ORDER)
            got_fake = MapSink(fake).read(d.entries, MAP_ORDER)
            for name in MAP_ORDER:
                assert got_fake[name] == got_real[name], name
        real.close()
    fake.close()
