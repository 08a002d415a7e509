"""The GPU check's comparison (tests/gpu/compare.py) on real published outputs: nvidia-smi
-q -x of four drivers (telegraf's test data), nvidia-smi topo -m and nvlink -s, NCCL's own
topology dumps and INFO logs quoted in NCCL issues, nccl-tests output parsed by agentd
(tests/fixtures/SOURCES.md, tests/ncclbench/data/SOURCES.md). Pure and fast: the folder a
device run writes is judged here the same way."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from agentd.ncclbench.runners import BenchRequest, run_nccl_tests
from tests.gpu import compare as cmp
from tests.gpu import gpu_check as gc
from tests.support.bench_data import data as bench_data
from tests.support.cli import run_cli
from tests.support.paths import FIXTURES, TESTS

XML = FIXTURES / "nvidia-smi-xml"
TOPO = FIXTURES / "nccl-topo"
LOGS = FIXTURES / "nccl-logs"
OUTPUTS = FIXTURES / "outputs"
MiB = 1 << 20


def smi(name: str) -> cmp.SmiLog:
    return cmp.parse_smi_xml((XML / f"telegraf-{name}.xml").read_text())


def by_field(rows: list[cmp.Row], subject: str | None = None) -> dict[str, cmp.Row]:
    return {r.field: r for r in rows if subject is None or r.subject == subject}


# ---------------------------------------------------------------------------
# nvidia-smi -q -x


def test_smi_xml_of_four_drivers_reads_what_the_files_say():
    a100 = smi("a100-sxm4-v12")
    assert (a100.driver_version, a100.cuda_version, a100.attached_gpus, len(a100.gpus)) == ("535.54.03", "12.2", 4, 1)
    g = a100.gpus[0]
    assert (g.bus_id, g.name, g.uuid, g.vbios) == ("00000000:01:00.0", "NVIDIA A100-SXM4-80GB", "GPU-513536b6-7d19-9063-b049-1e69664bb298", "92.00.36.00.02")
    assert (g.current_gen, g.max_gen, g.max_device_gen, g.max_host_gen, g.current_width, g.max_width) == (4, 4, 4, 4, 16, 16)
    assert (g.persistence_mode, g.fabric_state, g.fabric_status, g.replay_counter) == ("Disabled", None, None, 0)  # fabric N/A
    ada = smi("rtx-4000-sff-ada-v13")  # tab-indented, DTD v13
    assert (ada.driver_version, ada.cuda_version) == ("595.84", "13.2")
    assert (ada.gpus[0].bus_id, ada.gpus[0].persistence_mode, ada.gpus[0].current_gen, ada.gpus[0].max_gen) == ("00000000:06:00.0", "Enabled", 1, 4)
    t4 = smi("tesla-t4")  # DTD v11: no fabric element, no device/host max gens
    assert t4.gpus[0].name == "Tesla T4" and t4.gpus[0].fabric_state is None and t4.gpus[0].max_device_gen is None
    assert t4.gpus[0].max_gen == 3
    p400 = smi("quadro-p400")  # driver 418, no DOCTYPE
    assert (p400.driver_version, p400.gpus[0].bus_id, p400.gpus[0].current_gen, p400.gpus[0].max_width) == ("418.43", "00000000:43:00.0", 1, 16)


def test_smi_xml_that_is_not_nvidia_smis_is_refused():
    with pytest.raises(ValueError, match="not XML"):
        cmp.parse_smi_xml("Failed to initialize NVML: Driver/library version mismatch\n")
    with pytest.raises(ValueError, match="nvidia_smi_log"):
        cmp.parse_smi_xml("<system version='1'/>")


def agentd_doc_for_a100() -> dict:
    """What `agentd inspect --format json` says on the A100 of telegraf's file when agentd
    and nvidia-smi agree (the keys as agentd.views.inspect_view writes them, checked by
    test_agentd_view_reads_a_real_inspect_document)."""
    bdf, port = "0000:01:00.0", "0000:00:01.0"
    return {
        "nvml": {"driver_version": "535.54.03", "cuda_driver_version": 12020, "gpus": [
            {"index": 0, "pci_bus_id": bdf, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
             "vbios_version": "92.00.36.00.02", "fabric_state": "not_supported", "fabric_status": None, "pcie_replay_errors": 0,
             "nvlinks": []},
        ]},
        "gpus": [{"index": 0, "pci_bus_id": bdf, "numa_node": None}],
        "pci": [
            {"bdf": bdf, "current_link_speed_gts": 16.0, "current_link_width": 16, "max_link_speed_gts": 16.0, "max_link_width": 16, "parent_chain": [port]},
            {"bdf": port, "current_link_speed_gts": 16.0, "current_link_width": 16, "max_link_speed_gts": 16.0, "max_link_width": 16, "parent_chain": []},
        ],
    }  # fmt: skip


def test_nvml_fields_agree_with_nvidia_smi_where_agentd_read_the_same():
    rows = cmp.nvml_rows(smi("a100-sxm4-v12"), cmp.AgentdView(agentd_doc_for_a100()), topo_m=None, nvlink="")
    gpu = by_field(rows, "gpu0")
    for field in ("bus_id.nvml_spelling", "bus_id.sysfs_spelling", "name", "uuid", "vbios_version", "fabric.state", "fabric.status",
                  "pcie.replay_counter", "pcie.current_gen", "pcie.max_gen", "pcie.max_host_gen", "pcie.current_width",
                  "pcie.max_width", "nvlink.count", "nvlink.states"):  # fmt: skip
        assert gpu[field].outcome == "match", gpu[field]
    assert dict(gpu["bus_id.nvml_spelling"].values) == {"agentd": "00000000:01:00.0", "nvidia-smi": "00000000:01:00.0"}
    assert gpu["persistence_mode"].outcome == "missing"  # agentd does not read it: said, not hidden
    node = by_field(rows, "node")
    assert node["driver_version"].outcome == node["cuda_version"].outcome == "match"
    # telegraf kept one <gpu> of the four attached: the count is the one field that differs
    assert node["gpu_count"].outcome == "mismatch" and dict(node["gpu_count"].values) == {"agentd": "1", "nvidia-smi": "4"}


@pytest.mark.parametrize("change, field, outcome", [
    (lambda d: d["nvml"]["gpus"][0].update(name="NVIDIA H100 80GB HBM3"), "name", "mismatch"),
    (lambda d: d["nvml"]["gpus"][0].update(pci_bus_id="0001:01:00.0"), "bus_id.nvml_spelling", "mismatch"),
    (lambda d: d["nvml"]["gpus"][0].update(uuid=None), "uuid", "missing"),
    (lambda d: d["nvml"]["gpus"][0].update(fabric_state="in_progress"), "fabric.state", "mismatch"),
    (lambda d: d["pci"][0].update(current_link_speed_gts=2.5), "pcie.current_gen", "mismatch"),
    (lambda d: d["pci"][0].update(max_link_width=8), "pcie.max_width", "mismatch"),
    (lambda d: d["pci"][1].update(max_link_speed_gts=32.0), "pcie.max_host_gen", "mismatch"),
    (lambda d: d["nvml"]["gpus"][0].update(nvlinks=[{"link": 0, "state": "down"}]), "nvlink.count", "mismatch"),
])  # fmt: skip
def test_a_field_agentd_reads_differently_is_a_mismatch(change, field, outcome):
    doc = agentd_doc_for_a100()
    change(doc)
    rows = cmp.nvml_rows(smi("a100-sxm4-v12"), cmp.AgentdView(doc), topo_m=None, nvlink="")
    assert by_field(rows, "gpu0")[field].outcome == outcome


def test_a_gpu_only_one_side_lists_is_missing():
    doc = agentd_doc_for_a100()
    doc["nvml"]["gpus"][0]["index"] = 1
    rows = cmp.nvml_rows(smi("a100-sxm4-v12"), cmp.AgentdView(doc), topo_m=None, nvlink=None)
    assert [(r.subject, r.field, r.outcome) for r in rows if r.field == "present"] == [("gpu0", "present", "missing"), ("gpu1", "present", "missing")]


def test_cuda_and_bus_id_spellings():
    assert [cmp.cuda_text(v) for v in (12020, 13000, 11070, 12080)] == ["12.2", "13.0", "11.7", "12.8"]
    assert [cmp.gen_of(v) for v in (2.5, 8.0, 16.0, 32.0, 64.0, 20.0, None)] == [1, 3, 4, 5, 6, None, None]


def test_numa_node_comes_from_topo_m():
    gke = (OUTPUTS / "nvidia-smi-topo-m.gke-a4-8x-b200-8nic.txt").read_text()
    assert cmp.numa_of_gpus(gke) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    puget = (OUTPUTS / "nvidia-smi-topo-m.puget-wrx90-2gpu-2nic-pcie.txt").read_text()
    assert cmp.numa_of_gpus(puget) == {0: 0, 1: 0}
    doc = agentd_doc_for_a100()
    rows = cmp.nvml_rows(smi("a100-sxm4-v12"), cmp.AgentdView(doc), topo_m=gke, nvlink=None)
    assert by_field(rows, "gpu0")["numa_node"].outcome == "missing"  # topo -m says 0, agentd read none
    doc["gpus"][0]["numa_node"] = 0
    rows = cmp.nvml_rows(smi("a100-sxm4-v12"), cmp.AgentdView(doc), topo_m=gke, nvlink=None)
    assert by_field(rows, "gpu0")["numa_node"].outcome == "match"


def test_nvlink_status_of_real_outputs():
    a100 = cmp.parse_nvlink_status((OUTPUTS / "nvidia-smi-nvlink-status.a100-8gpu.txt").read_text())
    assert sorted(a100) == list(range(8)) and all(links == {n: 25.0 for n in range(12)} for links in a100.values())
    h100 = cmp.parse_nvlink_status((OUTPUTS / "nvidia-smi-nvlink-status.h100.elided.txt").read_text())
    assert h100 == {0: {0: 26.562, 17: 26.562}}  # the author's "[...]" line is no link
    assert cmp.parse_nvlink_status((OUTPUTS / "nvidia-smi-nvlink-status.a10-empty.txt").read_text()) == {}
    v100 = cmp.parse_nvlink_status((OUTPUTS / "nvidia-smi-nvlink-status.v100-inactive.elided.txt").read_text())
    assert v100 == {3: {0: 25.781, 1: 25.781, 2: 25.781, 3: None, 4: 25.781, 5: None}}


def test_nvlink_states_against_inactive_links():
    theirs = cmp.parse_nvlink_status((OUTPUTS / "nvidia-smi-nvlink-status.v100-inactive.elided.txt").read_text())[3]
    ours = [{"link": n, "state": "down" if n in (3, 5) else "up", "speed_mb_s": None if n in (3, 5) else 25781} for n in range(6)]
    rows = by_field(cmp._nvlink_rows("gpu3", ours, theirs))
    assert {f: r.outcome for f, r in rows.items()} == {"nvlink.count": "match", "nvlink.up": "match", "nvlink.states": "match", "nvlink.speed_gb_s": "match"}
    ours[3]["state"] = "up"
    rows = by_field(cmp._nvlink_rows("gpu3", ours, theirs))
    assert rows["nvlink.states"].outcome == "mismatch" and rows["nvlink.states"].note == "links that differ: 3"
    assert rows["nvlink.up"].outcome == "mismatch"


# ---------------------------------------------------------------------------
# topology XML


def agentd_file_of(dump: str) -> str:
    """The file agentd writes for the node a dump came from, as NCCL's maintainers say to
    make one from a dump (keep only the <cpu> and <pci> tags: NVIDIA/nccl-tests#86), with
    only the attributes agentd writes (agentd.nccl.topo): no host_hash, and the endpoints'
    link attributes left for NCCL to fill."""
    out = []
    for line in dump.splitlines():
        tag = re.match(r"\s*</?(\w+)", line)
        if tag is None or tag.group(1) not in ("system", "cpu", "pci"):
            continue
        line = re.sub(r' host_hash="[^"]*"', "", line)
        if 'class="0x0604' not in line:  # an endpoint (GPU, NIC): agentd leaves link_* out
            line = re.sub(r' link_(speed|width)="[^"]*"', "", line)
        out.append(line)
    # an endpoint whose gpu/nic children went is closed on its own line: make it one element
    text = "\n".join(out) + "\n"
    return re.sub(r'(<pci [^>]*)>\n\s*</pci>', r"\1/>", text)


IBM = (TOPO / "ibm-vpc-h100x8-dump.xml").read_text()


def test_nccl_dumps_are_read_with_ncclss_reader_rules():
    nodes = cmp.topo_index(IBM)
    assert sum(n.tag == "gpu" for n in nodes.values()) == 8 and sum(n.tag == "net" for n in nodes.values()) == 8
    links = [n for n in nodes.values() if n.tag == "nvlink"]
    assert len(links) == 32 and {n.attrs["count"] for n in links} == {"4", "5"}
    gpu0 = nodes["pci:0000:a4:00.0>gpu"]
    assert gpu0.parent == "pci:0000:a4:00.0" and nodes["pci:0000:a4:00.0"].parent == "pci:0000:a1:00.0"
    with pytest.raises(ValueError, match="line 1"):
        cmp.topo_index('<?xml version="1.0"?>\n<system version="1"/>\n')


def test_agentd_file_as_nccl_sees_it_matches_everywhere():
    mine = agentd_file_of(IBM)
    rows = cmp.topo_rows(mine, IBM, IBM)
    topo = [r for r in rows if r.section == "topo"]
    assert topo and all(r.outcome == "match" for r in topo), [r for r in topo if r.outcome != "match"]
    subjects = {r.subject for r in topo}
    assert {"cpu:0", "cpu:1", "pci:0000:a1:00.0", "pci:0000:ea:00.0"} <= subjects
    assert {r.field for r in topo if r.subject == "pci:0000:a1:00.0"} == {"present", "parent", "busid", "class", "vendor", "device",
                                                                          "subsystem_vendor", "subsystem_device", "link_speed", "link_width"}  # fmt: skip
    ab = [r for r in rows if r.section == "topo.ab"]
    # system, 8 gpu, 32 nvlink, 8 nic, 8 net: NCCL detects them, agentd writes none, b keeps them as a
    assert [(r.field, r.outcome, dict(r.values)) for r in ab] == [("equal", "info", {"a.xml": "57", "b.xml": "57"})]


def test_an_attribute_agentds_file_changes_is_a_mismatch():
    mine = agentd_file_of(IBM)
    wrong = mine.replace('busid="0000:a1:00.0" class="0x060400" vendor="0x104c" device="0x8232" subsystem_vendor="0x0000" subsystem_device="0x0000" link_speed="2.5 GT/s PCIe" link_width="1"',
                         'busid="0000:a1:00.0" class="0x060400" vendor="0x104c" device="0x8232" subsystem_vendor="0x0000" subsystem_device="0x0000" link_speed="32.0 GT/s PCIe" link_width="16"')  # fmt: skip
    assert wrong != mine
    b = IBM.replace('<pci busid="0000:a1:00.0" class="0x060400" vendor="0x104c" device="0x8232" subsystem_vendor="0x0000" subsystem_device="0x0000" link_speed="2.5 GT/s PCIe" link_width="1">',
                    '<pci busid="0000:a1:00.0" class="0x060400" vendor="0x104c" device="0x8232" subsystem_vendor="0x0000" subsystem_device="0x0000" link_speed="32.0 GT/s PCIe" link_width="16">')  # fmt: skip
    rows = by_field(cmp.topo_rows(wrong, IBM, b), "pci:0000:a1:00.0")
    assert rows["link_width"].outcome == "mismatch" and dict(rows["link_width"].values) == {"agentd": "16", "a.xml": "1", "b.xml": "16"}
    assert rows["link_width"].note == "agentd's file changed what NCCL uses to agentd's value"
    assert rows["class"].outcome == "match"


def test_a_switch_agentds_file_leaves_out_moves_the_gpu():
    mine = agentd_file_of(IBM)
    lines = mine.splitlines()
    i = next(n for n, line in enumerate(lines) if 'busid="0000:a1:00.0"' in line)
    close = next(n for n in range(i + 1, len(lines)) if lines[n].strip() == "</pci>")
    flat = "\n".join(lines[:i] + lines[i + 1 : close] + lines[close + 1 :]) + "\n"  # the GPU and NIC straight under the cpu
    rows = cmp.topo_rows(flat, IBM, IBM)
    gpu = by_field(rows, "pci:0000:a4:00.0")
    assert gpu["parent"].outcome == "mismatch" and dict(gpu["parent"].values)["agentd"] == "cpu:0"
    switch = [r for r in rows if r.subject == "pci:0000:a1:00.0" and r.field == "present"]
    assert len(switch) == 1 and switch[0].outcome == "missing" and switch[0].note == "NCCL detects it; agentd's file leaves it out"


def test_two_hosts_of_one_design_differ_where_nccl_read_differently():
    one = (TOPO / "nccl-2397-a100x2-roce-host1-dump.xml").read_text()
    two = (TOPO / "nccl-2397-a100x2-roce-host2-dump.xml").read_text()
    rows = cmp.topo_rows(None, one, two)
    differ = sorted((r.subject, r.field) for r in rows if r.section == "topo.ab" and r.outcome == "mismatch")
    # host_hash differs too but NCCL rewrites it at every load: not a difference
    assert differ == [("net:mlx5_0", "guid"), ("net:mlx5_1", "guid"), ("pci:0000:16:00.0", "link_width")]
    assert [r.outcome for r in rows if r.subject == "agentd"] == ["missing"]


def test_agentds_reader_rules_on_nccls_own_dumps():
    """agentd's checker of NCCL's reader rules accepts what NCCL itself writes; it warns
    where NCCL wrote a link width it then reads as x16 (a VM's hidden link capability)."""
    rules = [r for r in cmp.topo_rows(None, (TOPO / "nccl-2397-a100x2-roce-host1-dump.xml").read_text(), None) if r.section == "topo.rules"]
    assert [(r.subject, r.outcome) for r in rules] == [("a.xml", "match")]
    rules = [r for r in cmp.topo_rows(None, IBM, None) if r.section == "topo.rules"]
    assert {r.outcome for r in rules} == {"warning"} and len(rules) == 16
    assert {r.note for r in rules} == {'<pci> link_width="0": NCCL assumes x16'}
    broken = cmp.topo_rows('<system version="1">\n\t<cpu numaid="0"/>\n</system>\n', None, None)
    assert [r.outcome for r in broken if r.subject == "agentd"] == ["mismatch", "mismatch"]


# ---------------------------------------------------------------------------
# NCCL logs


def test_nccl_logs_of_four_versions():
    log = cmp.parse_nccl_log((LOGS / "nccl-2397-2.30.4-roce-init.log").read_text())
    assert (log.version, log.version_suffix) == ("2.30.4", "+cuda13.3")
    assert log.warnings == ("Call to bind failed: Address already in use",) * 4 and log.topo_file is None
    old = cmp.parse_nccl_log((LOGS / "nccl-573-2.7.8-wsl2-no-pci-path.log").read_text())
    assert old.version == "2.7.8" and old.warnings == ("Failed to open libibverbs.so[.1]", "Could not find real path of /sys/class/pci_bus/0000:01/../../0000:01:00.0")
    refused = cmp.parse_nccl_log((LOGS / "nccl-379-topo-file-cpu-arch.log").read_text())
    assert refused.version is None and refused.warnings == ("Attribute arch of node cpu not found",)
    vm = cmp.parse_nccl_log((LOGS / "nccl-862-2.17.1-azure-vmbus-detection.log").read_text())
    assert len(vm.detection) == 4 and vm.detection[0].startswith("Topology detection : could not read /sys/devices/LNXSYSTM:00")


def with_topo_file(log: str, path: str) -> str:
    """The line NCCL logs when it reads NCCL_TOPO_FILE (src/graph/topo.cc: INFO(NCCL_ENV,
    "NCCL_TOPO_FILE set by environment to %s", ...)), as its other INFO lines are prefixed."""
    return log + f"ubuntu2:321049:321049 [0] NCCL INFO NCCL_TOPO_FILE set by environment to {path}\n"


def test_log_rows_say_whether_nccl_read_agentds_file():
    a = (LOGS / "nccl-2397-2.30.4-roce-init.log").read_text()
    b = with_topo_file(a, "/tmp/render/nccl-topo.xml")
    init = {"ok": True, "via": "ctypes", "nccl_version": "2.30.4"}
    rows = cmp.nccl_log_rows(a, b, init, init, topo_written=True)
    got = {(r.subject, r.field): r for r in rows}
    assert got[("nccl", "version")].outcome == "match"
    assert got[("a.log", "NCCL_TOPO_FILE")].outcome == "match" and got[("b.log", "NCCL_TOPO_FILE")].outcome == "match"
    warn = [r for r in rows if r.field == "WARN"]
    assert [(r.subject, r.outcome, r.note) for r in warn] == [("a.log", "warning", "4 times"), ("b.log", "warning", "4 times")]
    rows = {(r.subject, r.field): r for r in cmp.nccl_log_rows(a, a, init, {"ok": False, "error": "ncclCommInitRank: internal error (3)"}, topo_written=True)}
    assert rows[("b.log", "NCCL_TOPO_FILE")].outcome == "mismatch" and rows[("init b", "communicator")].outcome == "mismatch"
    # the first run must read no topology file: one set by the environment or nccl.conf spoils NCCL's own view
    assert {(r.subject, r.outcome) for r in cmp.nccl_log_rows(b, None, None, None, topo_written=False) if r.field == "NCCL_TOPO_FILE"} == {("a.log", "mismatch")}


# ---------------------------------------------------------------------------
# agentd bench nccl


def bench_doc_from_real_output() -> dict:
    """The JSON `agentd bench nccl` writes for a run whose output is real nccl-tests output
    (16 ranks of H100: tests/ncclbench/data), parsed by agentd's own runner."""
    text = bench_data("a3mega-h100x16-allreduce.txt")
    req = BenchRequest(ops=("all_reduce",), sizes=(256 * MiB, 512 * MiB, 1024 * MiB), gpus=8)
    run = run_nccl_tests(req, {"all_reduce": Path("/nonexistent/all_reduce_perf")}, run=lambda argv, env, timeout_s: (0, text, "", False))
    return {"run": run.model_dump(mode="json"), "findings": []}


def test_bench_json_of_real_output_passes_the_formula_checks():
    doc = bench_doc_from_real_output()
    rows = cmp.bench_rows(doc, gpus=16, nccl_version=None, requested={"ops": ["all_reduce"], "sizes": ["256M", "512M", "1G"]})
    formula = [r for r in rows if r.field in ("algbw_gbps", "busbw_gbps", "wrong")]
    assert len(formula) == 9 and all(r.outcome == "match" for r in formula), [r for r in formula if r.outcome != "match"]
    run = by_field(rows, "run")
    assert run["status"].outcome == run["ranks"].outcome == run["results"].outcome == "match"
    assert run["runner"].outcome == "mismatch"  # nccl-tests, where the GPU check runs torch


def test_bench_result_that_breaks_the_formulas_is_a_mismatch():
    doc = bench_doc_from_real_output()
    doc["run"]["results"][0]["busbw_gbps"] *= 2
    doc["run"]["results"][1]["wrong"] = 3.0
    rows = cmp.bench_rows(doc, gpus=8, nccl_version="2.18.3", requested=None)
    bad = sorted((r.subject, r.field) for r in rows if r.outcome == "mismatch")
    assert bad == [("all_reduce/268435456", "busbw_gbps"), ("all_reduce/536870912", "wrong"), ("run", "ranks"), ("run", "runner")]


# ---------------------------------------------------------------------------
# the daemon, agentd check and its replay


def test_daemon_rows_read_the_exposition_with_prometheus_parser():
    # the golden exposition of a simulated H100 node, its varying values masked (tests/golden/README.md): numbers again
    metrics = re.sub(r" <masked>$", " 0", (TESTS / "golden" / "h100-ib.metrics").read_text(), flags=re.MULTILINE)
    health = {"status": "ok", "findings": []}
    rows = cmp.daemon_rows(metrics, health, {"status": "ok", "findings": []}, smi("a100-sxm4-v12"), {"/metrics": {"status": 200, "after_s": 120.4}})
    got = {(r.subject, r.field): r for r in rows}
    assert got[("/metrics", "parse")].outcome == "match" and got[("/health", "status")].outcome == "match"
    assert dict(got[("agentd_gpu_info", "series")].values) == {"daemon": "8", "nvidia-smi": "1"}
    assert got[("gpu0", "uuid")].outcome == "mismatch"  # a simulated node's GPUs are not telegraf's A100
    assert cmp.daemon_rows("agentd_up{", None, None, None, None)[-1].outcome == "mismatch"


def test_replay_rows_compare_status_and_findings():
    live = {"status": "critical", "findings": [{"severity": "critical", "code": "nvlink.fabric.incomplete", "subject": "0000:1b:00.0"},
                                               {"severity": "ok", "code": "inventory.gpu", "subject": "node"}]}  # fmt: skip
    same = copy.deepcopy(live)
    same["findings"][0]["message"] = "measured again"
    assert [r.outcome for r in cmp.replay_rows(live, same)] == ["match", "match"]
    other = {"status": "degraded", "findings": [{"severity": "warning", "code": "pcie.link.degraded", "subject": "0000:1b:00.0"}]}
    rows = cmp.replay_rows(live, other)
    assert [r.outcome for r in rows] == ["mismatch", "mismatch"]
    assert dict(rows[1].values) == {"live": "critical nvlink.fabric.incomplete 0000:1b:00.0", "replay": "warning pcie.link.degraded 0000:1b:00.0"}
    assert cmp.replay_rows(live, None, "agentd: capture x is unreadable")[0].outcome == "missing"


def test_agentd_view_reads_a_real_inspect_document(shared_tree):
    """The keys the comparison reads are the keys `agentd inspect --format json` writes."""
    doc = json.loads(run_cli("inspect", "--host-root", str(shared_tree("h100-ib")), "--format", "json").stdout)
    view = cmp.AgentdView(doc)
    assert len(view.nvml_gpus) == len(view.gpus) == 8 and view.driver_version and view.cuda_driver_version
    g = view.nvml_gpus[0]
    for key in ("pci_bus_id", "name", "uuid", "vbios_version", "fabric_state", "pcie_replay_errors", "nvlinks"):
        assert g.get(key) is not None, key
    dev = view.pci_of(g["pci_bus_id"])
    for key in ("current_link_speed_gts", "current_link_width", "max_link_speed_gts", "max_link_width"):
        assert dev[key] is not None, key
    assert view.parent_of(dev) is not None and view.gpus[0]["numa_node"] is not None
    assert {"link", "state", "speed_mb_s"} <= set(g["nvlinks"][0])


@pytest.mark.slow
def test_a_folder_from_a_simulated_node_compares_end_to_end(shared_tree, tmp_path):
    """A gpu-check folder assembled from agentd's own commands on a simulated H100 node (no
    nvidia-smi or NCCL there: their rows are missing), compared as a device run's is: the
    capture is judged as the live check judged the node."""
    root = shared_tree("h100-ib")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / gc.RAW_INSPECT).write_text(run_cli("inspect", "--host-root", str(root), "--format", "json").stdout)
    check = run_cli("check", "--host-root", str(root), "--format", "json")
    (raw / gc.RAW_CHECK).write_text(check.stdout)
    out = tmp_path / "out"
    assert run_cli("render", "--host-root", str(root), "--out-dir", str(tmp_path / "render")).returncode == 0
    (raw / gc.RAW_TOPO).write_text((tmp_path / "render" / "nccl-topo.xml").read_text())
    run = gc.Run(out, tmp_path, budget_s=60)
    run.record(gc.Step("agentd-check", "ok", rc=check.returncode))
    assert run_cli("capture", "--host-root", str(root), "--redact", "--out", str(out / gc.CAPTURE)).returncode == 0
    rows = cmp.compare_dir(out)
    got = {(r.section, r.subject, r.field): r for r in rows}
    assert got[("check", "replay", "status")].outcome == "match" and got[("check", "replay", "findings")].outcome == "match"
    assert got[("nvml", "node", "sources")].outcome == "missing"
    assert [r.outcome for r in rows if r.section == "topo.rules" and r.subject == "agentd"] == ["match"]
    assert {r.outcome for r in rows if r.section == "topo" and r.field == "file"} == {"missing"}  # no NCCL dumps
    assert cmp.main([str(out), "--no-replay", "--only", "missing"]) == 0
    assert cmp.main([str(tmp_path / "empty")]) == 2


def test_table_and_json_say_every_outcome():
    rows = cmp.topo_rows(None, IBM, None)
    text = cmp.table(rows)
    assert text.splitlines()[0].split() == ["outcome", "section", "subject", "field", "values", "note"]
    # missing: agentd's file and b.xml; warning: the 16 link widths of 0; info: 2 cpu and 24 pci NCCL detects
    assert text.splitlines()[-1] == "match 0  mismatch 0  missing 2  warning 16  info 26"
    doc = cmp.as_json(rows)
    assert set(doc["counts"]) == set(cmp.OUTCOMES) and len(doc["rows"]) == len(rows)
