"""version.below_minimum / version.mismatch from [expect] versions (checks/versions.py), and
the fingerprint's version fields and ordering (judging/fingerprint.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentd.judging.checks import run_checks
from agentd.judging.checks.versions import check_versions
from agentd.judging.fingerprint import expectation_miss, fabric_shape, version_key, versions
from agentd.judging.roles import hca_roles
from agentd.model import SoftwareVersions
from tests.support.check_snapshots import cfg, inp, node, one, problems, with_hca, with_nvml_gpu

VBIOS = "96.00.74.00.0D"  # nvidia-smi -q "VBIOS Version" of an H100 (535.161.08)


def full():
    s = node().model_copy(update={"versions": SoftwareVersions(
        mlx5_core="5.8-4.1.5", rdma_core="50.0", rdma_core_library="usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0")})
    for i in range(8):
        s = with_nvml_gpu(s, i, vbios_version=VBIOS)
    return s


def expect(**pins: str):
    return cfg(expect={"versions": pins})


# ---------------------------------------------------------------------------
# the check


def test_nothing_pinned_nothing_judged():
    assert check_versions(inp(full())) == []


def test_met_expectations_are_silent():
    config = expect(hca_fw=">=28.39.1002", mlx5_core=">=5.8-3.0.7", rdma_core=">=48.0", nvidia_driver="535.161.08",
                    vbios=f"=={VBIOS}", kernel=">=5.15")
    assert check_versions(inp(full(), config=config)) == []
    assert problems(run_checks(inp(full(), config=config))) == []


def test_below_minimum_is_a_warning_on_the_node():
    f = one(check_versions(inp(full(), config=expect(hca_fw=">=28.40"))), "version.below_minimum", "node")
    assert f.severity == "warning"
    assert "hca_fw" in f.message and "28.39.1002" in f.message and "minimum 28.40" in f.message
    assert "mlxfwmanager" in f.remediation and "upgrade" in f.remediation
    assert f.measured == "28.39.1002" and f.expected == "28.40"


def test_numbers_order_as_numbers():
    assert check_versions(inp(full(), config=expect(hca_fw=">=28.9"))) == []  # 28.39 > 28.9
    assert check_versions(inp(full(), config=expect(nvidia_driver=">=535.54.03"))) == []
    f = one(check_versions(inp(full(), config=expect(nvidia_driver=">=550.54.15"))), "version.below_minimum")
    assert "NVIDIA driver 535.161.08" in f.message and "install NVIDIA driver 550.54.15" in f.remediation


def test_exact_pin_that_differs_is_a_mismatch():
    findings = check_versions(inp(full(), config=expect(mlx5_core="==24.10-1.1.4", rdma_core="50.0")))
    f = one(findings, "version.mismatch", "node")
    assert f.severity == "warning" and "mlx5_core" in f.message and "5.8-4.1.5" in f.message and "exactly 24.10-1.1.4" in f.message
    assert "MLNX_OFED/DOCA-OFED 24.10-1.1.4" in f.remediation and len(findings) == 1


def test_every_value_of_a_multi_valued_field_must_meet_it():
    s = with_hca(full(), "mlx5_3", fw_ver="28.40.1000")
    assert check_versions(inp(s, config=expect(hca_fw=">=28.39"))) == []
    f = one(check_versions(inp(s, config=expect(hca_fw=">=28.40"))), "version.below_minimum")
    assert "28.39.1002,28.40.1000" in f.message
    assert one(check_versions(inp(s, config=expect(hca_fw="28.40.1000"))), "version.mismatch")


def test_a_field_the_node_lacks_is_not_judged():
    s = node()  # inbox driver: no mlx5_core version; no VBIOS from NVML
    assert check_versions(inp(s, config=expect(mlx5_core=">=5.8", vbios=">=96.00.74.00.0D"))) == []


def test_several_fields_give_one_finding_each():
    findings = check_versions(inp(full(), config=expect(kernel=">=6.8", vbios=">=96.00.89.00.01")))
    assert [(f.code, f.message.split(":")[0]) for f in findings] == [
        ("version.below_minimum", "kernel"), ("version.below_minimum", "vbios")]


def test_unknown_field_is_rejected_by_config():
    with pytest.raises(ValidationError):
        expect(ofed=">=5.8")


# ---------------------------------------------------------------------------
# fingerprint.versions / fabric_shape


def test_versions_read_from_the_snapshot():
    s = full()
    assert versions(s, hca_roles(s, cfg().hca)) == {
        "hca_fw": "28.39.1002", "mlx5_core": "5.8-4.1.5", "rdma_core": "50.0", "nvidia_driver": "535.161.08",
        "vbios": VBIOS, "kernel": "5.15.0-105-generic"}


def test_versions_multi_valued_and_absent():
    s = with_nvml_gpu(with_hca(node(), "mlx5_5", fw_ver="28.40.1000"), 2, vbios_version="96.00.89.00.01")
    v = versions(s, hca_roles(s, cfg().hca))
    assert v["hca_fw"] == "28.39.1002,28.40.1000" and v["vbios"] == "96.00.89.00.01"
    assert v["mlx5_core"] is None and v["rdma_core"] is None


def test_hca_firmware_of_compute_hcas_only():
    s = with_hca(node(), "mlx5_8", fw_ver="32.41.1000")  # the storage BlueField
    assert versions(s, hca_roles(s, cfg().hca))["hca_fw"] == "28.39.1002"


def test_fabric_shape():
    s = node(layer="Ethernet")
    assert fabric_shape(s, hca_roles(s, cfg().hca)) == {"compute_ports": "8", "mtu": "9000"}


# ---------------------------------------------------------------------------
# version_key / expectation_miss


@pytest.mark.parametrize(("low", "high"), [
    ("28.9", "28.10"),
    ("28.39.1002", "28.40.1000"),
    ("5.8-4.1.5", "24.10-1.1.4"),
    ("535.161.08", "550.54.15"),
    ("5.15.0-105-generic", "6.8.0-31-generic"),
    ("96.00.74.00.0D", "96.00.74.00.10"),  # VBIOS groups are hex
    ("96.00.74.00.10", "96.00.74.00.1A"),
    ("96.00.74.00.1A", "96.00.89.00.01"),
    ("96.00.9F.00.01", "96.00.A0.00.01"),
])
def test_version_key_order(low, high):
    assert version_key(low) < version_key(high)


def test_version_key_is_case_blind():
    assert version_key("96.00.74.00.0d") == version_key("96.00.74.00.0D")


@pytest.mark.parametrize(("have", "spec", "miss"), [
    ("28.39.1002", ">=28.39", None),
    ("28.39.1002", ">=28.40", ("below_minimum", "28.40")),
    ("28.39.1002", " >= 28.40 ", ("below_minimum", "28.40")),
    ("535.161.08", "535.161.08", None),
    ("535.161.08", "==535.161.08", None),
    ("535.161.08", "550.54.15", ("mismatch", "550.54.15")),
    ("28.39.1002,28.40.1000", ">=28.40", ("below_minimum", "28.40")),
    ("28.39.1002,28.40.1000", "28.40.1000", ("mismatch", "28.40.1000")),
    (None, ">=5.8", ("unknown", "5.8")),
])
def test_expectation_miss(have, spec, miss):
    assert expectation_miss(have, spec) == miss
