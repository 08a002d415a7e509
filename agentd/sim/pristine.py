"""The fault-free tree of a profile: written by ``write_profile_tree`` (PCI hierarchy in
pci, the rest in rdma/net/node), and cached once per process by ``pristine_root``, which
faults read original content from when they resolve targets and when they are cleared.

``MARKER`` (``.agentd/simulation.json``) marks a simulator root; it records the profile
and the applied faults (see agentd.sim.faults). ``.agentd/manifest.json`` says the root
holds recorded answers of kind "simulation" (agentd.base.recorded, docs/capture.md).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from agentd import __version__
from agentd.base import recorded
from agentd.sim import net, node, optics, rdma
from agentd.sim.boot import BOOTED_AGO_S, write_boot_time
from agentd.sim.pci import pci_layout, write_pci
from agentd.sim.profiles import PROFILES, Profile
from agentd.sim.tree import write_attr

MARKER = f"{recorded.DIR}/{recorded.SIMULATION}"


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; valid profiles: {', '.join(sorted(PROFILES))}") from None


def write_profile_tree(profile: Profile, root: Path, *, booted_ago_s: float = BOOTED_AGO_S) -> None:
    """Write the fault-free tree for a profile into an empty directory: a node that
    booted ``booted_ago_s`` before now (agentd.sim.boot)."""
    layout = pci_layout(profile)
    write_pci(root, profile, layout)
    rdma.write_rdma(root, profile, layout)
    net.write_netdevs(root, profile, layout)
    optics.write_optics(root, profile, layout)
    node.write_node(root, profile)
    node.write_log(root, str(uuid.uuid4()))  # each build is a new boot
    now = time.time()
    write_boot_time(root, now - booted_ago_s, profile.nr_cpus, now=now)
    write_attr(root / MARKER, json.dumps({"profile": profile.name, "faults": []}, indent=2))
    created = datetime.now(UTC).isoformat(timespec="seconds")
    doc = recorded.manifest("simulation", agentd_version=__version__, created=created, extra={"profile": profile.name})
    write_attr(root / recorded.MANIFEST, json.dumps(doc, indent=2))


_PRISTINE: dict[str, Path] = {}


def pristine_root(profile_name: str) -> Path:
    """The fault-free tree of a profile, built once per process in a temporary directory
    (removed at exit). Faults read original content from it; never write into it."""
    p = _PRISTINE.get(profile_name)
    if p is None or not (p / MARKER).is_file():
        p = Path(tempfile.mkdtemp(prefix=f"agentd-sim-pristine-{profile_name}-"))
        atexit.register(shutil.rmtree, p, True)
        write_profile_tree(get_profile(profile_name), p)
        _PRISTINE[profile_name] = p
    return p
