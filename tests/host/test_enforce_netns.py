"""The enforcer against the real kernel: MTU (and pause, which a veth does not have) on
veth and vxlan devices in a private network namespace (tests/support/netns_enforce.py):
plan, apply, read back with ``ip -d link``, rollback; a change refused for no carrier and
one the device rejects. Skipped where namespaces cannot be made (not root, no unshare)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support.daemon_harness import ROOT

pytestmark = [pytest.mark.proc, pytest.mark.slow]


def _can_unshare() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("unshare", "ip", "mount"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    probe = subprocess.run(["unshare", "-n", "-m", "sh", "-c", "mount -t sysfs sysfs /sys && ip link add t0 type veth peer name t1"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot make a namespace with a veth here: {probe.stderr.strip()[:200]}"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    why = _can_unshare()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("netns")
    config = tmp / "agentd.toml"
    config.write_text(f"""host_root = "/"
host_mode = "live"
[paths]
state_dir = "{tmp}/state"
baseline = "{tmp}/state/baseline.json"
[expect]
roce_mtu = 9000
[enforce]
mode = "plan"
knobs = ["mtu", "pause"]
netdevs = ["v0", "v2", "vx0"]
""")
    out = tmp / "out"
    out.mkdir()
    p = subprocess.run(["unshare", "-n", "-m", sys.executable, "-m", "tests.support.netns_enforce", str(config), str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    steps = {f.stem: json.loads(f.read_text()) for f in out.glob("*.json")}
    assert "refused" not in steps, f"the plan named other targets than the test's devices: {steps.get('refused')}"
    return steps


def _by_key(doc: dict, key: str = "changes") -> dict[str, dict]:
    return {f"{c['knob']}@{c['target']}": c for c in doc[key]}


def _mtu(link_text: str) -> int:
    words = link_text.split()
    return int(words[words.index("mtu") + 1])


def test_plan_shows_the_drift_and_why_not(run: dict[str, dict]) -> None:
    plan = run["plan"]
    assert plan["rc"] == 1  # drift
    c = _by_key(plan["doc"])
    assert (c["mtu@v0"]["current"], c["mtu@v0"]["desired"], c["mtu@v0"]["applicable"]) == (1500, 9000, True)
    assert c["mtu@v0"]["command"] == "ip link set dev v0 mtu 9000"
    assert c["mtu@vx0"]["current"] == 1450 and c["mtu@vx0"]["applicable"]
    assert c["mtu@v2"]["drift"] and not c["mtu@v2"]["applicable"] and "no carrier" in c["mtu@v2"]["blocked"]
    # a veth has no pause parameters: listed, not readable, never drift
    assert all(not c[f"pause@{d}"]["readable"] and not c[f"pause@{d}"]["drift"] for d in ("v0", "v2", "vx0"))


def test_apply_changes_what_may_change_and_the_kernel_reads_it_back(run: dict[str, dict]) -> None:
    a = run["apply"]
    assert a["rc"] == 1  # v2 and vx0 still differ
    r = _by_key(a["doc"], "results")
    assert r["mtu@v0"]["outcome"] == "applied" and r["mtu@v0"]["after"] == 9000
    assert _mtu(a["links"]["v0"]) == 9000  # ip -d link, not agentd, says so


def test_a_port_without_carrier_is_refused_and_left_alone(run: dict[str, dict]) -> None:
    r = _by_key(run["apply"]["doc"], "results")
    assert r["mtu@v2"]["outcome"] == "refused" and "no carrier" in r["mtu@v2"]["detail"]
    assert _mtu(run["apply"]["links"]["v2"]) == 1500


def test_a_value_the_device_rejects_fails_and_leaves_it_as_it_was(run: dict[str, dict]) -> None:
    r = _by_key(run["apply"]["doc"], "results")["mtu@vx0"]
    assert r["outcome"] == "failed" and "Invalid argument" in r["detail"] and r["after"] == 1450
    assert _mtu(run["apply"]["links"]["vx0"]) == 1450


def test_the_journal_holds_every_outcome_with_its_prior_value(run: dict[str, dict]) -> None:
    entries = {(e["knob"], e["target"]): e for e in run["status"]["doc"]["entries"]}
    assert entries[("mtu", "v0")]["state"] in ("applied", "restored") and entries[("mtu", "v0")]["before"] == 1500
    assert entries[("mtu", "vx0")]["state"] == "failed" and entries[("mtu", "v2")]["state"] == "refused"
    assert all(e["by"].startswith("cli:") for e in entries.values())


def test_pause_on_a_device_without_it_is_the_kernels_refusal(run: dict[str, dict]) -> None:
    p = run["pause_set_v0"]
    assert not p["ok"] and p["errno"] == errno.EOPNOTSUPP
    assert run["pause_get_v0"] == {"read": {}, "errors": []}  # no pause parameters: no entry, no error


def test_rollback_restores_the_prior_mtu(run: dict[str, dict]) -> None:
    rb = run["rollback"]
    assert rb["rc"] == 0
    r = _by_key(rb["doc"], "results")
    assert r["mtu@v0"]["outcome"] == "restored" and r["mtu@v0"]["after"] == 1500
    assert _mtu(rb["links"]["v0"]) == 1500
