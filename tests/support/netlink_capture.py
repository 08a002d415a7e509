"""Capture the netlink requests iproute2 and ethtool send for the changes agentd makes
(tests/fixtures/netlink/requests.txt), so agentd's own messages can be compared with
them byte for byte.

How: in a private network namespace (``unshare -n``) with a veth pair, each command
runs under ``strace -e write=all``, which dumps every byte a ``sendto``/``sendmsg`` hands
the kernel. A veth has no DCB, pause or ... support, so the kernel refuses the change:
the request is still the tool's own, sent as it always is. ``dcb pfc set`` first reads
the device's ``struct ieee_pfc`` and writes it back changed (iproute2 dcb/dcb_pfc.c), so
that one read is answered by ``fake_dcb_get.c`` (an LD_PRELOAD stand-in for the kernel's
reply: PFC capable of 8 priorities, on none); its SET goes to the kernel as dcb wrote it.

Run as root: ``python -m tests.support.netlink_capture > tests/fixtures/netlink/requests.txt``.
Each line: ``name<TAB>the command<TAB>hex of the request``; several requests of one
command (ethtool resolving its genetlink family first) are ``name``, ``name.1``, ...
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "netlink"
DEV = "v0"
COMMANDS: dict[str, list[str]] = {
    "mtu": ["ip", "link", "set", "dev", DEV, "mtu", "9000"],
    "pause_get": ["ethtool", "-a", DEV],
    "pause_set": ["ethtool", "-A", DEV, "rx", "off", "tx", "off"],
    "app_add": ["dcb", "app", "add", "dev", DEV, "dscp-prio", "26:3"],
    "app_del": ["dcb", "app", "del", "dev", DEV, "dscp-prio", "26:0"],
    "pfc_set": ["dcb", "pfc", "set", "dev", DEV, "prio-pfc", "3:on"],  # with fake_dcb_get.so
}
NEEDS_SHIM = {"pfc_set"}
_DUMP = re.compile(r"^ \| [0-9a-f]{5}  ((?:[0-9a-f]{2} {1,2}){1,16})")


def missing_tools() -> list[str]:
    return [t for t in ("unshare", "strace", "ip", "ethtool", "dcb", "cc") if shutil.which(t) is None]


def parse_strace(text: str) -> list[bytes]:
    """The bytes of each sendto/sendmsg in ``strace -e write=all`` output, in order."""
    out: list[bytes] = []
    cur: bytearray | None = None
    for line in text.splitlines():
        if line.startswith(("sendto(", "sendmsg(")):
            if cur:
                out.append(bytes(cur))
            cur = bytearray()
            continue
        m = _DUMP.match(line)
        if m and cur is not None:
            cur += bytes.fromhex(m.group(1).replace(" ", ""))
    if cur:
        out.append(bytes(cur))
    return out


def capture() -> dict[str, tuple[str, bytes]]:
    """name -> (command line, request bytes), captured now (root; raises if it cannot)."""
    with tempfile.TemporaryDirectory(prefix="agentd-nlcap-") as tmp:
        shim = Path(tmp) / "fake_dcb_get.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(HERE / "fake_dcb_get.c"), "-ldl"], check=True)
        lines = [f"ip link add {DEV} type veth peer name v1"]
        for name, argv in COMMANDS.items():
            pre = f"-E LD_PRELOAD={shim} " if name in NEEDS_SHIM else ""
            lines.append(f"strace {pre}-qq -e trace=sendto,sendmsg -e write=all -o {tmp}/{name}.trace {' '.join(argv)} >/dev/null 2>&1 || true")
        subprocess.run(["unshare", "-n", "sh", "-c", "\n".join(lines)], check=True, env={**os.environ, "LC_ALL": "C"})
        out: dict[str, tuple[str, bytes]] = {}
        for name, argv in COMMANDS.items():
            msgs = parse_strace(Path(tmp, f"{name}.trace").read_text())
            if not msgs:
                raise RuntimeError(f"{name}: no request captured")
            # the change itself is the last request; earlier ones (a genetlink family
            # lookup) keep their order as name.1, name.2, ...
            *before, last = msgs
            out[name] = (" ".join(argv), last)
            for i, m in enumerate(before, 1):
                out[f"{name}.{i}"] = (" ".join(argv), m)
        return out


def load(path: Path = HERE / "requests.txt") -> dict[str, tuple[str, bytes]]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, cmd, hexed = line.split("\t")
            out[name] = (cmd, bytes.fromhex(hexed))
    return out


def main() -> int:
    print("# netlink requests of iproute2 6.1 and ethtool 6.1 (Debian 12) on a veth; made by tests/support/netlink_capture.py")
    print("# name\tcommand\trequest (hex; nlmsg_seq, the genetlink family id and the ifindex differ per run)")
    for name, (cmd, data) in sorted(capture().items()):
        print(f"{name}\t{cmd}\t{data.hex()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
