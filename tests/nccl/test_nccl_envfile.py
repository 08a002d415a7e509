"""The re-implemented readers of KEY=VALUE files (NCCL, systemd, docker)."""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from agentd.nccl.envfile import EnvFileError, read_docker_env_file, read_nccl_conf, read_systemd_env_file

GENERATOR = Path("/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator")


def test_nccl_reads_literally():
    text = 'NCCL_A="=mlx5_0"\nexport NCCL_B=1\nNCCL_C= x \n# NCCL_D=1\nno equals here\nNCCL_E==a=b\r\n'
    got = read_nccl_conf(text)
    assert got == {"NCCL_A": '"=mlx5_0"', "export NCCL_B": "1", "NCCL_C": " x ", "NCCL_E": "=a=b\r"}
    # before 2.26 a '#' line with '=' is an assignment of a strange name
    assert read_nccl_conf(text, skip_hash_lines=False)["# NCCL_D"] == "1"


def test_nccl_first_assignment_wins_and_truncates():
    assert read_nccl_conf("NCCL_X=1\nNCCL_X=2\n") == {"NCCL_X": "1"}
    assert len(read_nccl_conf("NCCL_X=" + "a" * 2000)["NCCL_X"]) == 1023


def test_systemd_rules():
    text = (
        "# comment\n; also comment\n"
        "A=plain\n"
        "B = spaced  \n"
        'C="double \\"q\\" \\$x \\n"\n'
        "D='single $x'\n"
        "E=a\\\nb\n"
        "F=\n"
        "1BAD=x\n"
        "NOEQUALS\n"
        "A=last wins\n"
        "G=trailing"
    )
    assert read_systemd_env_file(text) == {
        "B": "spaced",
        "C": 'double "q" $x \\n',
        "D": "single $x",
        "E": "ab",
        "F": "",
        "A": "last wins",
        "G": "trailing",
    }


def test_docker_rules():
    text = "\ufeffA=1\n  # comment\n\nB= x \nC\nD==v\r\n"
    assert read_docker_env_file(text, host_env={"C": "from-host"}) == {"A": "1", "B": " x ", "C": "from-host", "D": "=v"}
    with pytest.raises(EnvFileError, match="whitespaces"):
        read_docker_env_file("BAD KEY=1\n")
    with pytest.raises(EnvFileError, match="no variable name"):
        read_docker_env_file("=1\n")


SAMPLE = (
    "# header line without an equals sign\n"
    "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n"
    "# provenance\n"
    "NCCL_IB_TC=106\n"
    "NCCL_X=^=a;b,c:d/e@f%g+h-i.j_k\n"
)


@pytest.mark.proc
@pytest.mark.skipif(not GENERATOR.exists(), reason="systemd environment.d generator not installed")
def test_systemd_reader_matches_real_systemd(tmp_path):
    """systemd's environment.d generator uses the same env-file parser as EnvironmentFile=
    (plus $VAR expansion, which agentd's values never contain)."""
    conf = tmp_path / ".config" / "environment.d"
    conf.mkdir(parents=True)
    (conf / "50-nccl.conf").write_text(SAMPLE + "Q=' a b '\nW= spaced  \n")
    out = subprocess.run(
        [str(GENERATOR)],
        env={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config"), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    real = {}
    for line in out.splitlines():
        key, _, raw = line.partition("=")
        real[key] = shlex.split(raw)[0] if raw.startswith('"') else raw
    mine = read_systemd_env_file(SAMPLE + "Q=' a b '\nW= spaced  \n")
    assert {k: real[k] for k in mine} == mine


@pytest.mark.proc
@pytest.mark.skipif(shutil.which("docker") is None, reason="docker CLI not installed")
def test_docker_cli_accepts_the_sample(tmp_path):
    """The docker CLI parses --env-file before it contacts the daemon: a file it rejects
    fails with 'poorly formatted'; ours must not."""
    f = tmp_path / "env"
    f.write_text(SAMPLE)
    res = subprocess.run(["docker", "run", "--rm", "--pull=never", "--env-file", str(f), "agentd-no-such-image"], capture_output=True, text=True, timeout=60)
    assert "poorly formatted" not in res.stderr and "whitespaces" not in res.stderr
    f.write_text("BAD KEY=1\n")
    res = subprocess.run(["docker", "run", "--rm", "--pull=never", "--env-file", str(f), "agentd-no-such-image"], capture_output=True, text=True, timeout=60)
    assert "whitespaces" in res.stderr


def test_all_readers_agree_on_agentd_form():
    expected = {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_TC": "106", "NCCL_X": "^=a;b,c:d/e@f%g+h-i.j_k"}
    assert read_nccl_conf(SAMPLE) == expected
    assert read_nccl_conf(SAMPLE, skip_hash_lines=False) == expected
    assert read_systemd_env_file(SAMPLE) == expected
    assert read_docker_env_file(SAMPLE) == expected
