"""Write the package's man pages from what the programs already say about themselves.

    python3 -B -IS packaging/deb/manpage.py agentd LIBDIR VERSION DATE > agentd.1
    python3 -B -IS packaging/deb/manpage.py script FILE SECTION VERSION DATE > NAME.8

``agentd``: from the argparse parser (agentd.cli.build_parser, imported from LIBDIR):
the description, then every command and sub-command with its usage and options.
``script``: from a shell script's leading comment block (its documentation), kept as
written. Nothing is added that the program does not say itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def esc(text: str) -> str:
    """roff-safe text: backslashes, and lines that would start a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def head(name: str, section: str, version: str, date: str, title: str) -> list[str]:
    return [
        f'.TH {name.upper()} {section} "{date}" "agentd {version}" "{title}"',
        ".SH NAME",
        f"{esc(name)} \\- {esc(summary_of(name))}",
    ]


_SUMMARY: dict[str, str] = {}


def summary_of(name: str) -> str:
    return _SUMMARY[name]


def subparsers(p: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    out = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, helps.get(name, ""), sub))
    return out


def options(p: argparse.ArgumentParser) -> list[str]:
    lines = []
    for action in p._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)) or not action.option_strings:
            continue
        flags = ", ".join(action.option_strings)
        if action.nargs != 0:
            flags += " " + (action.metavar or (f"{{{','.join(map(str, action.choices))}}}" if action.choices else action.dest.upper()))
        lines += [".TP", f"\\fB{esc(flags)}\\fR", esc(action.help or "")]
    return lines


def commands(p: argparse.ArgumentParser, prefix: str) -> list[str]:
    lines = []
    for name, help_, sub in subparsers(p):
        full = f"{prefix} {name}"
        usage = " ".join(sub.format_usage().split()).removeprefix("usage: ")
        lines += [".SS " + esc(full), esc(help_) if help_ else "", ".PP", "\\fB" + esc(usage) + "\\fR"]
        lines += options(sub)
        lines += commands(sub, full)
    return [line for line in lines if line != ""]


def agentd_page(lib: str, version: str, date: str) -> str:
    sys.path.insert(0, lib)
    from agentd.cli import build_parser

    ap = build_parser()
    _SUMMARY["agentd"] = ap.description or "agentd"
    lines = head("agentd", "1", version, date, "agentd")
    lines += [".SH SYNOPSIS", "\\fBagentd\\fR [\\fB\\-\\-version\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]"]
    lines += [".SH OPTIONS"] + options(ap)
    lines += [".SH COMMANDS"] + commands(ap, "agentd")
    lines += [
        ".SH FILES",
        ".TP", "/etc/agentd/agentd.toml", "configuration (documented defaults)",
        ".TP", "/usr/share/doc/agentd/", "README and example drop-ins and configuration",
        ".SH SEE ALSO",
        "\\fBagentd\\-healthcheck\\fR(8), \\fBsystemctl\\fR(1)",
    ]
    return "\n".join(lines) + "\n"


def script_page(path: Path, section: str, version: str, date: str) -> str:
    name = path.name
    comment = []
    for line in path.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        comment.append(line[2:] if line.startswith("# ") else line[1:])
    first, _, rest = comment[0].partition(": ")
    if first != name or not rest:
        raise SystemExit(f"{path}: first comment line must be '# {name}: <summary>'")
    _SUMMARY[name] = rest.split(" (")[0].rstrip(".")  # "(see README.md beside it)": not in a man page
    body = "\n".join(comment[1:]).strip("\n")
    lines = head(name, section, version, date, "agentd")
    lines += [".SH SYNOPSIS", f"\\fB{esc(name)}\\fR", ".SH DESCRIPTION", ".nf", esc(body), ".fi"]
    lines += [".SH SEE ALSO", "\\fBagentd\\fR(1), \\fBslurm.conf\\fR(5), /usr/share/doc/agentd/slurm.md"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["agentd"] and len(argv) == 4:
        sys.stdout.write(agentd_page(argv[1], argv[2], argv[3]))
    elif argv[:1] == ["script"] and len(argv) == 5:
        sys.stdout.write(script_page(Path(argv[1]), argv[2], argv[3], argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
