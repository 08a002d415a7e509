"""``agentd run``: entry points of the long-running service.

- ``main_run(args) -> int``: what the CLI's ``agentd run`` calls. ``args`` has
  ``config`` (Path|None), ``host_root`` (Path|None), ``listen`` (str|None), ``simulate``
  (profile name|None), ``sim_dir`` (Path|None) and ``fault`` (list of specs). Exit codes:
  0 clean stop (SIGTERM/SIGINT), 1 the HTTP server cannot start, 3 bad config or host root,
  or another agentd holds the state directory's lock (``<state_dir>/agentd.lock``,
  agentd.outputs.state_lock: two daemons on one state directory rewrite each other's
  NCCL files; the message names the holder's pid, start time and config).
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
from typing import Callable, Mapping

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.base.openssl_gate import without_tls
from agentd.base.selfcmd import agentd_command
from agentd.config import AgentConfig, ConfigError, load_config
from agentd.host.fs import HostRoot
from agentd.outputs.node_state import moved_paths, state_dir_for
from agentd.outputs.state_lock import DAEMON_LOCK, LockHeld, StateLock, acquire

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
    try_this: Callable[[str], str] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT. ``ready_message`` prints where to curl on stdout once
    listening, and ``try_this(base_url)``'s text after it (the demo's commands);
    ``overrides`` (CLI flags) are applied again on every SIGHUP reload."""
    from agentd.daemon.daemon import Daemon

    daemon = Daemon(config, host=host, config_path=config_path, overrides=overrides, persist_history=True)

    def announce(addresses: list[tuple[str, int]]) -> None:
        if not ready_message:
            return
        scheme = "https" if config.web.config_file else "http"
        for host_, port in addresses:
            h = f"[{host_}]" if ":" in host_ else host_
            print(f"agentd: serving {scheme}://{h}:{port}/  try: curl -s {scheme}://{h}:{port}/health?format=text", flush=True)
        if try_this is not None and addresses:
            host_, port = addresses[0]
            print(try_this(f"{scheme}://{f'[{host_}]' if ':' in host_ else host_}:{port}"), end="", flush=True)

    rc = await daemon.run(on_listening=announce)
    if daemon.start_error is not None:
        print(f"agentd: cannot serve on {daemon.config.listen}: {daemon.start_error}", file=sys.stderr, flush=True)
    return rc


# `agentd run --simulate` (the demo): kernel log faults hold this long (seconds), where a real
# node holds an Xid 79 until it reboots and a one-off critical event a day.
DEMO_KERNEL_HOLDS = {"hold_s": 30.0, "window_s": 30.0, "reset_hold_s": 30.0}


def _simulated_root(profile: str, sim_dir: Path | None, faults: list[str]) -> Path:
    import tempfile

    from agentd import sim  # only `agentd run --simulate`: the simulator stays out of the daemon's RSS (docs/performance.md)

    out = sim_dir if sim_dir is not None else Path(tempfile.mkdtemp(prefix="agentd-sim-"))
    return Path(sim.build_tree(profile, out, faults=faults))


# The fault the demo's commands inject: on every profile, a compute port goes down, /health
# turns 503 and the port leaves NCCL_IB_HCA within a fast interval.
DEMO_FAULT = "port_down"


def demo_commands(root: Path, nccl_env: Path, command: str) -> Callable[[str], str]:
    """What `agentd run --simulate` prints once it serves at a base URL: the commands to try
    from another shell, with the agentd command as this shell runs it
    (agentd.base.selfcmd: `make demo` leaves agentd in .venv/bin, not on PATH)."""
    import shlex

    r, env = shlex.quote(str(root)), shlex.quote(str(nccl_env))

    def text(url: str) -> str:
        return (
            "agentd: try, from another shell:\n"
            f"  curl -s {url}/health?format=text\n"
            f"  curl -s {url}/metrics | grep agentd_ib_port_rate\n"
            f"  {command} simulate --out {r} --fault {DEMO_FAULT}\n"
            f"  grep NCCL_IB_HCA {env}\n"
            f"  {command} simulate --out {r} --clear-fault {DEMO_FAULT}\n"
            f"  {command} simulate --list\n"
            "agentd: Ctrl-C stops it\n"
        )

    return text


def _holder_info(config: AgentConfig, config_path: Path | None) -> dict[str, str]:
    """What the state directory's lock file says of this daemon, for a second one's message."""
    return {"config": str(config_path) if config_path is not None else "none (defaults)", "host_root": str(config.host_root),
            "listen": config.listen}


def _lock_state_dir(config: AgentConfig, config_path: Path | None) -> StateLock | None:
    """The daemon's lock on its state directory, held for its life (agentd.outputs.state_lock).
    LockHeld when another agentd holds it; None, with a note, where the directory cannot hold
    a lock file (a user without write access to it also cannot write the state it guards)."""
    from agentd.base.escape import printable

    where = config.paths.state_dir
    try:
        return acquire(where / DAEMON_LOCK, info=_holder_info(config, config_path))
    except LockHeld:
        raise
    except OSError as e:
        print(f"agentd: note: cannot lock the state directory {printable(str(where))} ({e.strerror or e}): "
              "a second agentd on it would not be refused", file=sys.stderr, flush=True)
        return None


def _not_the_node(config: AgentConfig, host: HostRoot, overrides: JsonObject, config_path: Path | None) -> AgentConfig:
    """A root that is not the node keeps its state beside it, whatever the config says
    (DESIGN.md 3, docs/node-state.md): every ``paths.*`` moves into ``<root>-out/``. The
    move is a command-line override, so a reload (SIGHUP) keeps it."""
    out = state_dir_for(config.host_root)
    overrides["paths"] = moved_paths(config.paths, out)
    return load_config(config_path, overrides=overrides)


def main_run(args: argparse.Namespace) -> int:
    from agentd.base.escape import printable

    overrides: JsonObject = {}
    if getattr(args, "listen", None):
        overrides["listen"] = args.listen
    if getattr(args, "host_root", None) is not None:
        overrides["host_root"] = str(args.host_root)
    simulate = getattr(args, "simulate", None)
    temp_sim = simulate and getattr(args, "sim_dir", None) is None
    try:
        if simulate:
            root = _simulated_root(simulate, getattr(args, "sim_dir", None), list(getattr(args, "fault", None) or []))
            overrides["host_root"] = str(root)
        config = load_config(args.config, overrides=overrides or None)
        # a capture given as --host-root is named as the user named it, not by its unpacked copy
        capture = getattr(args, "capture_file", None)
        shown = f"capture {capture} (unpacked in {config.host_root})" if capture is not None else f"host root {config.host_root}"
        if simulate:
            # a simulated log only grows: short holds (those the config leaves unset), so a
            # kernel log fault's --clear-fault is seen
            demo = {k: v for k, v in DEMO_KERNEL_HOLDS.items() if k not in config.kernel.model_fields_set}
            if demo:
                overrides["kernel"] = demo
                config = load_config(args.config, overrides=overrides)
        if not (config.host_root / "sys").is_dir():
            print(f"agentd: {shown} has no sys/ directory", file=sys.stderr)
            return 3
        host = HostRoot.at(config.host_root, config.host_mode)
        unjudgeable = host.unjudgeable()
        if unjudgeable is not None:
            print(f"agentd: {unjudgeable}", file=sys.stderr)
            return 3
        if not host.is_live:
            config = _not_the_node(config, host, overrides, args.config)
    except (ConfigError, ValueError, KeyError) as e:
        print(f"agentd: {e}", file=sys.stderr)
        return 3
    try:
        lock = _lock_state_dir(config, args.config)
    except LockHeld as e:
        who = e.holder.describe() if e.holder is not None else "a process that has not said who it is"
        print(f"agentd: another agentd uses the state directory {config.paths.state_dir} ({printable(who)}); two daemons on one "
              "state directory rewrite each other's NCCL files and state. Stop that one, or give this one its own "
              "paths.state_dir (and NCCL paths)", file=sys.stderr)
        return 3
    try:
        if simulate:
            print(f"agentd: simulated node '{simulate}' at {config.host_root}", flush=True)
            k = config.kernel
            print(f"agentd: kernel log faults (xid, ...) hold {k.hold_s:g} s here (kernel.hold_s; window_s {k.window_s:g}, "
                  f"reset_hold_s {k.reset_hold_s:g}): a cleared one recovers then", flush=True)
        if not host.is_live:
            nfd = f", NFD labels {config.paths.nfd_features}" if config.paths.nfd_features else ""
            print(f"agentd: {printable(shown)} is not this node ({host.mode}: {host.mode_reason}); "
                  f"its NCCL files, baseline and state go to {config.paths.state_dir}/ (nccl.env: {config.paths.nccl_env}{nfd}), "
                  "never to the node's paths", flush=True)
        try_this = demo_commands(config.host_root, config.paths.nccl_env, agentd_command()) if simulate else None
        if config.web.config_file is None:
            without_tls()
        import asyncio

        from agentd.daemon.logging import configure_logging

        configure_logging(config.log_format, config.log_level)
        try:
            return asyncio.run(run_daemon(config, config_path=args.config, host=host, overrides=overrides, try_this=try_this))
        except KeyboardInterrupt:
            return 0
    finally:
        if lock is not None:
            lock.release()
        if temp_sim:  # a demo's tree of its own (12 MB) and its state: nothing else will use them
            import shutil

            for d in (config.host_root, config.paths.state_dir):
                shutil.rmtree(d, ignore_errors=True)
