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

``dcb apptrust`` came with iproute2 6.2, after Debian 12's 6.1: a ``dcb`` without it
(``dcb help`` does not list it) leaves those requests out of a capture, and
``--dcb PATH`` runs a newer one, built from iproute2's source, in its place.

Run as root: ``python -m tests.support.netlink_capture > tests/fixtures/netlink/requests.txt``;
``--dcb PATH --only apptrust_dscp,apptrust_pcp`` prints only those lines, after a comment
naming the tools' versions, to add to the file.
Each line: ``name<TAB>the command<TAB>hex of the request``; several requests of one
command (ethtool resolving its genetlink family first) are ``name``, ``name.1``, ...
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Collection, Mapping

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "netlink"
DEV = "v0"
COMMANDS: dict[str, list[str]] = {
    "mtu": ["ip", "link", "set", "dev", DEV, "mtu", "9000"],
    "pause_get": ["ethtool", "-a", DEV],
    "pause_set": ["ethtool", "-A", DEV, "rx", "off", "tx", "off"],
    "app_add": ["dcb", "app", "add", "dev", DEV, "dscp-prio", "26:3"],
    "app_del": ["dcb", "app", "del", "dev", DEV, "dscp-prio", "26:0"],
    "pfc_set": ["dcb", "pfc", "set", "dev", DEV, "prio-pfc", "3:on"],  # with fake_dcb_get.so
    "apptrust_dscp": ["dcb", "apptrust", "set", "dev", DEV, "order", "dscp", "pcp"],
    "apptrust_pcp": ["dcb", "apptrust", "set", "dev", DEV, "order", "pcp"],
}
NEEDS_SHIM = {"pfc_set"}
APPTRUST = {"apptrust_dscp", "apptrust_pcp"}  # iproute2 >= 6.2
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


def has_apptrust(dcb: str = "dcb") -> bool:
    """Whether this ``dcb`` knows ``apptrust`` (its help lists the objects it knows)."""
    r = subprocess.run([dcb, "help"], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    return "apptrust" in r.stdout + r.stderr


def capture(tools: Mapping[str, str] | None = None, only: Collection[str] | None = None) -> dict[str, tuple[str, bytes]]:
    """name -> (command line, request bytes), captured now (root; raises if it cannot).
    ``tools``: a tool's name -> the program to run for it (a dcb built from source);
    ``only``: these commands alone. The apptrust commands are left out where the dcb run
    has no apptrust."""
    tools = tools or {}
    names = [n for n in COMMANDS if only is None or n in only]
    if not has_apptrust(tools.get("dcb", "dcb")):
        names = [n for n in names if n not in APPTRUST]
    with tempfile.TemporaryDirectory(prefix="agentd-nlcap-") as tmp:
        shim = Path(tmp) / "fake_dcb_get.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(HERE / "fake_dcb_get.c"), "-ldl"], check=True)
        lines = [f"ip link add {DEV} type veth peer name v1"]
        for name in names:
            tool, *args = COMMANDS[name]
            pre = f"-E LD_PRELOAD={shim} " if name in NEEDS_SHIM else ""
            lines.append(f"strace {pre}-qq -e trace=sendto,sendmsg -e write=all -o {tmp}/{name}.trace {tools.get(tool, tool)} {' '.join(args)} >/dev/null 2>&1 || true")
        subprocess.run(["unshare", "-n", "sh", "-c", "\n".join(lines)], check=True, env={**os.environ, "LC_ALL": "C"})
        out: dict[str, tuple[str, bytes]] = {}
        for name in names:
            argv = COMMANDS[name]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.netlink_capture")
    ap.add_argument("--dcb", default="dcb", help="the dcb program to run (one built from iproute2's source)")
    ap.add_argument("--only", help="comma-separated names: print only their lines, to add to the file")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    captured = capture({"dcb": args.dcb}, only)
    if only is None:
        print("# netlink requests of iproute2 6.1 and ethtool 6.1 (Debian 12) on a veth; made by tests/support/netlink_capture.py")
        print("# name\tcommand\trequest (hex; nlmsg_seq, the genetlink family id and the ifindex differ per run)")
    else:
        version = subprocess.run([args.dcb, "-V"], capture_output=True, text=True).stdout.strip()
        print(f"# {', '.join(sorted(only))}: {version}; made by tests/support/netlink_capture.py --dcb DCB --only {args.only}")
    for name, (cmd, data) in sorted(captured.items()):
        print(f"{name}\t{cmd}\t{data.hex()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
