"""Node simulator: node profiles -> host-root trees, and fault injection.

Public API::

    PROFILES                     name -> Profile (h100-ib, h100-roce, pcie-4gpu, gb200-nvl)
    build_tree(profile, out_dir, *, faults=(), booted_ago_s=BOOTED_AGO_S) -> Path
    set_boot_time(root, booted_at, *, reboot=False)   the node booted then (proc/stat, proc/uptime)
    parse_fault(spec) -> Fault   KIND[@TARGET][=VALUE]; ValueError lists valid kinds
    apply_fault(root, spec) -> Fault        (target/value resolved)
    clear_fault(root, spec) -> Fault
    applied_faults(root) -> list[str]
    root_profile(root) -> str               the profile the root was built from
    FAULT_KINDS, describe_kinds()
    fault_scope: where each kind shows, its finding, how it clears (`simulate --list`)

A host root written here is what agentd's readers see on a node (DESIGN.md section 3):
``sys/`` in the kernel's layout with relative symlinks, ``proc/``, and ``.agentd/``
with ``manifest.json`` (agentd.base.recorded), ``simulation.json`` (profile + applied faults), ``nvml.json`` (NVML answers),
``ethtool/<if>`` (``ethtool -S`` text), ``dcb/<if>`` (``mlnx_qos -i`` text) and
``ethtool-netlink/<if>.json`` (link state, FEC, module EEPROM pages: agentd.sim.optics);
HCAs have mlx5 ``hwmon`` sensors; ``proc/<pid>/comm``
is the node's process table (systemd, and the fabric daemons the profile runs). Beside
them: ``etc/nccl.conf`` (RoCE profiles), ``usr/lib/<triplet>/libibverbs.so.1`` (rdma-core).

nvml.json schema: ``{"driver_version": "550.90.07", "cuda_driver_version": 12040,
"gpus": [{"index", "pci_bus_id" (dddd:bb:dd.f, lowercase), "name", "uuid", optional "vbios_version",
"nvlinks": [{"link", "state": "up"|"down", "remote_pci_bus_id", "remote_type":
"nvswitch"|"gpu", "version": 4, "errors": {"crc_flit", "crc_data", "replay",
"recovery"}, "speed_mb_s"}], "fabric_state": "completed"|"in_progress"|"not_started"|null,
"fabric_status": "success"|<error text>|null, "fabric_cluster_uuid", "fabric_clique_id",
"fabric_health": null|{summary, degraded_bandwidth, ...} (agentd.model.FabricHealth),
"c2c_links": [{"link", "state", "max_bw_mb_s"}], "pcie_replay_errors": 0, "error": null|"GPU is lost"}], optional "hang_s"
(seconds every NVML call blocks), optional "init_error" (nvmlInit fails with it)}``.

Where a regular file cannot behave like sysfs, the tree says so by absence: empty GID
slots have no ``gid_attrs/types|ndevs/<i>`` files (the kernel answers EINVAL), ``lo``
has no ``speed``. An "unreadable" file is a directory (EISDIR), since root reads any
mode. Module docstrings of build, pci, rdma, net, node, faults and fault_kinds give details.
"""

from agentd.sim.boot import BOOTED_AGO_S, set_boot_time
from agentd.sim.build import build_tree
from agentd.sim.fault_kinds import describe_kinds
from agentd.sim.faults import FAULT_KINDS, Fault, applied_faults, apply_fault, clear_fault, parse_fault, root_profile
from agentd.sim.pci import pci_layout
from agentd.sim.profiles import PROFILES, Profile

__all__ = [
    "PROFILES",
    "Profile",
    "build_tree",
    "BOOTED_AGO_S",
    "set_boot_time",
    "pci_layout",
    "Fault",
    "FAULT_KINDS",
    "parse_fault",
    "apply_fault",
    "clear_fault",
    "applied_faults",
    "root_profile",
    "describe_kinds",
]
