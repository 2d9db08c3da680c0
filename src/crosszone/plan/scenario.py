"""Scenario files for `crosszone simulate`: the training cluster, its traffic and the gateway tiers.

A scenario (YAML, see examples/scenarios/) is validated completely and frozen before the simulation
sees it. Quantities carry units ("5GB", "2s", "50Gbps"), unknown keys are errors, and every error
names the file and the field. The simulation itself (fluid.py) only ever receives a `Scenario`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from crosszone.intent import strict_yaml
from crosszone.intent.schema import Policy
from crosszone.plan.units import (
    PlanInputError,
    parse_bytes,
    parse_duration_s,
    parse_rate_gbps,
    parse_share,
    validation_failure,
)

__all__ = [
    "Checkpoint",
    "Cluster",
    "Dataset",
    "Ecmp",
    "Published",
    "Scenario",
    "SmallRequests",
    "Tier",
    "Training",
    "cluster_scale_mapping",
    "load_scenario",
    "scenario_from_mapping",
]


def _via(parser: Any) -> Any:
    """Adapt a unit parser to a pydantic validator that reports the bare reason."""

    def validate(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            # pydantic turns only ValueError into a validation error, so not TypeError here.
            raise ValueError(f"expected a number with a unit, got {value!r}")
        try:
            return float(parser(value, "", ""))
        except PlanInputError as exc:
            raise ValueError(exc.reason) from None

    return BeforeValidator(validate)


Bytes = Annotated[float, _via(parse_bytes)]
Seconds = Annotated[float, _via(parse_duration_s)]
Gbps = Annotated[float, _via(parse_rate_gbps)]
PositiveInt = Annotated[int, Field(gt=0)]


def _reduction(value: Any) -> float:
    """A reduction such as '90%' or 0.9: a share of the baseline, at most all of it."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a reduction such as '90%', got {value!r}")
    try:
        share = parse_share(value, "", "")
    except PlanInputError as exc:
        raise ValueError(exc.reason) from None
    if share > 1.0:
        # A time or a cost cannot fall by more than all of it; 150 % is a typo for something else.
        raise ValueError(f"a reduction is at most 100 %, got {value!r}")
    return share


Reduction = Annotated[float, BeforeValidator(_reduction)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]

_FROZEN = ConfigDict(extra="forbid", frozen=True, strict=False)


class Cluster(BaseModel):
    """The GPU servers and their storage-facing NICs."""

    model_config = _FROZEN

    servers: PositiveInt
    nic_gbps: Annotated[Gbps, Field(gt=0)]


class Training(BaseModel):
    """The step loop: compute time per step and the length of the whole run."""

    model_config = _FROZEN

    compute_per_step: Seconds
    total_steps: PositiveInt
    # With prefetch the next step's dataset load overlaps this step's compute (as data loaders with
    # prefetch workers do); without it, the step waits for its data.
    prefetch: bool = False


class Dataset(BaseModel):
    """Dataset reads per step: every server reads its shard at the same time (the step barrier)."""

    model_config = _FROZEN

    bytes_per_server: Annotated[Bytes, Field(gt=0)]
    streams: PositiveInt
    # Coefficient of variation of shard sizes between servers (lognormal): shards are not all equal.
    size_cv: Annotated[float, Field(ge=0.0, le=4.0)] = 0.0


class Checkpoint(BaseModel):
    """Checkpoint writes: every `every_steps` steps all servers write; training stalls meanwhile."""

    model_config = _FROZEN

    every_steps: PositiveInt
    bytes_per_server: Annotated[Bytes, Field(gt=0)]
    streams: PositiveInt
    size_cv: Annotated[float, Field(ge=0.0, le=4.0)] = 0.0


class SmallRequests(BaseModel):
    """The steady stream of small requests (metadata, control RPCs) next to the elephants."""

    model_config = _FROZEN

    rate_per_server: Annotated[float, Field(ge=0)]
    bytes: Annotated[Bytes, Field(gt=0)]
    # Strict priority for small requests at the gateway (the traffic policy): they skip the queue
    # that elephants build up.
    priority: bool = False


class Ecmp(BaseModel):
    """How flows are spread over the devices of a tier."""

    model_config = _FROZEN

    # Flowlet switching re-hashes a flow at each idle gap, so one elephant's bytes spread over
    # several devices instead of pinning one; `flowlet_bytes` is the burst between gaps.
    flowlets: bool = False
    flowlet_bytes: Annotated[Bytes, Field(gt=0)] = 64 * 2**20


class Tier(BaseModel):
    """One gateway tier to compare: device count, per-device capacity, latency and buffer."""

    model_config = _FROZEN

    name: Annotated[str, Field(min_length=1)]
    devices: PositiveInt
    gbps_per_device: Annotated[Gbps, Field(gt=0)]
    latency_us: Annotated[float, Field(ge=0)]
    buffer: Annotated[Bytes, Field(ge=0)]


class Published(BaseModel):
    """Figures a source reports for this case, printed next to the simulation's own.

    They do not change the simulation: they say which tier the source compared with which
    (`baseline`, `candidate`: tier names), and what it found, so that `crosszone simulate`
    can show the published reductions and the simulated ones side by side.
    """

    model_config = _FROZEN

    source: Annotated[str, Field(min_length=1)]
    baseline: Annotated[str, Field(min_length=1)]
    candidate: Annotated[str, Field(min_length=1)]
    dataset_load_reduction: Reduction | None = None
    training_time_reduction: Reduction | None = None
    # A sizing figure (tier prices), which the simulation does not compute: `crosszone plan` does.
    hardware_cost_reduction: Reduction | None = None

    @model_validator(mode="after")
    def _some_figure(self) -> Published:
        if (
            self.dataset_load_reduction is None
            and self.training_time_reduction is None
            and self.hardware_cost_reduction is None
        ):
            raise ValueError(
                "no figure given: set dataset_load_reduction, training_time_reduction or "
                "hardware_cost_reduction"
            )
        return self


class Scenario(BaseModel):
    """A validated, frozen simulation scenario."""

    model_config = _FROZEN

    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    seed: int = 1
    duration: Annotated[Seconds, Field(gt=0)]
    cluster: Cluster
    training: Training
    dataset: Dataset
    checkpoint: Checkpoint
    small_requests: SmallRequests
    ecmp: Ecmp = Ecmp()
    tiers: Annotated[list[Tier], Field(min_length=1)]
    # The traffic policy as the intent gives it (`policy:` of the intent, docs/policy.md). With
    # it, the policy decides what `small_requests.priority` and `ecmp.flowlets` say otherwise:
    # on, a small request below `elephant_bytes` is in the strict-priority class and elephants
    # move between devices in flowlets; off, neither. (The DSCP values only name the classes.)
    policy: Policy | None = None
    published: Published | None = None

    @model_validator(mode="after")
    def _published_names_tiers(self) -> Scenario:
        if self.published is None:
            return self
        names = [t.name for t in self.tiers]
        for role in ("baseline", "candidate"):
            name = getattr(self.published, role)
            if name not in names:
                raise ValueError(
                    f"published.{role}: no tier named {name!r} (tiers: {', '.join(names)})"
                )
        if self.published.baseline == self.published.candidate:
            raise ValueError(
                "published.candidate: the same tier as published.baseline; a reduction compares "
                "two tiers"
            )
        return self

    @model_validator(mode="after")
    def _policy_or_flags(self) -> Scenario:
        if self.policy is not None:
            for name, part, flag in (("small_requests", self.small_requests, "priority"),
                                     ("ecmp", self.ecmp, "flowlets")):
                if flag in part.model_fields_set:
                    raise ValueError(f"{name}.{flag} and policy both given: the policy decides "
                                     f"{name}.{flag}; drop one")
        return self

    @property
    def small_priority(self) -> bool:
        """Whether small requests skip the elephants' queue (the policy, else the flag)."""
        if self.policy is not None:
            return self.policy.enabled and self.small_requests.bytes < self.policy.elephant_bytes
        return self.small_requests.priority

    @property
    def flowlets(self) -> bool:
        """Whether elephants move between devices in flowlets (the policy, else the flag)."""
        if self.policy is not None:
            return self.policy.enabled
        return self.ecmp.flowlets

    def with_policy(self, enabled: bool) -> Scenario:
        """The same scenario with the traffic policy on or off (a default policy if it had none)."""
        policy = (self.policy or Policy()).model_copy(update={"enabled": enabled})
        return self.model_copy(update={"policy": policy})

    @property
    def peak_gbps(self) -> float:
        """Cross-zone peak: every server's NIC busy at once (the dataset-load barrier)."""
        return self.cluster.servers * self.cluster.nic_gbps


def scenario_from_mapping(raw: Any, source: str) -> Scenario:
    """Validate a parsed mapping (from `source`, used in messages) into a Scenario."""
    if not isinstance(raw, dict):
        raise PlanInputError(source, "", "expected a mapping (name, duration, cluster, ...)")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise validation_failure(exc, raw, source) from None
    names = [t.name for t in scenario.tiers]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise PlanInputError(source, f"tiers[{index}] ({name}).name", "appears twice")
    return scenario


def load_scenario(text: str, source: str) -> Scenario:
    """Validate scenario YAML text (from `source`, used in messages) into a Scenario."""
    try:
        raw = strict_yaml.load(text, source)  # the one strict dialect
    except strict_yaml.YamlInputError as exc:
        at = f"{source}:{exc.line}" if exc.line else source
        raise PlanInputError(at, "", exc.problem) from None
    return scenario_from_mapping(raw, source)


def cluster_scale_mapping(servers: int, duration: str = "1h") -> dict[str, Any]:
    """The reference traffic scaled to `servers` GPU servers, both tiers sized for the peak.

    Used by `crosszone bench simulate`: the per-server traffic of examples/scenarios/reference.yaml,
    with an x86 tier and a Tofino-class tier each sized by the plan rule (10 % headroom).
    """
    from crosszone.plan.units import ceil_devices

    nic_gbps = 50.0
    peak = servers * nic_gbps
    return {
        "name": f"cluster-{servers}-servers",
        "description": "reference traffic per server, tiers sized for the peak by the plan rule",
        "seed": 1,
        "duration": duration,
        "cluster": {"servers": servers, "nic_gbps": f"{nic_gbps:g}Gbps"},
        "training": {"compute_per_step": "2s", "total_steps": 100000, "prefetch": False},
        "dataset": {"bytes_per_server": "5GB", "streams": 8, "size_cv": 0.2},
        "checkpoint": {"every_steps": 100, "bytes_per_server": "20GB", "streams": 8},
        "small_requests": {"rate_per_server": 1000, "bytes": "4KiB", "priority": False},
        "ecmp": {"flowlets": False, "flowlet_bytes": "64MiB"},
        "tiers": [
            {
                "name": "x86 50G",
                "devices": max(1, ceil_devices(peak * 1.1 / 50)),
                "gbps_per_device": "50Gbps",
                "latency_us": 30,
                "buffer": "16MB",
            },
            {
                "name": "tofino 1.6T",
                "devices": max(1, ceil_devices(peak * 1.1 / 1600)),
                "gbps_per_device": "1.6Tbps",
                "latency_us": 2,
                "buffer": "22MB",
            },
        ],
    }
