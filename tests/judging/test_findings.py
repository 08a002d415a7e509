"""Findings: one constructor, typed subjects that render as the text every output shows."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import agentd
from agentd.judging.findings import (
    NODE,
    bench_subject,
    check_subject,
    file_subject,
    finding,
    gpu_subject,
    hca_subject,
    netdev_subject,
    nvlink_subject,
    pci_subject,
    port_subject,
    probe_subject,
)
from agentd.model import Finding, Subject, sort_findings

PACKAGE = Path(agentd.__file__).parent
CONSTRUCTOR = PACKAGE / "judging" / "findings.py"


def _raw_constructions(tree: ast.AST) -> list[int]:
    """Lines that call ``Finding(...)`` or build one with ``Finding.model_validate`` /
    ``model_validate_json`` / ``model_construct`` (as a name or an attribute)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (isinstance(f, ast.Name) and f.id == "Finding") or (isinstance(f, ast.Attribute) and f.attr == "Finding"):
            out.append(node.lineno)
        elif isinstance(f, ast.Attribute) and f.attr in ("model_validate", "model_validate_json", "model_construct"):
            owner = f.value
            if (isinstance(owner, ast.Name) and owner.id == "Finding") or (isinstance(owner, ast.Attribute) and owner.attr == "Finding"):
                out.append(node.lineno)
    return out


def test_the_scan_sees_raw_constructions():
    src = "x = Finding(code='a')\ny = model.Finding(code='a')\nz = Finding.model_validate({})\nw = finding('a')\n"
    assert _raw_constructions(ast.parse(src)) == [1, 2, 3]


def test_every_finding_in_agentd_is_built_by_the_one_constructor():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == CONSTRUCTOR:
            continue
        lines = _raw_constructions(ast.parse(path.read_text(), filename=str(path)))
        offenders += [f"{path.relative_to(PACKAGE.parent)}:{n}" for n in lines]
    assert offenders == [], "build findings with agentd.judging.findings.finding(), not Finding(...)"
    assert _raw_constructions(ast.parse(CONSTRUCTOR.read_text())), "the constructor itself builds Finding"


@pytest.mark.parametrize(("subject", "text"), [
    (NODE, "node"),
    (hca_subject("mlx5_0"), "mlx5_0"),
    (port_subject("mlx5_3", 1), "mlx5_3:1"),
    (pci_subject("0000:1b:00.0"), "0000:1b:00.0"),
    (pci_subject("10000:e1:00.0"), "10000:e1:00.0"),
    (gpu_subject(3), "gpu3"),
    (gpu_subject(3, "0000:1b:00.0"), "gpu3"),
    (gpu_subject(bus_id="0000:1b:00.0"), "0000:1b:00.0"),
    (nvlink_subject(3, 5), "gpu3:link5"),
    (netdev_subject("ens1np0"), "ens1np0"),
    (probe_subject("nvml"), "nvml"),
    (probe_subject("infiniband", "class/infiniband/mlx5_0/ports/1/rate"), "infiniband:class/infiniband/mlx5_0/ports/1/rate"),
    (probe_subject("netdev", "*"), "netdev:*"),
    (check_subject("ib.check_ports"), "ib.check_ports"),
    (file_subject("nfd-features"), "nfd-features"),
    (bench_subject("all_reduce/256MiB"), "all_reduce/256MiB"),
])
def test_subjects_render_as_the_text_outputs_show(subject, text):
    f = finding("x.y", "warning", subject, "m")
    assert str(subject) == text and f.subject == text and f.about == subject


def test_json_is_the_text_subject_only_and_unchanged():
    """The typed subject is not serialised: the JSON is the same as a finding given the same
    subject text (as every output printed it before subjects were typed)."""
    typed = finding("ib.port.down", "critical", port_subject("mlx5_3", 1), "port DOWN", "reseat", measured="DOWN", expected="ACTIVE")
    text = Finding(code="ib.port.down", severity="critical", subject="mlx5_3:1", message="port DOWN", remediation="reseat",
                   measured="DOWN", expected="ACTIVE")
    assert typed.model_dump_json() == text.model_dump_json()
    assert json.dumps(typed.model_dump(mode="json")) == json.dumps(text.model_dump(mode="json"))
    assert list(typed.model_dump(exclude_none=True)) == ["code", "severity", "subject", "message", "remediation", "measured", "expected"]


def test_constructor_makes_the_message_one_line():
    assert finding("x.y", "warning", NODE, "a\nb   c\t d").message == "a b c d"


def test_constructor_refuses_text_subjects():
    with pytest.raises(TypeError):
        finding("x.y", "warning", "node", "m")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        finding("x.y", "warning", Subject(kind="text", name="node"), "m")


def test_text_subject_is_kept_as_given_and_typed_as_text():
    f = Finding(code="x.y", severity="ok", subject="mlx5_0:1", message="m")
    assert f.subject == "mlx5_0:1" and f.about == Subject(kind="text", name="mlx5_0:1")


def test_subject_text_must_match_the_typed_subject():
    assert Finding(code="x.y", severity="ok", about=NODE, subject="node", message="m").subject == "node"
    with pytest.raises(ValidationError):
        Finding(code="x.y", severity="ok", about=NODE, subject="gpu0", message="m")


@pytest.mark.parametrize("bad", [
    {"kind": "port", "name": "mlx5_0"},  # no port number
    {"kind": "hca", "name": "mlx5_0", "port": 1},  # an HCA has no port
    {"kind": "pci"},
    {"kind": "gpu"},  # neither index nor bus id
    {"kind": "nvlink", "index": 0},
    {"kind": "node", "name": "n"},
    {"kind": "netdev", "name": "eth0", "bus_id": "0000:1b:00.0"},
    {"kind": "disk", "name": "sda"},
])
def test_subject_ids_must_fit_the_kind(bad):
    with pytest.raises(ValidationError):
        Subject(**bad)


def test_sort_order_is_severity_code_then_subject_text():
    fs = [
        finding("b", "warning", port_subject("mlx5_10", 1), "m"),
        finding("b", "warning", port_subject("mlx5_2", 1), "m"),
        finding("a", "ok", NODE, "m"),
        finding("b", "critical", gpu_subject(1), "m"),
        finding("a", "warning", netdev_subject("eth0"), "m"),
    ]
    got = [(f.severity, f.code, f.subject) for f in sort_findings(fs)]
    assert got == [("critical", "b", "gpu1"), ("warning", "a", "eth0"), ("warning", "b", "mlx5_10:1"),
                   ("warning", "b", "mlx5_2:1"), ("ok", "a", "node")]
