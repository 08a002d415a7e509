"""Fault specs: parse, apply to and clear from an existing simulator root.

Spec syntax: ``KIND[@TARGET][=VALUE]``, e.g. ``port_down``, ``port_down@mlx5_3:1=polling``,
``rate_degraded@mlx5_2=200``, ``mtu_mismatch@ens1np0=1500``, ``nvlink_down@gpu3=7``,
``unreadable_file@sys/class/infiniband/mlx5_0/ports/1/rate``. The kinds, their targets,
values and exact effects are listed in ``agentd.sim.fault_kinds`` (``describe_kinds()``
prints them). A target left out defaults to the first compute HCA port (``mlx5_0:1``), GPU
0, or the first RoCE netdev, depending on the kind.

How clearing works: every kind declares the things it changes. ``clear_fault`` builds
the fault-free tree of the same profile once per process (cached in a temporary
directory) and copies those paths, or those fields of ``nvml.json``, back from it. So a
cleared file has exactly the profile's original content, and a fault that removed a
device gets every file of it back. Two faults that touch the same file are not
independent: clearing one restores the file and so clears the other's change too.

Counters that only go up on a real node stay advanced after clearing, as they would
after the real event ended (a link that flapped does not un-flap its ``link_downed``):
``flapping``, ``pause_storm`` and ``nvlink_errors`` change nothing but such counters,
so clearing them only drops them from the applied list; ``port_down`` leaves
``link_downed``/``carrier_*`` advanced and, on clear, counts the link coming back up
(carrier_changes and carrier_up_count + 1). ``advancing_paths`` names these files. A
counter *rate* needs two collections: the daemon sees a pause storm or a flap as the
difference between two reads, so apply the fault between collections (applying
``pause_storm`` again adds more, i.e. the storm goes on).

``.agentd/simulation.json`` records ``{"profile", "faults": [{"spec", "kind", "target",
"value"}]}`` with targets and values resolved (defaults filled in).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from agentd.base.jsontypes import JsonObject
from agentd.sim.fault_kinds import KINDS, Kind
from agentd.sim.pci import pci_layout
from agentd.sim.pristine import MARKER, get_profile, pristine_root
from agentd.sim.targets import Ctx, FaultValue, NvmlField, Target, resolve_target
from agentd.sim.tree import restore_path

__all__ = ["Fault", "parse_fault", "apply_fault", "clear_fault", "applied_faults", "advancing_paths", "touched_paths", "FAULT_KINDS"]

FAULT_KINDS: tuple[str, ...] = tuple(KINDS)
_TARGET_RE = re.compile(r"^[A-Za-z0-9_.:/\-]+$")


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str | None = None
    value: str | None = None

    @property
    def spec(self) -> str:
        s = self.kind
        if self.target is not None:
            s += f"@{self.target}"
        if self.value is not None:
            s += f"={self.value}"
        return s

    def __str__(self) -> str:
        return self.spec


def _bad(spec: str, why: str) -> ValueError:
    kinds = ", ".join(FAULT_KINDS)
    return ValueError(f"bad fault spec {spec!r}: {why}. Syntax: KIND[@TARGET][=VALUE]; valid kinds: {kinds}")


def parse_fault(spec: str | Fault) -> Fault:
    """Parse ``KIND[@TARGET][=VALUE]``; ValueError (listing the valid kinds) when malformed."""
    if isinstance(spec, Fault):
        spec = spec.spec
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(str(spec), "empty spec")
    spec = spec.strip()
    head, eq, value = spec.partition("=")
    kind, at, target = head.partition("@")
    if kind not in KINDS:
        raise _bad(spec, f"unknown kind {kind!r}")
    k = KINDS[kind]
    if at and not target:
        raise _bad(spec, "empty target after '@'")
    if eq and not value:
        raise _bad(spec, "empty value after '='")
    if target and not _TARGET_RE.match(target):
        raise _bad(spec, f"target {target!r} has characters other than letters, digits and _ . : / -")
    if target and k.target == "none":
        raise _bad(spec, f"{kind} takes no target")
    if value and k.value is None:
        raise _bad(spec, f"{kind} takes no value")
    if value:
        try:
            k.value(value)  # type: ignore[misc]
        except ValueError as e:
            raise _bad(spec, f"bad value for {kind}: {e}") from None
    return Fault(kind, target or None, value or None)


# ---------------------------------------------------------------------------
# the root


def _load_marker(root: Path) -> JsonObject:
    p = root / MARKER
    if not p.is_file():
        raise ValueError(f"{root} is not a simulator root (no {MARKER})")
    marker: JsonObject = json.loads(p.read_text())
    return marker


def _save_marker(root: Path, data: JsonObject) -> None:
    (root / MARKER).write_text(json.dumps(data, indent=2) + "\n")


def _ctx(root: str | Path) -> tuple[Ctx, JsonObject]:
    r = Path(root).absolute()
    marker = _load_marker(r)
    profile = get_profile(marker["profile"])
    return Ctx(r, profile, pci_layout(profile)), marker


def applied_faults(root: str | Path) -> list[str]:
    return [f["spec"] for f in _load_marker(Path(root))["faults"]]


def _resolve(ctx: Ctx, fault: Fault) -> Target:
    try:
        kind = KINDS[fault.kind]
        return resolve_target(ctx, kind.target, fault.target, links=kind.links, port_files=kind.port_files)
    except ValueError as e:
        raise ValueError(f"fault {fault.spec!r} on profile {ctx.profile.name}: {e}") from None


def _value(ctx: Ctx, fault: Fault, target: Target) -> FaultValue:
    kind = KINDS[fault.kind]
    value = kind.value(fault.value) if kind.value and fault.value is not None else None
    if value is None and kind.default is not None:
        value = kind.default(ctx, target)
    return value


def _recorded(kind: Kind, text: str | None) -> FaultValue:
    return kind.value(text) if kind.value and text is not None else None


def apply_fault(root: str | Path, spec: str | Fault) -> Fault:
    """Apply one fault to an existing simulator root; returns it with target/value resolved."""
    fault = parse_fault(spec)
    ctx, marker = _ctx(root)
    kind = KINDS[fault.kind]
    target = _resolve(ctx, fault)
    value = _value(ctx, fault, target)
    try:
        kind.apply(ctx, target, value)
    except ValueError as e:
        raise ValueError(f"fault {fault.spec!r} on profile {ctx.profile.name}: {e}") from None
    shown = kind.format_value(value)
    marker["faults"].append({"spec": fault.spec, "kind": fault.kind, "target": target.name, "value": shown})
    _save_marker(ctx.root, marker)
    return Fault(fault.kind, None if kind.target == "none" else target.name, shown)


def _matches(entry: JsonObject, fault: Fault, target: Target) -> bool:
    if entry["kind"] != fault.kind or entry["target"] != target.name:
        return False
    kind = KINDS[fault.kind]
    return fault.value is None or entry["value"] == kind.format_value(_recorded(kind, fault.value))


def clear_fault(root: str | Path, spec: str | Fault) -> Fault:
    """Undo a fault: restore what it changed from the profile (see module doc for counters).

    Without a VALUE every applied fault of that kind on that target is cleared; with one,
    only those applied with that value. Clearing a fault that is not applied restores the
    same files (harmless) and changes nothing else.
    """
    fault = parse_fault(spec)
    ctx, marker = _ctx(root)
    kind = KINDS[fault.kind]
    target = _resolve(ctx, fault)
    matched = [f for f in marker["faults"] if _matches(f, fault, target)]
    values = [_recorded(kind, f["value"]) for f in matched] or [_value(ctx, fault, target)]
    pristine = pristine_root(ctx.profile.name)
    nvml_fields: list[NvmlField] = []
    for value in values:
        try:
            items = kind.restores(ctx, target, value)
        except ValueError as e:
            raise ValueError(f"fault {fault.spec!r} on profile {ctx.profile.name}: {e}") from None
        for item in items:
            if isinstance(item, NvmlField):
                nvml_fields.append(item)
            else:
                restore_path(pristine, ctx.root, item)
    if nvml_fields:
        ctx.restore_nvml(json.loads((pristine / ".agentd/nvml.json").read_text()), nvml_fields)
    if matched and kind.on_clear:
        kind.on_clear(ctx, target)
    marker["faults"] = [f for f in marker["faults"] if f not in matched]
    _save_marker(ctx.root, marker)
    return Fault(fault.kind, None if kind.target == "none" else target.name, fault.value)


def touched_paths(root: str | Path, spec: str | Fault) -> list[str]:
    """Canonical paths (or ``.agentd/nvml.json``) that clearing this fault restores."""
    fault = parse_fault(spec)
    ctx, _ = _ctx(root)
    target = _resolve(ctx, fault)
    out = []
    for item in KINDS[fault.kind].restores(ctx, target, _value(ctx, fault, target)):
        out.append(".agentd/nvml.json" if isinstance(item, NvmlField) else item)
    return sorted(set(out))


def advancing_paths(root: str | Path, spec: str | Fault) -> list[str]:
    """Counter files this fault advances and that stay advanced after clearing it."""
    fault = parse_fault(spec)
    ctx, _ = _ctx(root)
    kind = KINDS[fault.kind]
    if kind.advancing is None:
        return []
    target = _resolve(ctx, fault)
    return sorted(set(kind.advancing(ctx, target, _value(ctx, fault, target))))
