"""Read a cluster intent (version 2, or version 1 migrated) and project it onto one gateway.

`parse_cluster` is the one entry point of the control plane: YAML -> schema -> cross checks ->
frozen `Cluster`, every failure an `InvalidIntentError` with file, line, object and field.
A version-1 file is read as a one-gateway cluster (its checks are version 1's, so every file that
was valid stays valid) and `migrate_v1` prints its version-2 form.

`for_gateway` gives the version-1 `Intent` one gateway programs, so `compile_intent` stays the
one compiler; `core=True` leaves the pools' prefixes out (the agent compiles those with numpy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from crosszone.intent.cluster_checks import check_cluster
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.hosts import HostError, HostSet, parse_hosts
from crosszone.intent.loader import _line_of, parse_intent, read_intent_text, validation_problem
from crosszone.intent.schema import Gateway, Host, Intent, StoragePool
from crosszone.intent.schema_v2 import Cluster, GatewayV2, StoragePoolV2
from crosszone.intent.validate import IntentProblem, as_error, format_loc

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose(text: str) -> yaml.Node | None:
    """The YAML node tree (only built when an error needs a line number)."""
    try:
        return yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError):
        return None


def _line_in_block(root: yaml.Node | None, loc: tuple[Any, ...], msg: str) -> int | None:
    """Line of a bad token inside a compact prefix block ('prefix #N ...'), else of the field."""
    line = _line_of(root, loc) if root is not None else None
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(
                node.value):
            node = node.value[part]
        else:
            node = None
    if isinstance(node, yaml.ScalarNode) and "prefix #" in msg and line is not None:
        try:
            index = int(msg.split("prefix #", 1)[1].split()[0])
        except ValueError:
            return line
        before = " ".join(str(node.value).split()[:index])
        lines_before = str(node.value)[: len(before) + 1].count("\n")
        return line + lines_before + (1 if node.style in ("|", ">") else 0)
    return line


def _block_line(root: yaml.Node | None, key: str, offset: int) -> int | None:
    """File line of line `offset` (0-based) of the block scalar at top-level key."""
    if not isinstance(root, yaml.MappingNode):
        return None
    node = next((v for k, v in root.value if getattr(k, "value", None) == key), None)
    if node is None:
        return None
    return node.start_mark.line + 1 + offset + (1 if getattr(node, "style", None) in ("|", ">")
                                                 else 0)


def _problem_line(text: str, loc: tuple[Any, ...], hosts: HostSet) -> int | None:
    """Line of a problem: inside the compact host block, the host's own line."""
    root = _compose(text)
    if len(loc) > 1 and loc[0] == "hosts_compact" and isinstance(loc[1], int) and loc[1] < len(
            hosts):
        return _block_line(root, "hosts_compact", int(hosts.lines[loc[1]]))
    return _line_of(root, loc)


def _host_block_error(exc: HostError, text: str, path: str | None) -> InvalidIntentError:
    where = f"hosts_compact[{exc.index}]" + (f".{exc.field}" if exc.field else "")
    return InvalidIntentError(exc.why, path=path, where=where,
                              line=_block_line(_compose(text), "hosts_compact", exc.line))


def parse_cluster(text: str, path: str | None = None) -> Cluster:
    """Validate intent YAML (version 1 or 2) into a frozen Cluster, or raise InvalidIntentError."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InvalidIntentError(f"not valid YAML: {getattr(exc, 'problem', exc)}", path=path,
                                 line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise InvalidIntentError("YAML nested too deeply", path=path) from None
    if not isinstance(data, dict):
        raise InvalidIntentError("the document must be a mapping with version, gateways, vpcs",
                                 path=path, line=1)
    if data.get("version") == 1:
        return migrate_v1(parse_intent(text, path))
    if data.get("version") != 2:
        root = _compose(text)
        raise InvalidIntentError(f"unknown version {data.get('version')!r}: this crosszone reads "
                                 "versions 1 and 2", path=path, line=_line_of(root, ("version",)),
                                 where="version")
    if isinstance(data.get("hosts_compact"), str):
        # parsed here, not in the schema's validator, so that an error knows its line
        try:
            data["hosts_compact"] = parse_hosts(data["hosts_compact"])
        except HostError as exc:
            raise _host_block_error(exc, text, path) from None
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        raise InvalidIntentError(msg, path=path, line=_line_in_block(_compose(text), loc, msg),
                                 where=format_loc(loc)) from None
    try:
        check_cluster(cluster)
    except IntentProblem as problem:
        raise as_error(problem, path, _problem_line(text, problem.loc, cluster.hosts_compact)
                       ) from None
    return cluster


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate an intent file of either version."""
    return parse_cluster(read_intent_text(path), str(path))


def migrate_v1(intent: Intent) -> Cluster:
    """A validated version-1 intent as a one-gateway cluster (no re-validation needed)."""
    gw = intent.gateway
    return Cluster.model_construct(
        version=2,
        gateways=[GatewayV2.model_construct(name=gw.name, vtep=gw.vtep, interfaces=gw.interfaces,
                                            bgp=None)],
        vpcs=intent.vpcs, hosts=intent.hosts,
        storage_pools=[StoragePoolV2.model_validate({"name": p.name, "prefixes": list(
            map(str, p.prefixes)), "next_hops": p.next_hops}) for p in intent.storage_pools],
        policy=Cluster.model_fields["policy"].default,
    )


def to_document(c: Cluster, blocks: bool = True) -> dict[str, Any]:
    """The cluster as a plain version-2 document (pool prefixes and compact hosts as blocks;
    blocks=False leaves both out: the store keeps them in chunks)."""
    doc = c.model_dump(mode="json", exclude_defaults=False,
                       exclude={"storage_pools", "hosts_compact"})
    if len(c.hosts_compact) and blocks:
        doc["hosts_compact"] = c.hosts_compact.to_text() + "\n"
    doc["storage_pools"] = [
        {"name": p.name, "prefixes": p.prefixes.to_text() if blocks else "",
         "next_hops": [nh.model_dump(mode="json") for nh in p.next_hops]}
        for p in c.storage_pools]
    for gw in doc["gateways"]:
        if gw.get("bgp") is None:
            gw.pop("bgp", None)
    for v in doc["vpcs"]:
        for r in v.get("routes", []):
            if r.get("pool") is None:
                r.pop("pool", None)
    for g in doc["gateways"]:
        for itf in g["interfaces"]:
            if itf.get("next_hop_mac") is None:
                itf.pop("next_hop_mac", None)
    return doc


def for_gateway(c: Cluster, name: str, core: bool = False) -> Intent:
    """The version-1 intent of one gateway (KeyError if the cluster has no such gateway).

    Built without re-validation: the cluster checks already cover every version-1 check.
    Compact hosts become Host objects unless core (then `compile_gateway` encodes them from
    their arrays)."""
    gw = c.gateway(name)
    hosts = c.hosts if core or not len(c.hosts_compact) else c.hosts + compact_as_hosts(
        c.hosts_compact)
    pools = [StoragePool.model_construct(
        name=p.name, prefixes=[] if core else p.prefixes.networks(), next_hops=p.next_hops)
        for p in c.storage_pools]
    return Intent.model_construct(
        version=1, gateway=Gateway.model_construct(name=gw.name, vtep=gw.vtep,
                                                   interfaces=gw.interfaces),
        vpcs=c.vpcs, hosts=hosts, storage_pools=pools)


def compact_as_hosts(hs: HostSet) -> list[Host]:
    """Compact hosts as verbose Host objects (small sets: tests, the version-1 projection)."""
    from crosszone.intent.hosts import _macs
    from crosszone.intent.schema import _v4_of_int

    macs = _macs(hs.mac)
    return [Host.model_construct(name=hs.names[i], vpc=hs.vpcs[i],
                                 vtep=_v4_of_int(int(hs.vtep[i])),
                                 addresses=hs.addresses_of(i), mac=macs[i])
            for i in range(len(hs))]
