"""The inventory baseline: what a healthy node had, so later losses are findings.

Pure: ``baseline_from(snapshot, roles)`` builds the record and the JSON helpers turn it
into text and back with validation. Deciding when a snapshot is healthy enough to become
the baseline, and writing the file atomically, is the shell's job.

The inventory checks compare against it: a GPU (by PCI bus id), an HCA (by name or PCI
bus id, so a renamed RDMA device is not "missing") or a port that was recorded and is
gone now is ``inventory.*.missing``. Ports that were ACTIVE at baseline time also let the
IB check judge non-compute ports (a storage port that used to be up and is down now).

The baseline belongs to one node (DESIGN.md 3): it records the node's identity (machine-id,
hostname, and the host root it was taken from). ``foreign_reason`` says when a baseline is
another node's (a copied /var/lib/agentd, an image baked with one): it is then not used,
and judged as ``baseline.foreign`` instead of as lost GPUs and HCAs. A baseline written
before identities were recorded is adopted: ``adopted`` adds this node's identity to it.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import ValidationError, field_validator, model_validator

from agentd.base.ids import is_bdf
from agentd.judging.roles import HcaRoles
from agentd.model import NodeSnapshot, Record

BASELINE_VERSION = 1


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message says why."""


def _check_bdf(v: str | None) -> str | None:
    if v is not None and not is_bdf(v):
        raise ValueError(f"{v!r} is not a PCI bus id as sysfs spells it (dddd:bb:dd.f, lowercase; 10000:bb:dd.f behind VMD)")
    return v


class BaselineGpu(Record):
    index: int
    pci_bus_id: str
    name: str | None = None
    uuid: str | None = None

    _bdf = field_validator("pci_bus_id")(_check_bdf)


class BaselinePort(Record):
    port: int
    active: bool  # state was ACTIVE when the baseline was taken
    link_layer: str | None = None


class BaselineHca(Record):
    name: str
    pci_bus_id: str | None = None
    hca_type: str | None = None
    role: Literal["compute", "other"]
    ports: tuple[BaselinePort, ...] = ()

    _bdf = field_validator("pci_bus_id")(_check_bdf)

    def port(self, number: int) -> BaselinePort | None:
        for p in self.ports:
            if p.port == number:
                return p
        return None


class NodeIdentity(Record):
    """Which node a baseline belongs to. ``machine_id`` (``/etc/machine-id`` under the host
    root, 32 hex digits; None when absent, uninitialized or unreadable) decides when both
    sides know it; else the hostname does. ``host_root`` is where it was read, for the
    message only: ``/`` and a container's ``/host`` are the same node."""

    machine_id: str | None = None
    hostname: str | None = None
    host_root: str | None = None


class Baseline(Record):
    version: int = BASELINE_VERSION
    taken_at: float
    hostname: str | None = None
    machine_id: str | None = None  # None: not known, or a baseline from before identities
    host_root: str | None = None
    gpus: tuple[BaselineGpu, ...] = ()
    hcas: tuple[BaselineHca, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> "Baseline":
        if self.version != BASELINE_VERSION:
            raise ValueError(f"version {self.version} is not supported (this agentd writes {BASELINE_VERSION})")
        bus_ids = [g.pci_bus_id for g in self.gpus]
        if len(set(bus_ids)) != len(bus_ids):
            raise ValueError("a GPU PCI bus id appears twice")
        names = [h.name for h in self.hcas]
        if len(set(names)) != len(names):
            raise ValueError("an HCA name appears twice")
        for h in self.hcas:
            numbers = [p.port for p in h.ports]
            if len(set(numbers)) != len(numbers):
                raise ValueError(f"HCA {h.name}: a port number appears twice")
        return self

    def hca(self, name: str) -> BaselineHca | None:
        for h in self.hcas:
            if h.name == name:
                return h
        return None

    def port_was_active(self, hca: str, port: int) -> bool:
        h = self.hca(hca)
        p = h.port(port) if h is not None else None
        return p is not None and p.active


def foreign_reason(baseline: Baseline, node: NodeIdentity) -> str | None:
    """Why ``baseline`` is another node's than ``node``, or None when it is (or may be)
    this node's: the machine-ids differ when both are known, else the hostnames differ
    when both are known. Nothing known on either side: this node's (adopted)."""
    if baseline.machine_id and node.machine_id:
        if baseline.machine_id != node.machine_id:
            return f"machine-id {baseline.machine_id}, not this node's {node.machine_id}"
        return None
    if baseline.hostname and node.hostname and baseline.hostname != node.hostname:
        return f"hostname {baseline.hostname!r}, not this node's {node.hostname!r}"
    return None


def adopted(baseline: Baseline, node: NodeIdentity) -> Baseline | None:
    """``baseline`` (this node's) with the parts of ``node``'s identity it lacks, or None
    when it lacks none: a baseline from before identities were recorded gets them on its
    next save. Known parts are never changed (a renamed node keeps its baseline)."""
    update = {k: v for k, v in node.model_dump().items() if v and not getattr(baseline, k)}
    return baseline.model_copy(update=update) if update else None


def baseline_from(snapshot: NodeSnapshot, roles: HcaRoles, node: NodeIdentity | None = None) -> Baseline:
    """The inventory of ``snapshot`` as a baseline (GPUs, HCAs with their ports and roles),
    with ``node``'s identity (the hostname defaults to the snapshot's).

    Total on any snapshot (``judge`` calls it outside the per-check guard): a GPU whose
    bus id is not one (a simulated source can hand over any text) cannot be found again
    by it and is left out; such an HCA is recorded by name only."""
    return Baseline(
        taken_at=snapshot.taken_at,
        hostname=(node.hostname if node is not None and node.hostname else None) or snapshot.system.hostname,
        machine_id=node.machine_id if node is not None else None,
        host_root=node.host_root if node is not None else None,
        gpus=tuple(
            BaselineGpu(index=g.index, pci_bus_id=g.pci_bus_id, name=g.name, uuid=g.uuid)
            for g in sorted(snapshot.gpus, key=lambda g: g.pci_bus_id)
            if is_bdf(g.pci_bus_id)
        ),
        hcas=tuple(
            BaselineHca(
                name=h.name,
                pci_bus_id=h.pci_bus_id if is_bdf(h.pci_bus_id) else None,
                hca_type=h.hca_type,
                role="compute" if roles.is_compute(h.name) else "other",
                ports=tuple(
                    BaselinePort(port=p.port, active=p.is_active, link_layer=p.link_layer)
                    for p in sorted(h.ports, key=lambda p: p.port)
                ),
            )
            for h in sorted(snapshot.hcas, key=lambda h: h.name)
        ),
    )


def baseline_to_json(baseline: Baseline) -> str:
    try:
        return baseline.model_dump_json(indent=2) + "\n"
    except ValueError:  # PydanticSerializationError: a name that is not UTF-8 (a lone surrogate)
        # json's \udcNN escapes read back to the very same name, so the next run finds it again.
        return json.dumps(baseline.model_dump(mode="python"), indent=2) + "\n"


def baseline_from_json(text: str | bytes) -> Baseline:
    """Parse and validate a baseline file's content; raises BaselineError naming the key."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BaselineError(f"baseline is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise BaselineError("baseline must be a JSON object")
    try:
        return Baseline.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{loc}: {msg}")
        raise BaselineError("invalid baseline: " + "; ".join(problems)) from None
