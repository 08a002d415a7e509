"""`agentd check --npd CONCERN`, run as node-problem-detector runs a custom plugin: a
subprocess with a timeout; exit 0 OK, 1 NonOK, 2 Unknown; stdout one line, the condition's
message (NPD keeps its first max_output_length bytes, 80 by default).

Every case runs the command as a process, as NPD does: past its deadline the command ends
its process with ``os._exit`` (a worker may sit in a hung driver call), which in this
process would end the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentd import cli, npd, sim
from agentd.model import Finding, NodeSnapshot, ProbeStatus
from tests.support.check_snapshots import node

HANG_GUARD_S = 60  # a guard against a wedged test, not a timing assertion (NPD itself would kill us)


def run_npd(root: Path, concern: str, *extra: str, cfg: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = ["--config", str(cfg)] if cfg is not None else []
    return subprocess.run(
        [sys.executable, "-m", "agentd", "check", "--npd", concern, "--host-root", str(root), *args, *extra],
        capture_output=True, text=True, timeout=HANG_GUARD_S, env={"PATH": "/usr/bin:/bin"},
    )


def one_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.stdout.endswith("\n") and p.stdout.count("\n") == 1, p.stdout
    return p.stdout.strip()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return sim.build_tree("h100-ib", tmp_path_factory.mktemp("npd") / "root")


@pytest.mark.proc
@pytest.mark.tree
@pytest.mark.parametrize("concern", cli.NPD_CONCERNS)
def test_healthy_node_is_ok_for_every_concern(healthy, concern):
    p = run_npd(healthy, concern)
    assert p.returncode == npd.NPD_OK, p.stdout + p.stderr
    assert one_line(p) == f"{concern} ok"


@pytest.mark.proc
@pytest.mark.tree
@pytest.mark.parametrize("fault,concern,code", [
    ("fabric_incomplete", "fabric", "nvlink.fabric.incomplete"),
    ("nvlink_down@gpu3", "nvlink", "nvlink.link.down"),
    ("no_gdr", "gdr", "gdr.unavailable"),
    ("acs_on", "pcie", "pcie.acs.redirect"),
    ("port_down@mlx5_3", "net", "ib.port.down"),
])
def test_a_critical_finding_of_the_concern_is_nonok(tmp_path, fault, concern, code):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=[fault])
    p = run_npd(root, concern)
    assert p.returncode == npd.NPD_PROBLEM, p.stdout + p.stderr
    assert one_line(p).startswith(code)  # the useful part first: NPD cuts the rest
    others = [c for c in cli.NPD_CONCERNS if c != concern and not (concern == "fabric" and c == "nvlink")]
    for other in others[:2]:  # a fault of one concern leaves the others OK
        assert run_npd(root, other).returncode == npd.NPD_OK


@pytest.mark.proc
@pytest.mark.tree
def test_fabric_incomplete_names_the_gpus_and_the_state(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["fabric_incomplete"])
    line = one_line(run_npd(root, "fabric"))
    assert line.startswith("nvlink.fabric.incomplete gpu0,gpu1,gpu2+5: ") and "in_progress" in line


@pytest.mark.proc
@pytest.mark.tree
def test_peermem_gone_with_dmabuf_left_is_ok(tmp_path):
    """GPUDirect RDMA still works through dma-buf (gdr.path ok): not a GDR problem."""
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["peermem_gone"])
    p = run_npd(root, "gdr")
    assert p.returncode == npd.NPD_OK and one_line(p) == "gdr ok"


@pytest.mark.proc
@pytest.mark.tree
def test_a_warning_stays_ok_and_is_mentioned(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["pcie_downtrained"])
    p = run_npd(root, "pcie")
    assert p.returncode == npd.NPD_OK
    assert one_line(p).startswith("pcie ok; warning pcie.link.downtrained ")


@pytest.mark.proc
@pytest.mark.tree
def test_a_withheld_critical_never_makes_nonok(tmp_path):
    """Boot grace withholds nvlink.fabric.incomplete on a node that booted a minute ago."""
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["fabric_incomplete"], booted_ago_s=60)
    cfg = tmp_path / "agentd.toml"
    cfg.write_text("[lifecycle]\nboot_grace_s = 3600\n")
    p = run_npd(root, "fabric", cfg=cfg)
    assert p.returncode == npd.NPD_OK, p.stdout
    assert one_line(p).startswith("fabric ok; withheld nvlink.fabric.incomplete ")


@pytest.mark.proc
@pytest.mark.tree
def test_hung_nvml_is_unknown_within_the_deadline(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["nvml_hang=3600"])
    # NVML gets half the deadline; the other half must hold the rest of a collection even
    # on a loaded runner (3 s was too little beside two other test workers on two cores)
    p = run_npd(root, "fabric", "--npd-timeout", "8")
    assert p.returncode == npd.NPD_UNKNOWN
    assert one_line(p).startswith("unknown: ") and "timed out" in p.stdout
    assert run_npd(root, "gdr", "--npd-timeout", "8").returncode == npd.NPD_OK  # judged without NVML


@pytest.mark.proc
@pytest.mark.tree
def test_a_collection_past_the_deadline_answers_timed_out(healthy):
    """The deadline path itself: a collection that never returns (as in a hung driver call)."""
    code = ("import sys, threading; from agentd import cli; "
            "cli._collect = lambda *a, **k: threading.Event().wait(); "
            f"sys.exit(cli.main(['check', '--npd', 'fabric', '--npd-timeout', '1', '--host-root', {str(healthy)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S,
                       env={"PATH": "/usr/bin:/bin"}, cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == npd.NPD_UNKNOWN
    assert one_line(p) == "unknown: timed out: fabric not judged within 1 s (--npd-timeout)"


@pytest.mark.proc
@pytest.mark.tree
def test_maintenance_answers_ok(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["fabric_incomplete"])
    on = subprocess.run([sys.executable, "-m", "agentd", "maintenance", "on", "--host-root", str(root), "--reason", "swap tray"],
                        capture_output=True, text=True, timeout=HANG_GUARD_S, env={"PATH": "/usr/bin:/bin"})
    assert on.returncode == 0, on.stderr
    p = run_npd(root, "fabric")
    assert p.returncode == npd.NPD_OK and one_line(p) == "maintenance: swap tray"


@pytest.mark.proc
def test_unusable_root_is_unknown_with_a_message(tmp_path):
    p = run_npd(tmp_path / "nowhere", "fabric")
    assert p.returncode == npd.NPD_UNKNOWN and one_line(p).startswith("unknown: host root ")


@pytest.mark.proc
def test_unknown_concern_is_refused_by_the_parser(healthy):
    assert run_npd(healthy, "storage").returncode not in (npd.NPD_OK, npd.NPD_PROBLEM)


# ---------------------------------------------------------------------------
# the mapping itself (pure)


def test_cli_concerns_are_the_mappings():
    assert tuple(npd.CONCERNS) == cli.NPD_CONCERNS == tuple(npd.CONCERN_PROBES)


@pytest.mark.parametrize("code,concern", [
    ("nvlink.fabric.unassigned", "fabric"), ("nvlink.domain.split", "fabric"), ("fabric.imex.down", "fabric"),
    ("nvlink.link.slow", "nvlink"), ("nvlink.c2c.down", "nvlink"), ("gpu.lost", "nvlink"), ("nvml.blind", "nvlink"),
    ("gdr.unavailable", "gdr"), ("pcie.acs.redirect", "pcie"), ("gpu.pcie.replay", "pcie"),
    ("ib.port.down", "net"), ("roce.pfc.disabled", "net"), ("mtu.mismatch", "net"),
])
def test_each_code_has_one_concern(code, concern):
    assert [c for c in npd.CONCERNS if npd.in_concern(c, code)] == [concern]


def _f(code: str, subject_gpu: int, severity: str = "critical", withheld: str | None = None) -> Finding:
    from agentd.judging.findings import finding, gpu_subject

    f = finding(code, severity, gpu_subject(subject_gpu), "a message", "a hint")  # type: ignore[arg-type]
    return f.model_copy(update={"withheld": withheld}) if withheld else f


def _with_probe(s: NodeSnapshot, name: str, **changes) -> NodeSnapshot:
    return s.model_copy(update={"probes": tuple(p.model_copy(update=changes) if p.name == name else p for p in s.probes)})


def test_a_failed_probe_is_unknown_but_evidence_wins():
    s = _with_probe(node(), "nvml", ok=False)
    assert npd.answer("fabric", s, []) == npd.NpdAnswer(npd.NPD_UNKNOWN, "unknown: fabric not judged: nvml probe failed")
    assert npd.answer("gdr", s, []).exit_code == npd.NPD_OK
    found = [_f("nvlink.fabric.incomplete", 1)]
    assert npd.answer("fabric", s, found).exit_code == npd.NPD_PROBLEM


def test_nvml_blind_is_unknown_for_fabric_and_a_problem_for_nvlink():
    from agentd.model import NvmlInfo

    s = node().model_copy(update={"nvml": NvmlInfo(available=False, error="Driver Not Loaded")})
    blind = finding_blind = _f("nvml.blind", 0)
    assert npd.answer("fabric", s, [blind]).exit_code == npd.NPD_UNKNOWN
    assert npd.answer("nvlink", s, [finding_blind]).exit_code == npd.NPD_PROBLEM
    held = _f("nvml.blind", 0, withheld="boot_grace")
    assert npd.answer("nvlink", s, [held]).exit_code == npd.NPD_UNKNOWN


def test_message_is_one_line_with_codes_grouped():
    found = [_f("nvlink.c2c.down", i) for i in range(5)] + [_f("gpu.lost", 6), _f("nvlink.link.slow", 1, "warning")]
    a = npd.answer("nvlink", node(), found)
    assert a.exit_code == npd.NPD_PROBLEM
    assert a.message.startswith("gpu.lost gpu6; nvlink.c2c.down gpu0,gpu1,gpu2+2: ") or \
        a.message.startswith("nvlink.c2c.down gpu0,gpu1,gpu2+2; gpu.lost gpu6: ")
    assert "\n" not in a.message and "nvlink.link.slow" not in a.message


def test_probe_statuses_are_what_the_snapshot_says():
    s = node()
    assert all(isinstance(p, ProbeStatus) for p in s.probes)
    assert npd.answer("net", _with_probe(s, "ib", timed_out=True), []).message == "unknown: net not judged: ib probe timed out"
