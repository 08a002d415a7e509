"""``nvidia-smi -q`` Fabric blocks (tests/support/smi_fabric.py) on real published text
(tests/fixtures/SOURCES.md), in the NVML reader's vocabulary."""

from __future__ import annotations

import re

from agentd.model import FabricHealth, NvmlGpu, NvmlInfo
from tests.support.fixtures import OUTPUTS
from tests.support.smi_fabric import ParsedFabric, apply_smi_fabric, parse_smi_fabric

H100_Q = OUTPUTS / "nvidia-smi-q.h100-sxm-8gpu.535.161.08.txt"
GB200_GREP = OUTPUTS / "nvidia-smi-q-fabric.gb200-unhealthy.grep-c3.txt"
INSUFFICIENT = OUTPUTS / "nvidia-smi-q-fabric.insufficient-resources.txt"
IN_PROGRESS = OUTPUTS / "nvidia-smi-q-fabric.in-progress-na.txt"


def test_h100_driver_535_completed_success_for_every_gpu():
    text = H100_Q.read_text()
    bus_ids = [m.lower().replace("00000000:", "0000:") for m in re.findall(r"^GPU (\S+)$", text, re.M)]
    parsed = parse_smi_fabric(text)
    assert list(parsed) == bus_ids and len(bus_ids) == 8
    assert parsed["0000:19:00.0"] == ParsedFabric(state="completed", status="success")  # 535: no domain, no health rows


def test_gb200_grep_fragment_unhealthy_summary_full_bandwidth():
    parsed = parse_smi_fabric(GB200_GREP.read_text())
    assert parsed == {
        "#0": ParsedFabric(
            state="completed",
            status="success",
            cluster_uuid="dc6e40c4-d722-4357-9ba6-5291dd461278",
            clique_id=2,
            health=FabricHealth(summary="unhealthy", degraded_bandwidth=False),
        )
    }


def test_insufficient_resources_with_zero_domain_and_flat_indentation():
    [p] = parse_smi_fabric(INSUFFICIENT.read_text()).values()
    assert p == ParsedFabric(state="completed", status="Insufficient Resources", cluster_uuid="00000000-0000-0000-0000-000000000000", clique_id=0)


def test_in_progress_block_all_na():
    [p] = parse_smi_fabric(IN_PROGRESS.read_text()).values()
    assert (p.state, p.status, p.cluster_uuid, p.clique_id) == ("in_progress", None, None, None)
    assert p.health == FabricHealth()  # every Health row N/A: present, nothing known


def test_crlf_odd_bytes_and_several_headerless_fragments():
    data = GB200_GREP.read_bytes().replace(b"\n", b"\r\n") + b"\xff\xfe garbage\r\n" + INSUFFICIENT.read_bytes()
    parsed = parse_smi_fabric(data)
    assert [p.status for p in parsed.values()] == ["success", "Insufficient Resources"]
    assert parsed["#0"].cluster_uuid == "dc6e40c4-d722-4357-9ba6-5291dd461278"


def test_status_is_kept_only_when_completed_and_unknown_rows_are_ignored():
    text = IN_PROGRESS.read_text().replace(": N/A\n", ": Insufficient Resources\n", 1) + "        Some Future Row : 7\n"
    [p] = parse_smi_fabric(text).values()
    assert p.state == "in_progress" and p.status is None


def test_not_fabric_text_parses_to_nothing():
    assert parse_smi_fabric("") == {}
    assert parse_smi_fabric("GPU 00000000:19:00.0\n    Product Name : NVIDIA H100\n") == {}


def test_apply_puts_the_parse_on_the_nvml_gpus_by_bus_id():
    parsed = parse_smi_fabric("GPU 00000000:1B:00.0\n" + INSUFFICIENT.read_text())
    nv = NvmlInfo(gpus=(NvmlGpu(index=0, pci_bus_id="0000:1b:00.0", fabric_state="completed", fabric_status="success"), NvmlGpu(index=1, pci_bus_id="0000:3b:00.0")))
    out = apply_smi_fabric(nv, parsed)
    g0, g1 = out.gpus
    assert (g0.fabric_state, g0.fabric_status, g0.fabric_clique_id, g0.fabric_cluster_uuid) == ("completed", "Insufficient Resources", 0, "00000000-0000-0000-0000-000000000000")
    assert g1 == nv.gpus[1]
