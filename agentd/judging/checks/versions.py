"""Versions the node must run (``[expect] versions``), on the node itself.

- ``version.below_minimum`` (warning, node): a field pinned as ``'>=V'`` is older than V
  (versions ordered token by token: "28.9" < "28.10"; every value of a field with several,
  e.g. two HCA firmware versions, must satisfy it);
- ``version.mismatch`` (warning, node): a field pinned as ``'V'`` / ``'==V'`` is not V.

A field the node does not have (an inbox mlx5_core has no version; no NVML) is not judged.
The fleet view (each node against its peers) is Prometheus' job: agentd_node_fingerprint_info.
"""

from __future__ import annotations

from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding
from agentd.judging.fingerprint import expectation_miss, versions
from agentd.model import Finding

LABELS = {
    "hca_fw": "HCA firmware",
    "mlx5_core": "mlx5_core (MLNX_OFED/DOCA-OFED)",
    "rdma_core": "rdma-core",
    "nvidia_driver": "NVIDIA driver",
    "vbios": "GPU VBIOS",
    "kernel": "kernel",
}

# field -> how to install a given version (formatted with {wanted})
HOW = {
    "hca_fw": "update the HCA firmware to {wanted} (`mlxfwmanager --query`, then `mlxfwmanager -u -i <image>` or "
              "`flint -d <bdf> -i <image> burn`), then `mlxfwreset -d <bdf> reset` or reboot",
    "mlx5_core": "install MLNX_OFED/DOCA-OFED {wanted} (`ofed_info -s` shows the installed one), then restart the "
                 "driver (`/etc/init.d/openibd restart`) or reboot",
    "rdma_core": "install rdma-core {wanted} (libibverbs, from the distribution or the DOCA/OFED repository) and "
                 "restart the RDMA applications",
    "nvidia_driver": "install NVIDIA driver {wanted} together with its fabric manager and nvidia-peermem, then reboot "
                     "(`nvidia-smi` shows the running one)",
    "vbios": "flash VBIOS {wanted} with the server vendor's GPU firmware package (`nvidia-smi -q | grep VBIOS` shows it)",
    "kernel": "boot kernel {wanted} (rebuild the OFED and NVIDIA DKMS modules for it); `uname -r` shows the running one",
}


def check_versions(inp: CheckInput) -> list[Finding]:
    """version.below_minimum, version.mismatch."""
    pinned = inp.config.expect.versions
    if not pinned:
        return []
    have = versions(inp.snapshot, inp.resolved_roles())
    out = []
    for field in sorted(pinned):
        spec = pinned[field]
        value = have.get(field)
        miss = expectation_miss(value, spec)
        if miss is None or miss[0] == "unknown" or value is None:
            continue
        kind, wanted = miss
        label = LABELS.get(field, field)
        how = HOW.get(field, "install {wanted}").format(wanted=wanted)
        if kind == "below_minimum":
            message = f"{field}: {label} {value} is below the minimum {wanted} (expect.versions.{field} = '{spec}')"
            remediation = f"upgrade: {how}; or lower expect.versions.{field} if {value} is approved"
        else:
            message = f"{field}: {label} {value}, expected exactly {wanted} (expect.versions.{field} = '{spec}')"
            remediation = f"bring it in line with the pool: {how}; or change expect.versions.{field}"
        out.append(finding(f"version.{kind}", "warning", NODE, message, remediation, measured=value, expected=wanted))
    return out
