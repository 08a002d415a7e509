"""``agentd run``: entry points of the long-running service.

- ``main_run(args) -> int``: what the CLI's ``agentd run`` calls. ``args`` has
  ``config`` (Path|None), ``host_root`` (Path|None), ``listen`` (str|None), ``simulate``
  (profile name|None), ``sim_dir`` (Path|None) and ``fault`` (list of specs). Exit codes:
  0 clean stop (SIGTERM/SIGINT), 1 the HTTP server cannot start, 3 bad config or host root.
  On a host root that is not live (a simulated node, a capture), every ``paths.*`` is
  moved into ``<root>-out/`` beside it, whatever the config says
  (agentd.outputs.node_state, docs/node-state.md).
- ``run_daemon(config, *, config_path, host, ready_message=True, overrides=None) -> int``:
  the coroutine, for embedding.

The service itself (schedules, publishing, reload, watchdog) is
``agentd.daemon.daemon.Daemon``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.base.openssl_gate import without_tls
from agentd.config import AgentConfig, ConfigError, load_config
from agentd.host.fs import HostRoot
from agentd.outputs.node_state import moved_paths, state_dir_for

# asyncio, aiohttp and structlog (which imports asyncio) are imported by main_run once the
# config is read: with no web config file, ssl stays out of the process
# (agentd.base.openssl_gate), and asyncio's import is where ssl would come in.

__all__ = ["main_run", "run_daemon"]


async def run_daemon(
    config: AgentConfig,
    *,
    config_path: Path | None,
    host: HostRoot,
    ready_message: bool = True,
    overrides: Mapping[str, JsonValue] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT. ``ready_message`` prints where to curl on stdout once
    listening; ``overrides`` (CLI flags) are applied again on every SIGHUP reload."""
    from agentd.daemon.daemon import Daemon

    daemon = Daemon(config, host=host, config_path=config_path, overrides=overrides, persist_history=True)

    def announce(addresses: list[tuple[str, int]]) -> None:
        if not ready_message:
            return
        scheme = "https" if config.web.config_file else "http"
        for host_, port in addresses:
            h = f"[{host_}]" if ":" in host_ else host_
            print(f"agentd: serving {scheme}://{h}:{port}/  try: curl -s {scheme}://{h}:{port}/health?format=text", flush=True)

    return await daemon.run(on_listening=announce)


def _simulated_root(profile: str, sim_dir: Path | None, faults: list[str]) -> Path:
    import tempfile

    from agentd import sim  # only `agentd run --simulate`: the simulator stays out of the daemon's RSS (docs/performance.md)

    out = sim_dir if sim_dir is not None else Path(tempfile.mkdtemp(prefix="agentd-sim-"))
    return Path(sim.build_tree(profile, out, faults=faults))


def _not_the_node(config: AgentConfig, host: HostRoot, overrides: JsonObject, config_path: Path | None) -> AgentConfig:
    """A root that is not the node keeps its state beside it, whatever the config says
    (DESIGN.md 3, docs/node-state.md): every ``paths.*`` moves into ``<root>-out/``. The
    move is a command-line override, so a reload (SIGHUP) keeps it."""
    out = state_dir_for(config.host_root)
    overrides["paths"] = moved_paths(config.paths, out)
    return load_config(config_path, overrides=overrides)


def main_run(args: argparse.Namespace) -> int:
    overrides: JsonObject = {}
    if getattr(args, "listen", None):
        overrides["listen"] = args.listen
    if getattr(args, "host_root", None) is not None:
        overrides["host_root"] = str(args.host_root)
    simulate = getattr(args, "simulate", None)
    try:
        if simulate:
            root = _simulated_root(simulate, getattr(args, "sim_dir", None), list(getattr(args, "fault", None) or []))
            overrides["host_root"] = str(root)
        config = load_config(args.config, overrides=overrides or None)
        if not (config.host_root / "sys").is_dir():
            print(f"agentd: host root {config.host_root} has no sys/ directory", file=sys.stderr)
            return 3
        host = HostRoot.at(config.host_root, config.host_mode)
        if not host.is_live:
            config = _not_the_node(config, host, overrides, args.config)
    except (ConfigError, ValueError, KeyError) as e:
        print(f"agentd: {e}", file=sys.stderr)
        return 3
    if simulate:
        print(f"agentd: simulated node '{simulate}' at {config.host_root}", flush=True)
    if not host.is_live:
        nfd = f", NFD labels {config.paths.nfd_features}" if config.paths.nfd_features else ""
        print(f"agentd: host root {config.host_root} is not this node ({host.mode}: {host.mode_reason}); "
              f"its NCCL files, baseline and state go to {config.paths.state_dir}/ (nccl.env: {config.paths.nccl_env}{nfd}), "
              "never to the node's paths", flush=True)
    if simulate:
        print(f"agentd: inject a fault: agentd simulate --out {config.host_root} --fault port_down  (undo: --clear-fault port_down)", flush=True)
    if config.web.config_file is None:
        without_tls()
    import asyncio

    from agentd.daemon.logging import configure_logging

    configure_logging(config.log_format, config.log_level)
    try:
        return asyncio.run(run_daemon(config, config_path=args.config, host=host, overrides=overrides))
    except KeyboardInterrupt:
        return 0

