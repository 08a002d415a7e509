"""The gate every reader asks before it opens a device's files.

Reading a NIC is not free for the NIC: on mlx5 most of what sysfs shows of an RDMA port
is answered by a firmware command (the PMA port counters by ACCESS_REG on the PPCNT
register, ``drivers/infiniband/hw/mlx5/mad.c`` ``process_pma_cmd`` ->
``mlx5_core_query_ib_ppcnt``; ``hw_counters`` by QUERY_Q_COUNTER and
QUERY_CONG_STATISTICS; port state and rate by QUERY_HCA_VPORT_CONTEXT and the PTYS
register; ``ethtool -S`` by PPCNT; DCB by PFCC; the ECN switches by QUERY_CONG_STATUS;
hwmon by MTMP). A function that refuses them logs ``mlx5_cmd_out_err ... ACCESS_REG(0x805)
... failed`` for every read (node_exporter#3434: the Fabric-Manager-managed limited PFs of
HGX B200/B300). Two answers, both from memory on the common path:

- ``ignore_match``: ``collect.ignore`` names the device (its RDMA name, a netdev name, or
  its PCI function's bus id, which the class entry's link says without opening the
  device). A reader then opens nothing of it and records it as ignored (one fact,
  ``collect.device.ignored``).
- ``firmware_ok(bdf, reads)``: may the firmware-backed files of that function be read?
  No once agentd backed off from it (``back_off``, from kernel-log evidence:
  agentd.collection.backoff), at one of two levels (``BackOffReads``): ``firmware``
  (counters, statistics, DCB, ECN, hwmon) or ``link`` (those and the port's
  state/rate). What costs the device nothing is still read.

Limited PFs are known before the first read: NVIDIA's Fabric Manager user guide (HGX
B200/B300) says the LPF's VPD carries the vendor-specific field ``SMDL`` with the value
``SW_MNG``, and Fabric Manager's prelaunch script finds its management devices by that
field in ``/sys/class/infiniband/*/device/vpd`` (as siderolabs/extensions'
nvidia-fabricmanager wrapper, ``findLpfDevices``, replicates it). The mlx5 driver exposes
no other flag for it (``mlx5_core_is_mgmt_pf`` is BlueField's management PF, not this).
So before the first firmware-backed read of an NVIDIA/Mellanox physical function the gate
reads its ``vpd`` once (root-only, 0600: unknown when refused, then the kernel log decides)
and backs off at once from a function that is an LPF.

The API for a reader (h38's hwmon temperatures included): ``ctx.skip_ignored(kind, name,
class_link)`` before touching a device, ``ctx.firmware_ok(bdf, "firmware")`` before its
firmware-backed files (agentd.host.fs.ReadContext). The state is replaced whole on every
change (``state``), so the collector can tell by identity that a probe must read in full
instead of replaying a journal that reads what is now gated.

``Gate`` is the same question as a plain predicate on a PCI bus id, for the readers that
take one (issue 38's hwmon temperatures and module EEPROM pages): the collector passes
``ctx.firmware_ok`` of its context, so ``collect.ignore`` and the back-off decide for them
too. A refused device is not read at all, and is not an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from types import MappingProxyType

from agentd.base.ids import VENDOR_MELLANOX
from agentd.host.fs import HostRoot, ReadContext, bdf_in_link
from agentd.model import BackedOff, BackOffReads

CLASS_LINKS = ("sys/class/infiniband", "sys/class/net")
PCI_DEVICES = "sys/bus/pci/devices"
LPF_VPD_FIELD = b"SMDL=SW_MNG"
LPF_EVIDENCE = "VPD field SMDL=SW_MNG: a Fabric Manager limited PF (its firmware refuses the counter reads)"
VPD_MAX_BYTES = 32768  # the PCI VPD address space (15 bits)
_LEVEL = {"firmware": 1, "link": 2}


def covers(b: BackedOff | None, reads: BackOffReads) -> bool:
    """Whether back-off ``b`` stops reads of level ``reads``."""
    return b is not None and _LEVEL[b.reads] >= _LEVEL[reads]


@dataclass(frozen=True)
class GateState:
    """What the gate says now; replaced whole on every change."""

    ignore: tuple[str, ...] = ()
    backed_off: Mapping[str, BackedOff] = field(default_factory=lambda: MappingProxyType({}))


class DeviceGate:
    """The gate of one host root (one per collector, shared by its copies and threads)."""

    def __init__(self, host: HostRoot | None = None, ignore: Sequence[str] = ()):
        self.host = host  # where limited PFs' VPD is read; None: not yet bound (no VPD read)
        self.state = GateState(tuple(ignore))
        self._lock = threading.Lock()
        self._vpd_checked: set[str] = set()

    # -- configuration ------------------------------------------------------------
    def bind(self, host: HostRoot, ignore: Sequence[str]) -> None:
        """The collector's host root (kept once set) and its ``collect.ignore`` patterns."""
        if self.host is None:
            self.host = host
        self.configure(ignore)

    def configure(self, ignore: Sequence[str]) -> None:
        """New ``collect.ignore`` patterns (a reload); back-offs stay (they are the boot's)."""
        with self._lock:
            if tuple(ignore) != self.state.ignore:
                self.state = replace(self.state, ignore=tuple(ignore))

    # -- collect.ignore -------------------------------------------------------------
    @property
    def ignoring(self) -> bool:
        return bool(self.state.ignore)

    def ignore_match(self, ctx: ReadContext, name: str, bdf: str | None) -> str | None:
        """The pattern that ignores a device named ``name`` on function ``bdf``: one
        matching the name or the bus id, or one matching another name of the same function
        (an RDMA device or netdev on it). None: read it."""
        patterns = self.state.ignore
        for p in patterns:
            if fnmatchcase(name, p) or (bdf is not None and fnmatchcase(bdf, p)):
                return p
        if bdf is None or not patterns:
            return None
        return self._functions(ctx).get(bdf)

    def _functions(self, ctx: ReadContext) -> dict[str, str]:
        """bus id -> pattern, for the functions an ignored RDMA device or netdev name is on:
        the class entries' link targets say (a readlink each; nothing of the device is
        opened). Once per context (one probe run)."""
        memo = ctx.gate_memo
        if memo is not None:
            return memo
        memo = ctx.gate_memo = {}
        patterns = self.state.ignore
        for class_dir in CLASS_LINKS:
            for name in ctx.listdir(class_dir):
                p = next((p for p in patterns if fnmatchcase(name, p)), None)
                if p is None:
                    continue
                bdf = bdf_in_link(ctx.link_target(f"{class_dir}/{name}"))
                if bdf is not None:
                    memo.setdefault(bdf, p)
        return memo

    # -- firmware back-off ------------------------------------------------------------
    def firmware_ok(self, bdf: str | None, reads: BackOffReads = "firmware") -> bool:
        if bdf is None:
            return True
        if covers(self.state.backed_off.get(bdf), reads):
            return False
        if bdf not in self._vpd_checked:
            self._check_limited_pf(bdf)
            return not covers(self.state.backed_off.get(bdf), reads)
        return True

    def back_off(self, record: BackedOff) -> bool:
        """Stop ``record.reads`` of its function for the rest of the boot. False when an
        equal or wider back-off is already in place."""
        with self._lock:
            now = self.state.backed_off.get(record.pci_bus_id)
            if covers(now, record.reads):
                return False
            backed = dict(self.state.backed_off)
            backed[record.pci_bus_id] = record
            self.state = replace(self.state, backed_off=MappingProxyType(backed))
            return True

    def _check_limited_pf(self, bdf: str) -> None:
        """Read the function's VPD once, if it is an NVIDIA/Mellanox physical function, and
        back off at once when it names a limited PF. An unreadable VPD says nothing."""
        with self._lock:
            if bdf in self._vpd_checked or self.host is None:
                return
            self._vpd_checked.add(bdf)
        # Not recorded by ``agentd capture``: the VPD holds the card's serial number.
        with ReadContext(replace(self.host, recorder=None), "gate") as ctx:
            fn = f"{PCI_DEVICES}/{bdf}"
            if ctx.integer(f"{fn}/vendor", base=16) != VENDOR_MELLANOX or ctx.exists(f"{fn}/physfn"):
                return
            vpd = ctx.raw(f"{fn}/vpd", max_bytes=VPD_MAX_BYTES)
        if vpd is not None and LPF_VPD_FIELD in vpd:
            self.back_off(BackedOff(pci_bus_id=bdf, reads="firmware", reason="limited_pf", evidence=LPF_EVIDENCE, since=time.time()))


Gate = Callable[[str], bool]  # PCI bus id (dddd:bb:dd.f) -> may agentd run firmware reads on it now


def allow_all(bus_id: str) -> bool:
    """The gate when nothing restricts firmware reads (tests, a reader used alone)."""
    return True
