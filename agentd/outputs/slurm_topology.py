"""Slurm ``topology.conf`` for the topology/block plugin, from each node's placement.

topology/block (topology.conf(5)) groups nodes into blocks with fast links between them and
places jobs inside a block first; a GB200/GB300 NVL rack's NVLink domain is such a block.
``agentd topology --slurm`` prints the node's own line, ``BlockName=<block> Nodes=<node>``;
``agentd topology --slurm-merge`` reads many nodes' lines (pdsh output included: its
``host: `` prefixes are stripped) and prints one line per block with all its nodes:

    pdsh -w gpu[001-288] agentd topology --slurm | agentd topology --slurm-merge > topology.conf

Block names: ``nvl-<cluster uuid>-<clique id>`` for a node in a multi-node NVLink domain
(the domain's whole identity, so two racks never share a name; 51 characters at most,
within the 64 Slurm allows a switch name), ``node-<node name>`` for a node outside one (an
HGX board is an NVLink domain of its own): every node is in exactly one block, so the
plugin can place jobs on every node; a comment line before it says why it stands alone.
BlockSizes is left to the site (topology.conf(5): each block must hold at least the
smallest size); the merged file ends with a comment counting blocks by size.

Pure: no I/O here (agentd.cli reads the files and stdin).
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable

from agentd.base.ids import natural_key
from agentd.judging.placement import Placement

BLOCK_NAME_MAX = 64  # topology.conf(5) gives SwitchName this limit; block names stay within it too
# Slurm node names as agentd prints them: a hostname's characters (no hostlist brackets,
# commas, '=' or spaces, which would change the line's meaning).
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9_])?$")
# pdsh's "host: " prefix (a name without spaces, ':', '=' or '#', then ": ")
_PDSH_PREFIX = re.compile(r"^[^\s:=#]+:\s")
_NODES_SPLIT = re.compile(r",(?![^\[]*\])")  # commas outside hostlist brackets: node[1-3,5],gpu7


class MergeError(ValueError):
    """The lines do not make one consistent topology.conf (every problem, one a line)."""


def short_hostname(hostname: str | None) -> str | None:
    if not hostname:
        return None
    return hostname.split(".", 1)[0] or None


def valid_node_name(node: str) -> bool:
    return bool(NODE_NAME_RE.match(node))


def single_node_block(node: str) -> str:
    name = f"node-{node}"
    if len(name) <= BLOCK_NAME_MAX:
        return name
    return "node-" + hashlib.sha256(node.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def block_name(p: Placement, node: str) -> str:
    if p.domain is not None:
        return f"nvl-{p.domain.cluster_uuid}-{p.domain.clique_id}"
    return single_node_block(node)


def slurm_block_lines(p: Placement, node: str) -> list[str]:
    """The node's topology.conf lines: a comment when it has no multi-node domain, then
    its BlockName line. ValueError: ``node`` is not a name Slurm reads back as one node."""
    if not valid_node_name(node):
        raise ValueError(f"node name {node!r} is not a plain Slurm node name (letters, digits, '-', '_', '.'); give --node-name")
    lines = []
    if p.domain is None:
        why = ("a multi-node NVLink domain is expected, but its GPUs report none (see `agentd check`)" if p.multi_node
               else "no multi-node NVLink domain")
        lines.append(f"# {node}: {why}; a block of its own")
    lines.append(f"BlockName={block_name(p, node)} Nodes={node}")
    return lines


def merge_block_lines(lines: Iterable[str]) -> str:
    """One topology.conf from many nodes' lines (and from merged files: merging is
    idempotent). Blocks in the order of their first node (natural order), nodes sorted
    and comma-joined. Comments and blank lines are dropped; a BlockSizes line is kept when
    all agree. MergeError: a line that is not ``BlockName=... Nodes=...``, a node in two
    blocks, BlockSizes lines that differ."""
    blocks: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    sizes: list[str] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        m = _PDSH_PREFIX.match(line)
        if m:
            line = line[m.end():].strip()
        if not line or line.startswith("#"):
            continue
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if not sep or not value or key.lower() in fields:
                fields = {}
                break
            fields[key.lower()] = value  # parameter names are case insensitive (topology.conf(5))
        if set(fields) == {"blocksizes"}:
            sizes.append(fields["blocksizes"])
            continue
        if set(fields) != {"blockname", "nodes"}:
            problems.append(f"line {number}: not a topology/block line (BlockName=NAME Nodes=NODES): {raw.strip()[:200]!r}")
            continue
        name = fields["blockname"]
        for node in (n for n in _NODES_SPLIT.split(fields["nodes"]) if n):
            first = owner.setdefault(node, name)
            if first != name:
                problems.append(f"line {number}: node {node} is in block {first} and in block {name}")
                continue
            blocks.setdefault(name, set()).add(node)
    if len(set(sizes)) > 1:
        problems.append(f"BlockSizes lines differ: {', '.join(sorted(set(sizes)))}")
    if problems:
        raise MergeError("\n".join(problems))
    ordered = sorted(blocks.items(), key=lambda kv: (min(natural_key(n) for n in kv[1]), kv[0]))
    out = [
        "# topology.conf for Slurm's topology/block plugin, assembled by `agentd topology --slurm-merge`",
        "# from each node's `agentd topology --slurm` (docs/topology.md): one block per NVLink domain.",
    ]
    out += [f"BlockName={name} Nodes={','.join(sorted(nodes, key=natural_key))}" for name, nodes in ordered]
    if sizes:
        out.append(f"BlockSizes={sizes[0]}")
    counts: dict[int, int] = {}
    for nodes in blocks.values():
        counts[len(nodes)] = counts.get(len(nodes), 0) + 1
    summary = ", ".join(f"{n} node{'s' if n != 1 else ''} x {c}" for n, c in sorted(counts.items(), reverse=True))
    out.append(f"# blocks by size: {summary or 'none'} (BlockSizes: each block must hold at least the smallest size)")
    return "\n".join(out) + "\n"
