"""Driver of tests/host/test_enforce_netns.py, run inside a private network and mount
namespace (``unshare -n -m``): sysfs is mounted afresh so ``/sys/class/net`` is this
namespace's, veth and vxlan devices are made, and ``agentd enforce`` runs against the
real kernel. Nothing outside the namespace is touched; it goes away with this process.

Devices: ``v0``-``v1`` a veth pair, both up (carrier); ``v2``-``v3`` a veth whose peer is
down (``v2``: NO-CARRIER); ``vx0`` a vxlan over ``v0`` (carrier; its MTU can be at most
``v0``'s minus 50, so 9000 is refused while ``v0`` is at 1500).

``python -m tests.support.netns_enforce CONFIG OUTDIR``: each step's stdout, exit status and
``ip -d link`` goes to OUTDIR/<step>.json. The apply runs only when the plan names no
target but these devices.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEVICES = ("v0", "v2", "vx0")
SETUP = [
    ["mount", "-t", "sysfs", "sysfs", "/sys"],
    ["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
    ["ip", "link", "set", "v0", "up"],
    ["ip", "link", "set", "v1", "up"],
    ["ip", "link", "add", "v2", "type", "veth", "peer", "name", "v3"],
    ["ip", "link", "set", "v2", "up"],
    ["ip", "link", "add", "vx0", "type", "vxlan", "id", "7", "dev", "v0", "dstport", "4789"],
    ["ip", "link", "set", "vx0", "up"],
]


def links() -> dict[str, str]:
    return {d: subprocess.run(["ip", "-d", "link", "show", "dev", d], capture_output=True, text=True).stdout for d in DEVICES}


def agentd(config: str, *args: str) -> dict[str, object]:
    p = subprocess.run([sys.executable, "-m", "agentd", "enforce", *args, "--config", config, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
    return {"rc": p.returncode, "doc": doc, "stderr": p.stderr[-4000:], "links": links()}


def main(config: str, out: str) -> int:
    o = Path(out)
    for cmd in SETUP:
        subprocess.run(cmd, check=True, capture_output=True)
    steps: dict[str, dict[str, object]] = {"plan": agentd(config, "plan")}
    plan = steps["plan"]["doc"]
    targets = {c["target"] for c in plan["changes"]} if isinstance(plan, dict) else {"?"}
    if not targets <= set(DEVICES):
        steps["refused"] = {"targets": sorted(targets)}
    else:
        from agentd.host import pause

        steps["apply"] = agentd(config, "apply", "--yes")
        steps["status"] = agentd(config, "status")
        out_pause = pause.set_pause("v0", False, False, 2.0)
        steps["pause_set_v0"] = {"ok": out_pause.ok, "errno": out_pause.errno, "detail": out_pause.detail}
        from agentd.host.fs import HostRoot, ReadContext

        ctx = ReadContext(HostRoot.at("/", "live"), "dcb")
        steps["pause_get_v0"] = {"read": {k: v.model_dump() for k, v in pause.read_pause(ctx, ["v0"]).items()},
                                 "errors": [e.model_dump() for e in ctx.errors]}
        steps["rollback"] = agentd(config, "rollback", "--yes")
    for name, doc in steps.items():
        (o / f"{name}.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
