"""Every YAML input is read in the one strict dialect (intent/strict_yaml.py).

The emulator's topology, a migration's deployment file and its guard limits: a key written twice,
a YAML 1.1 boolean key (`on:`), and `no`, a base-60 `1:30` or an octal `010` where a number or a
boolean is wanted are errors naming the file, the line and what YAML 1.1 would have read, where
PyYAML's default reading took the last duplicate, `True`, `False`, 90 and 8 without a word. The
other readers (probe, legacy adapter, planner scenario and catalog) name the line of a duplicate
key the same way, and no module of src/ reads YAML any other way.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from crosszone.intent import strict_yaml
from crosszone.migrate import deployment_file, legacy_adapter
from crosszone.migrate.plan import PlanError, load_guards
from crosszone.plan.catalog import load_catalog
from crosszone.plan.scenario import load_scenario
from crosszone.plan.units import PlanInputError
from crosszone.probe import config as probe_config
from crosszone_lab.emulate import topology

SRC = Path(__file__).resolve().parents[2] / "src"

TOPOLOGY = """\
name: t
hosts: 2
vpcs:
  - {name: a, vni: 1001, prefix: 192.168.0.0/16, storage_facing: 100.64.0.0/16}
gateways: {crosszone: 1, legacy: 1}
bfd: {interval_ms: 100, multiplier: 5}
fast_reroute: {enabled: true, interval_ms: 5, multiplier: 4}
"""

DEPLOYMENT = """\
store: sqlite:///tmp/unused.db
legacy:
  gateways: [lgw1, lgw2]
  adapter: {kind: none, routers: skip-missing}
agents:
  gateways: [xgw1]
convergence:
  share_tolerance: 5
  window_s: 1
  timeout_s: 30
"""

GUARDS = """\
errors: 0
small_p99_factor: 3.5
drops: 0
"""


def _load_topology(path: Path) -> object:
    return topology.load(path)


def _load_deployment(path: Path) -> object:
    return deployment_file.load(path)


#: input name -> (valid text, loader, its error type)
INPUTS: dict[str, tuple[str, Callable[[Path], object], type[Exception]]] = {
    "topology": (TOPOLOGY, _load_topology, topology.TopologyError),
    "deployment": (DEPLOYMENT, _load_deployment, deployment_file.DeploymentError),
    "guards": (GUARDS, load_guards, PlanError),
}

def y11(raw: str, reading: str) -> str:
    """The note that says what YAML 1.1 would have read a plain scalar as."""
    return f"({raw} is the string {raw!r} here, which YAML 1.1 would read as {reading}"


NUMBER = "a number >= 0"
#: (input, what, old line, new line or None to append, expected line, words in the message)
CASES = [
    ("topology", "duplicate key", None, "hosts: 3", 8, "'hosts' is given twice"),
    ("topology", "on: key", None, "on: true", 8, "on: Extra inputs are not permitted"),
    ("topology", "no boolean", "enabled: true", "enabled: no", 7,
     "fast_reroute.enabled: Input should be a valid boolean " + y11("no", "False")),
    ("topology", "sexagesimal", "interval_ms: 100", "interval_ms: 1:40", 6,
     "bfd.interval_ms: Input should be a valid integer " + y11("1:40", "100")),
    ("topology", "octal", "vni: 1001", "vni: 01751", 4,
     "vpcs.0.vni: Input should be a valid integer " + y11("01751", "1001")),
    ("deployment", "duplicate key", "  window_s: 1", "  window_s: 1\n  window_s: 2", 10,
     "'window_s' is given twice"),
    ("deployment", "on: key", None, "on: true", 11, "unknown keys on"),
    ("deployment", "no boolean", "share_tolerance: 5", "share_tolerance: no", 8,
     f"convergence.share_tolerance: {NUMBER} " + y11("no", "False")),
    ("deployment", "sexagesimal", "timeout_s: 30", "timeout_s: 1:30", 10,
     f"convergence.timeout_s: {NUMBER} " + y11("1:30", "90")),
    ("deployment", "octal", "window_s: 1", "window_s: 010", 9,
     f"convergence.window_s: {NUMBER} " + y11("010", "8")),
    ("guards", "duplicate key", None, "errors: 2", 4, "'errors' is given twice"),
    ("guards", "on: key", None, "on: 1", 4, "unknown guard 'on'"),
    ("guards", "no boolean", "drops: 0", "drops: no", 3,
     f'drops: {NUMBER}, got "no" ' + y11("no", "False")),
    ("guards", "sexagesimal", "small_p99_factor: 3.5", "small_p99_factor: 1:30", 2,
     f'small_p99_factor: {NUMBER}, got "1:30" ' + y11("1:30", "90")),
    ("guards", "octal", "drops: 0", "drops: 010", 3,
     f'drops: {NUMBER}, got "010" ' + y11("010", "8")),
]


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_the_valid_input_loads(tmp_path: Path, name: str) -> None:
    text, load, _error = INPUTS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    assert load(path) is not None


def test_the_valid_inputs_mean_what_they_say(tmp_path: Path) -> None:
    """The strict dialect reads decimals and fractions as numbers, true as a boolean."""
    path = tmp_path / "t.yaml"
    path.write_text(TOPOLOGY)
    spec = topology.load(path)
    assert (spec.vpcs[0].vni, spec.bfd.interval_ms, spec.fast_reroute.enabled,
            spec.fast_reroute.interval_ms) == (1001, 100, True, 5.0)
    path.write_text(GUARDS)
    assert load_guards(path)["small_p99_factor"] == 3.5


@pytest.mark.parametrize(("name", "what", "old", "new", "line", "words"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_yaml_surprise_is_an_error_naming_file_and_line(
        tmp_path: Path, name: str, what: str, old: str | None, new: str, line: int,
        words: str) -> None:
    text, load, error = INPUTS[name]
    if old is None:
        bad = text + new + "\n"
    else:
        assert text.count(old) == 1, (name, old)
        bad = text.replace(old, new)
    path = tmp_path / f"{name}.yaml"
    path.write_text(bad)
    with pytest.raises(error) as info:
        load(path)
    message = str(info.value)
    assert f"{path}:{line}: " in message, message
    assert words in message, message


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_a_syntax_error_names_file_and_line(tmp_path: Path, name: str) -> None:
    text, load, error = INPUTS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + "broken: [1, 2\n")
    with pytest.raises(error, match=rf"{path}:\d+: not valid YAML"):
        load(path)


@pytest.mark.parametrize("reader", [
    lambda text: probe_config.loads(text, "in.yaml"),
    lambda text: legacy_adapter.loads(text, "in.yaml"),
    lambda text: load_scenario(text, "in.yaml"),
    lambda text: load_catalog(text, "in.yaml"),
], ids=["probe", "legacy-adapter", "scenario", "catalog"])
def test_the_other_readers_name_the_line_of_a_duplicate_key(
        reader: Callable[[str], object]) -> None:
    with pytest.raises((probe_config.ProbeConfigError, legacy_adapter.LegacyConfigError,
                        PlanInputError), match=r"^in\.yaml:3: key 'b' is given twice"):
        reader("a: 1\nb: 2\nb: 3\n")


def test_load_turns_a_yaml_error_into_one_naming_source_and_line() -> None:
    with pytest.raises(strict_yaml.YamlInputError) as info:
        strict_yaml.load("a:\n  b: 1\n  b: 2\n", "f.yaml")
    assert (info.value.source, info.value.line, str(info.value)) == (
        "f.yaml", 3, "f.yaml:3: key 'b' is given twice in the same mapping")
    assert strict_yaml.where("a:\n  b: 010\n", ("a", "b")) == (
        2, "010 is the string '010' here, which YAML 1.1 would read as 8: write true/false for "
           "a boolean and integers in plain decimal")
    assert strict_yaml.where("a:\n  b: '010'\n", ("a", "b")) == (2, None)  # quoted: meant


#: The only modules that call PyYAML's readers: the dialect itself, and the intent's loader
#: (which reads with intent.loader.Loader, the dialect's StrictLoader).
READERS = {"crosszone/intent/strict_yaml.py", "crosszone/intent/cluster.py"}
YAML_READS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
              "full_load_all", "unsafe_load_all"}


def test_no_module_reads_yaml_outside_the_strict_dialect() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml"
                    and node.func.attr in YAML_READS and rel not in READERS):
                found.append(f"{rel}:{node.lineno}: yaml.{node.func.attr}")
    assert not found, "read YAML with crosszone.intent.strict_yaml.load:\n" + "\n".join(found)
