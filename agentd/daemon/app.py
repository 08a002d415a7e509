"""``agentd run``: entry points of the long-running service.

- ``main_run(args) -> int``: what the CLI's ``agentd run`` calls. ``args`` has
  ``config`` (Path|None), ``host_root`` (Path|None), ``listen`` (str|None), ``simulate``
  (profile name|None), ``sim_dir`` (Path|None) and ``fault`` (list of specs). Exit codes:
  0 clean stop (SIGTERM/SIGINT), 1 the HTTP server cannot start, 3 bad config or host root.
- ``run_daemon(config, *, config_path, host, ready_message=True, overrides=None) -> int``:
  the coroutine, for embedding.
- ``python -m agentd.daemon.app [run options]`` runs it without the CLI.

The service itself (schedules, publishing, reload, watchdog) is
``agentd.daemon.daemon.Daemon``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from agentd import sim
from agentd.config import AgentConfig, ConfigError, Paths, load_config
from agentd.daemon.daemon import Daemon
from agentd.daemon.logging import configure_logging
from agentd.host.fs import HostRoot
from agentd.metrics.agent import process_stats

__all__ = ["Daemon", "main_run", "process_stats", "run_daemon"]


async def run_daemon(
    config: AgentConfig,
    *,
    config_path: Path | None,
    host: HostRoot,
    ready_message: bool = True,
    overrides: Mapping[str, Any] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT. ``ready_message`` prints where to curl on stdout once
    listening; ``overrides`` (CLI flags) are applied again on every SIGHUP reload."""
    daemon = Daemon(config, host=host, config_path=config_path, overrides=overrides)

    def announce(addresses: list[tuple[str, int]]) -> None:
        if not ready_message:
            return
        scheme = "https" if config.web.config_file else "http"
        for host_, port in addresses:
            h = f"[{host_}]" if ":" in host_ else host_
            print(f"agentd: serving {scheme}://{h}:{port}/  try: curl -s {scheme}://{h}:{port}/health?format=text", flush=True)

    return await daemon.run(on_listening=announce)


def _simulated_root(profile: str, sim_dir: Path | None, faults: list[str]) -> Path:
    out = sim_dir if sim_dir is not None else Path(tempfile.mkdtemp(prefix="agentd-sim-"))
    return Path(sim.build_tree(profile, out, faults=faults))


def _sim_paths(config: AgentConfig, out: Path) -> dict[str, str]:
    """Paths still at their defaults (/etc, /var/lib) moved next to the simulated root."""
    defaults = Paths()
    moved = {k: str(out / Path(str(getattr(defaults, k))).name) for k in ("nccl_env", "nccl_conf", "nccl_topo", "baseline")
             if getattr(config.paths, k) == getattr(defaults, k)}
    if config.paths.state_dir == defaults.state_dir:
        moved["state_dir"] = str(out)
    return moved


def main_run(args: Any) -> int:
    overrides: dict[str, Any] = {}
    if getattr(args, "listen", None):
        overrides["listen"] = args.listen
    if getattr(args, "host_root", None) is not None:
        overrides["host_root"] = str(args.host_root)
    simulate = getattr(args, "simulate", None)
    try:
        if simulate:
            root = _simulated_root(simulate, getattr(args, "sim_dir", None), list(getattr(args, "fault", None) or []))
            overrides["host_root"] = str(root)
            out = root.parent / f"{root.name}-out"
            moved = _sim_paths(load_config(args.config, overrides=overrides), out)
            if moved:
                overrides["paths"] = moved
        config = load_config(args.config, overrides=overrides or None)
    except (ConfigError, ValueError, KeyError) as e:
        print(f"agentd: {e}", file=sys.stderr)
        return 3
    if simulate:
        print(f"agentd: simulated node '{simulate}' at {config.host_root}; NCCL files and baseline under {config.paths.nccl_env.parent}", flush=True)
        print(f"agentd: inject a fault: agentd simulate --out {config.host_root} --fault port_down  (undo: --clear-fault port_down)", flush=True)
    configure_logging(config.log_format, config.log_level)
    if not (config.host_root / "sys").is_dir():
        print(f"agentd: host root {config.host_root} has no sys/ directory", file=sys.stderr)
        return 3
    try:
        return asyncio.run(run_daemon(config, config_path=args.config, host=HostRoot.at(config.host_root, config.host_mode), overrides=overrides))
    except KeyboardInterrupt:
        return 0

