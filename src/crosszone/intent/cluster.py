"""Read an intent file of either version into the one model, a frozen `Cluster`.

`parse_cluster` is the one entry point: YAML -> (version 1: `migrate_v1`, a plain document) ->
schema -> `check_cluster` -> frozen `Cluster`, every failure an `InvalidIntentError` with file,
line, object and field. A version-1 file is migrated to a version-2 document before anything
validates it, so both versions go through the same schema and the same checker; a problem in a
version-1 file is still reported where that file has it (`gateway.interfaces[0]`, not
`gateways[0].interfaces[0]`). `crosszone intent migrate` prints the migrated form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from crosszone.intent.checks import IntentProblem, check_cluster, format_loc, route_counts
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.hosts import HostError, parse_hosts
from crosszone.intent.loader import (
    Loader,
    block_line,
    compose,
    host_block_error,
    line_in_block,
    read_intent_text,
    validation_problem,
)
from crosszone.intent.schema import Cluster
from crosszone.intent.strict_yaml import (
    DuplicateKeyError,
    line_of,
    node_at,
    path_of_key,
    yaml11_hint,
)

Loc = tuple[Any, ...]
# What a version-1 document may hold; the rest of version 2 (several gateways, BGP, compact
# hosts and prefix blocks, policy) is rejected in a version-1 file.
V1_KEYS = ("version", "gateway", "vpcs", "hosts", "storage_pools")


def _v1_problem(data: dict[str, Any]) -> tuple[Loc, str] | None:
    """The first thing a version-1 document holds that version 1 does not have, if any."""
    for key in data:
        if key not in V1_KEYS:
            return (key,), f"unknown key {key!r}"
    if "gateway" not in data:
        return ("gateway",), "missing required key 'gateway'"
    if isinstance(data["gateway"], dict) and "bgp" in data["gateway"]:
        return ("gateway", "bgp"), "unknown key 'bgp'"
    pools = data.get("storage_pools")
    for k, pool in enumerate(pools if isinstance(pools, list) else []):
        if isinstance(pool, dict) and isinstance(pool.get("prefixes"), str):
            return ("storage_pools", k, "prefixes"), "Input should be a valid list"
    return None


def migrate_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 document as a version-2 one (a plain dict): its gateway is the one gateway."""
    return {"version": 2} | {("gateways" if k == "gateway" else k): ([v] if k == "gateway" else v)
                             for k, v in data.items() if k != "version"}


def _v1_loc(loc: Loc) -> Loc:
    """A path into the migrated document as a path into the version-1 file."""
    if loc[:2] == ("gateways", 0):
        return ("gateway",) + tuple(loc[2:])
    return loc


def _v1_item(loc: Loc, msg: str) -> tuple[Loc, str]:
    """A bad item of a prefix list, as version 1 names it: the item, not the list."""
    if loc[-1:] == ("prefixes",) and msg.startswith("prefix #") and ": " in msg:
        index, rest = msg.removeprefix("prefix #").split(": ", 1)
        if index.isdigit():
            return loc + (int(index),), rest
    return loc, msg


def _problem_line(root: yaml.Node | None, loc: Loc, c: Cluster) -> int | None:
    """Line of a problem: inside the compact host block, the host's own line."""
    hosts = c.hosts_compact
    if len(loc) > 1 and loc[0] == "hosts_compact" and isinstance(loc[1], int) and loc[1] < len(
            hosts):
        return block_line(root, "hosts_compact", int(hosts.lines[loc[1]]))
    return line_of(root, loc)


def _load_yaml(text: str, path: str | None) -> dict[str, Any]:
    """The YAML document, which must be a mapping."""
    try:
        data = yaml.load(text, Loader=Loader)
    except DuplicateKeyError as exc:
        loc = path_of_key(compose(text), exc.line, exc.column)
        raise InvalidIntentError(f"key {exc.key!r} is given twice in the same mapping (YAML "
                                 "would keep the last one silently)", path=path, line=exc.line,
                                 where=format_loc(loc) or None) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InvalidIntentError(f"not valid YAML: {getattr(exc, 'problem', exc)}", path=path,
                                 line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise InvalidIntentError("YAML nested too deeply", path=path) from None
    if not isinstance(data, dict):
        raise InvalidIntentError("the document must be a mapping with version, gateways, vpcs",
                                 path=path, line=1)
    return data


def parse_cluster(text: str, path: str | None = None) -> Cluster:
    """Validate intent YAML (version 1 or 2) into a frozen Cluster, or raise InvalidIntentError."""
    return parse_versioned(text, path)[0]


def parse_versioned(text: str, path: str | None = None) -> tuple[Cluster, int]:
    """parse_cluster, and the version the text was written in (1 or 2): one parse for both."""
    data = _load_yaml(text, path)
    version = data.get("version")
    v1 = type(version) is int and version == 1
    if v1:
        bad = _v1_problem(data)
        if bad is not None:
            raise InvalidIntentError(bad[1], path=path, line=line_of(compose(text), bad[0]),
                                     where=format_loc(bad[0]))
        data = migrate_v1(data)
    elif type(version) is not int or version != 2:
        root = compose(text)
        hint = yaml11_hint(node_at(root, ("version",)))
        raise InvalidIntentError(hint or f"unknown version {version!r}: this crosszone reads "
                                 "versions 1 and 2", path=path,
                                 line=line_of(root, ("version",)), where="version")
    if isinstance(data.get("hosts_compact"), str):
        # parsed here, not in the schema's validator, so that an error knows its line
        try:
            data["hosts_compact"] = parse_hosts(data["hosts_compact"])
        except HostError as exc:
            raise host_block_error(exc, text, path) from None
    where = _v1_loc if v1 else tuple
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        if v1:
            loc, msg = _v1_item(_v1_loc(loc), msg)
        root = compose(text)
        # `vni: 01751`, `bfd: yes`: say what YAML 1.1 would have made of it, not just "integer"
        msg = yaml11_hint(node_at(root, loc)) or msg
        raise InvalidIntentError(msg, path=path, line=line_in_block(root, loc, msg),
                                 where=format_loc(loc)) from None
    try:
        check_cluster(cluster)
    except IntentProblem as problem:
        loc = where(problem.loc)
        msg = problem.message.replace("gateways[0].", "gateway.") if v1 else problem.message
        raise InvalidIntentError(msg, path=path, line=_problem_line(compose(text), loc, cluster),
                                 where=format_loc(loc)) from None
    return cluster, 1 if v1 else 2


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate an intent file of either version."""
    return parse_cluster(read_intent_text(path), str(path))


def load_versioned(path: str | Path) -> tuple[Cluster, int]:
    """load_cluster, and the version the file was written in (1 or 2)."""
    return parse_versioned(read_intent_text(path), str(path))


def only_gateway(c: Cluster, gateway: str | None, path: str | None = None) -> str:
    """The gateway named, checked, or the only one (InvalidIntentError if it is ambiguous)."""
    names = [g.name for g in c.gateways]
    if gateway is None:
        if len(names) == 1:
            return names[0]
        raise InvalidIntentError(f"the intent has {len(names)} gateways ({', '.join(names)}): "
                                 "name one (--gateway)", path=path)
    if gateway not in names:
        raise InvalidIntentError(f"no gateway {gateway!r} (the intent has {', '.join(names)})",
                                 path=path, where="gateways")
    return gateway


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


def table_counts(c: Cluster) -> dict[str, int]:
    """Entries the intent needs: VPCs, routes (both families) and host addresses."""
    routes = sum(route_counts(c))  # the checker's count (intent/checks.py)
    hosts = sum(len(h.addresses) for h in c.hosts) + c.hosts_compact.n_addresses
    return {"vpcs": len(c.vpcs), "routes": routes, "hosts": hosts}
