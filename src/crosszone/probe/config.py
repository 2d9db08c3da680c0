"""The probe daemon's configuration file (YAML, the intent's strict dialect).

```yaml
name: canary-h1            # the store key probe/<name>: one daemon, one name
role: canary               # canary (a host in the canary VPC) or production
interval_s: 1              # a round of reads every interval (optional, 0.1 to 3600)
connect_s: 1               # deadline of each connection (optional)
response_s: 5              # deadline of each answer once connected (optional)
dscp: 0                    # DSCP of the reads, from the SYN on (optional, 0 to 63)
source4: 192.168.10.5      # source addresses (optional; the routing table's choice otherwise)
source6: fd00:10::5
targets:
  - name: storage-1
    addresses: [10.20.0.11, "fd00:20::11"]   # one read per address, each round
    port: 80                                  # optional
    path: /meta/shard-00000.json
    size: 1234                                # the document's exact size in bytes
    sha256: 0f3c...                           # and its SHA-256 (64 lower-case hex digits)
```

Every key is checked: an unknown key, a wrong type, a duplicate key, a family with no source
when `sourceN` names the other, an address that is not one, are each an error naming the key
(`ProbeConfigError`). The file is read with `intent.strict_yaml.StrictLoader`, so `dscp: 046`
is an error rather than the octal 38.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from crosszone.intent import strict_yaml
from crosszone.intent.strict_yaml import StrictLoader
from crosszone.probe.http_read import CONNECT_S, RESPONSE_S, Expected, Target

ROLES = ("canary", "production")
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_TOP = {"name", "role", "interval_s", "connect_s", "response_s", "dscp", "source4", "source6",
        "targets", "parallel"}
_TARGET = {"name", "addresses", "port", "path", "size", "sha256"}
MAX_TARGETS = 256


class ProbeConfigError(ValueError):
    """The configuration is not valid; the message names the key."""


@dataclass(frozen=True)
class ProbeConfig:
    """A validated configuration."""

    name: str
    role: str
    targets: tuple[Target, ...]
    interval_s: float = 1.0
    connect_s: float = CONNECT_S
    response_s: float = RESPONSE_S
    parallel: int = 8


def _keys(d: Mapping[object, object], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise ProbeConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                               f"(allowed: {', '.join(sorted(allowed))})")


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ProbeConfigError(f"{where}: {value!r} is not a name (lower-case letters, digits, "
                               "'.', '_' and '-', 1 to 63, starting with a letter or digit)")
    return value


def _number(d: Mapping[object, object], key: str, default: float, low: float, high: float,
            where: str) -> float:
    value = d.get(key, default)
    number = decimal(value)
    if number is None or not low <= number <= high:
        raise ProbeConfigError(f"{_k(where, key)}: {value!r} is not a decimal number from {low:g} "
                               f"to {high:g}")
    return number


def decimal(value: object) -> float | None:
    """A number of this YAML dialect: an integer, or a plain decimal fraction, which the strict
    loader leaves a string (`0.5`; not `.5`, `1e3`, `.inf` or `0x10`); None for anything
    else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return float(value)
    return None


def _int(d: Mapping[object, object], key: str, default: int | None, low: int, high: int,
         where: str) -> int:
    if key not in d and default is None:
        raise ProbeConfigError(f"{_k(where, key)}: missing")
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProbeConfigError(f"{_k(where, key)}: {value!r} is not an integer from {low} to "
                               f"{high}")
    return value


def _address(value: object, version: int | None, where: str) -> str:
    if not isinstance(value, str):
        raise ProbeConfigError(f"{where}: {value!r} is not an address (write it as a string)")
    try:
        addr = ipaddress.ip_address(value)
    except ValueError:
        raise ProbeConfigError(f"{where}: {value!r} is not an IPv4 or IPv6 address") from None
    if version is not None and addr.version != version:
        raise ProbeConfigError(f"{where}: {value!r} is not an IPv{version} address")
    return str(addr)


def _target(raw: object, where: str, sources: dict[int, str | None], dscp: int
            ) -> list[Target]:
    if not isinstance(raw, Mapping):
        raise ProbeConfigError(f"{where}: not a mapping")
    _keys(raw, _TARGET, where)
    for key in ("name", "addresses", "path", "size", "sha256"):
        if key not in raw:
            raise ProbeConfigError(f"{_k(where, key)}: missing")
    _name(raw["name"], _k(where, "name"))
    addresses = raw["addresses"]
    if not isinstance(addresses, list) or not addresses:
        raise ProbeConfigError(f"{_k(where, 'addresses')}: not a non-empty list of addresses")
    addrs = [_address(a, None, f"{_k(where, 'addresses')}[{i}]") for i, a in enumerate(addresses)]
    if len(set(addrs)) != len(addrs):
        raise ProbeConfigError(f"{_k(where, 'addresses')}: an address is listed twice")
    path = raw["path"]
    if not isinstance(path, str) or not re.fullmatch(r"/[\x21-\x7e]{0,1023}", path):
        raise ProbeConfigError(f"{_k(where, 'path')}: {path!r} is not an absolute URL path "
                               "(printable ASCII without spaces, starting with /)")
    size = _int(raw, "size", None, 0, 1 << 30, where)
    sha = raw["sha256"]
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise ProbeConfigError(f"{_k(where, 'sha256')}: {sha!r} is not 64 lower-case hex digits")
    port = _int(raw, "port", 80, 1, 65535, where)
    expect = Expected(size, sha)
    out = []
    for a in addrs:
        version = ipaddress.ip_address(a).version
        out.append(Target(a, path, expect, port=port, source=sources[version], dscp=dscp,
                          name=raw["name"]))
    return out


def _k(where: str, key: str) -> str:
    """The path of `key` inside `where` ('' is the document)."""
    return f"{where}.{key}" if where else key


def parse(raw: object, source: str = "<probe config>") -> ProbeConfig:
    """A configuration from its parsed YAML document; errors start with `source`."""
    try:
        return _parse(raw)
    except ProbeConfigError as exc:
        raise ProbeConfigError(f"{source}: {exc}") from None


def _parse(raw: object) -> ProbeConfig:
    where = ""
    if not isinstance(raw, Mapping):
        raise ProbeConfigError("the document is not a mapping")
    _keys(raw, _TOP, "the document")
    for key in ("name", "role", "targets"):
        if key not in raw:
            raise ProbeConfigError(f"{_k(where, key)}: missing")
    name = _name(raw["name"], _k(where, "name"))
    role = raw["role"]
    if role not in ROLES:
        raise ProbeConfigError(f"{_k(where, 'role')}: {role!r} is not one of {', '.join(ROLES)}")
    interval = _number(raw, "interval_s", 1.0, 0.1, 3600.0, where)
    connect_s = _number(raw, "connect_s", CONNECT_S, 0.01, 60.0, where)
    response_s = _number(raw, "response_s", RESPONSE_S, 0.01, 600.0, where)
    dscp = _int(raw, "dscp", 0, 0, 63, where)
    parallel = _int(raw, "parallel", 8, 1, 64, where)
    sources: dict[int, str | None] = {4: None, 6: None}
    for version in (4, 6):
        key = f"source{version}"
        if key in raw:
            sources[version] = _address(raw[key], version, f"{_k(where, key)}")
    targets = raw["targets"]
    if not isinstance(targets, list) or not targets:
        raise ProbeConfigError(f"{_k(where, 'targets')}: not a non-empty list")
    if len(targets) > MAX_TARGETS:
        raise ProbeConfigError(f"{_k(where, 'targets')}: {len(targets)} targets, at most "
                               f"{MAX_TARGETS}")
    reads: list[Target] = []
    names: set[str] = set()
    for i, t in enumerate(targets):
        tw = f"targets[{i}]"
        reads += _target(t, tw, sources, dscp)
        tname = t["name"]
        if tname in names:
            raise ProbeConfigError(f"{tw}.name: {tname!r} is the name of an earlier target")
        names.add(tname)
    return ProbeConfig(name, role, tuple(reads), interval, connect_s, response_s, parallel)


def load(path: Path) -> ProbeConfig:
    """Read and validate a configuration file (ProbeConfigError, naming the file, if invalid)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeConfigError(f"{path}: cannot be read: {exc}") from None
    return loads(text, str(path))


def loads(text: str, source: str = "<probe config>") -> ProbeConfig:
    """Validate a configuration given as YAML text."""
    try:
        raw = strict_yaml.load(text, source, StrictLoader)
    except strict_yaml.YamlInputError as exc:
        raise ProbeConfigError(str(exc)) from None
    return parse(raw, source)
