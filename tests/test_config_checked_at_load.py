"""What the config says is checked when it is loaded (issue 42): an [nccl] value the
renderer would refuse, or two [paths] settings that name one file, are errors with the key
path and the reason (exit 3; a reload keeps the running config), never accepted and then
found out by every publish (nccl.env frozen) or by one file overwriting another."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentd import cli
from agentd.config import STATE_DIR_FILES, AgentConfig, ConfigError, Paths, load_config
from agentd.outputs.node_state import moved_paths
from tests.support.quiet_collector import QuietCollector


def toml_file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "agentd.toml"
    p.write_text(text)
    return p


def paths_toml(tmp_path: Path, **paths: str) -> str:
    """A [paths] table with every file under tmp_path, then ``paths`` on top."""
    base = {"nccl_env": tmp_path / "etc" / "nccl.env", "nccl_conf": tmp_path / "etc" / "nccl.conf",
            "nccl_topo": tmp_path / "etc" / "nccl" / "topo.xml", "baseline": tmp_path / "state" / "baseline.json",
            "state_dir": tmp_path / "state", **paths}
    return "[paths]\n" + "".join(f'{k} = "{v}"\n' for k, v in base.items())


# -- [nccl] values -------------------------------------------------------------------------
BAD_NCCL = [
    ("socket_ifname", "eth0:1", "alias interfaces"),
    ("socket_ifname", "eth0;touch /tmp/pwned", "contains"),
    ("socket_ifname", "eth0,eth0", "listed twice"),
    ("net_plugin", "libnccl-net.so x", "contains"),
    ("net_plugin", "$(id)", "contains"),
]


@pytest.mark.parametrize("key,value,why", BAD_NCCL)
def test_a_bad_nccl_value_is_a_config_error_with_its_key(tmp_path: Path, key: str, value: str, why: str) -> None:
    cfg = toml_file(tmp_path, paths_toml(tmp_path) + f"[nccl]\n{key} = {value!r}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg, environ={})
    assert f"nccl.{key}: " in str(e.value) and why in str(e.value)


def test_good_nccl_values_still_load(tmp_path: Path) -> None:
    cfg = toml_file(tmp_path, paths_toml(tmp_path) + '[nccl]\nsocket_ifname = "^docker,lo"\nnet_plugin = "libnccl-net-ofi.so"\nib_tc = 106\n')
    got = load_config(cfg, environ={}).nccl
    assert (got.socket_ifname, got.net_plugin, got.ib_tc) == ("^docker,lo", "libnccl-net-ofi.so", 106)


def test_check_exits_3_naming_the_bad_nccl_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True)
    cfg = toml_file(tmp_path, paths_toml(tmp_path) + '[nccl]\nsocket_ifname = "eth0:1"\n')
    assert cli.main(["check", "--config", str(cfg), "--host-root", str(root)]) == 3
    assert "nccl.socket_ifname: " in capsys.readouterr().err


async def test_a_reload_with_a_bad_nccl_value_keeps_the_running_config(tmp_path: Path) -> None:
    from agentd.collection.collector import PROBE_TIERS
    from agentd.daemon.daemon import Daemon
    from agentd.daemon.systemd import Notifier
    from agentd.host.fs import HostRoot

    good = paths_toml(tmp_path) + "[intervals]\nfast_s = 0.05\nmedium_s = 0.1\nslow_s = 0.2\nstale_after = 20\n[nccl]\nenabled = false\n"
    path = toml_file(tmp_path, good + 'socket_ifname = "eth0"\n')
    cfg = load_config(path, environ={}).model_copy(update={"listen": "127.0.0.1:0"})
    d = Daemon(cfg, host=HostRoot.at(tmp_path), config_path=path, overrides={"listen": "127.0.0.1:9"}, collector=QuietCollector(cfg),
               probe_tiers=dict(PROBE_TIERS), notifier=Notifier({}), watchdog=None)
    task = asyncio.create_task(d.run())
    try:
        while not d.state.ready:
            await asyncio.sleep(0.02)
        path.write_text(good + 'socket_ifname = "eth0:1"\n')
        assert await d.reload() is False
        assert d.config is cfg and d.config.nccl.socket_ifname == "eth0"
    finally:
        d.stop()
        await asyncio.wait_for(task, 30)


# -- [paths]: one file, one setting ------------------------------------------------------------
def clash(tmp_path: Path, **paths: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(toml_file(tmp_path, paths_toml(tmp_path, **paths)), environ={})
    return str(e.value)


def test_two_settings_naming_one_file_are_refused(tmp_path: Path) -> None:
    env = str(tmp_path / "etc" / "nccl.env")
    msg = clash(tmp_path, nccl_conf=env, nccl_topo=env)
    assert "paths.nccl_env and paths.nccl_conf are the same file" in msg and "paths.nccl_env and paths.nccl_topo are the same file" in msg
    msg = clash(tmp_path, nccl_env=str(tmp_path / "state" / "baseline.json"))
    assert "paths.nccl_env and paths.baseline are the same file" in msg


@pytest.mark.parametrize("name", sorted(STATE_DIR_FILES.values()))
def test_a_setting_on_a_file_agentd_keeps_in_its_state_dir_is_refused(tmp_path: Path, name: str) -> None:
    msg = clash(tmp_path, nccl_env=str(tmp_path / "state" / name))
    assert f"paths.nccl_env and paths.state_dir's {name} are the same file" in msg


def test_paths_are_compared_after_resolving_symlinks_dot_dot_and_relative_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "etc")
    assert "paths.nccl_env and paths.nccl_conf are the same file" in clash(tmp_path, nccl_conf=str(tmp_path / "alias" / "nccl.env"))
    assert "are the same file" in clash(tmp_path, nccl_conf=str(tmp_path / "etc" / "x" / ".." / "nccl.env"))
    monkeypatch.chdir(tmp_path)
    assert "are the same file" in clash(tmp_path, nccl_conf="etc/nccl.env")


def test_a_file_where_another_path_needs_a_directory_is_refused(tmp_path: Path) -> None:
    assert "paths.nccl_env is paths.state_dir" in clash(tmp_path, nccl_env=str(tmp_path / "state"))
    msg = clash(tmp_path, nccl_env=str(tmp_path / "etc" / "nccl"))
    assert f"paths.nccl_env ({tmp_path / 'etc' / 'nccl'}) is a file, but paths.nccl_topo is below it" in msg


def test_the_defaults_and_a_root_that_is_not_the_node_have_distinct_paths(tmp_path: Path) -> None:
    assert Paths().nccl_env != Paths().nccl_conf  # the defaults validate (AgentConfig() would raise otherwise)
    AgentConfig()
    # A root that is not the node moves every file into <root>-out; a file named like one of
    # agentd's state files gets another name there instead of clashing with it.
    paths = Paths(nccl_env=Path("/etc/history.json"), baseline=Path("/srv/maintenance.json"))
    moved = moved_paths(paths, tmp_path / "root-out")
    assert Paths(**{k: v for k, v in moved.items() if v is not None})  # validates
    assert os.path.basename(moved["nccl_env"] or "") == "nccl_env-history.json"
