#!/bin/sh
# Build dist/agentd_<version>_<arch>.deb with plain dpkg-deb (no debhelper needed).
#
#   packaging/deb/build.sh [OUTDIR]        (default OUTDIR: <repo>/dist)
#   PYTHON=/usr/bin/python3.11 packaging/deb/build.sh
#
# Layout of the package:
#   /opt/agentd/lib/                agentd and its dependencies (pip install --target):
#                                   private to agentd, never mixed with system packages
#   /usr/bin/agentd                 launcher: python3.X -I -S, /opt/agentd/lib first
#   /usr/sbin/agentd-healthcheck    Slurm HealthCheckProgram wrapper
#   /lib/systemd/system/agentd.service
#   /etc/agentd/agentd.toml         conffile (documented defaults)
#   /usr/share/doc/agentd/          README, drop-in and config examples (also
#                                   slurm-healthcheck.conf.example, for the wrapper)
#
# Dependencies come from PyPI (or PIP_INDEX_URL / PIP_FIND_LINKS) at build time. Some
# have compiled parts (pydantic-core, aiohttp, psutil), so the package is tied to the
# architecture and to the Python minor version it was built with: it depends on exactly
# that interpreter (python3.11 on Debian 12), which the launcher runs. Build with the
# target distribution's /usr/bin/python3.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
outdir=${1:-$repo/dist}
python=${PYTHON:-/usr/bin/python3}

command -v dpkg-deb >/dev/null || { echo "build.sh: dpkg-deb not found" >&2; exit 1; }
"$python" -c 'import sys; assert sys.version_info >= (3, 11), "agentd needs Python >= 3.11"'
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
# PEP 440 pre-releases sort before the release in Debian only with '~' (0.2.0~rc1).
debversion=$(printf '%s' "$version" | sed -E 's/\.?(a|b|rc|dev)([0-9]*)/~\1\2/g; s/\+/+local./')
arch=$(dpkg --print-architecture)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
stage=$work/root
lib=$stage/opt/agentd/lib

# 1. Source copy: building in the checkout would leave build/ and *.egg-info behind.
mkdir -p "$work/src"
cp -R "$repo/pyproject.toml" "$repo/agentd" "$work/src/"
if [ -f "$repo/README.md" ]; then
    cp "$repo/README.md" "$work/src/"
else
    printf 'agentd\n' >"$work/src/README.md"
fi
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +

# 2. agentd + dependencies into /opt/agentd/lib, with a throwaway venv's pip (Debian's
#    system pip refuses to install anything: PEP 668).
"$python" -m venv "$work/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_WARN_SCRIPT_LOCATION=1 \
    "$work/venv/bin/pip" install --quiet --no-compile --prefer-binary --target "$lib" "$work/src"
rm -rf "$lib/bin"
# Byte-code compiled now, with the installed paths in tracebacks: the sandboxed service
# cannot write __pycache__ under /opt at run time.
"$python" -m compileall -q -j 0 -d /opt/agentd/lib "$lib" >/dev/null

# 3. Launcher, scripts, unit, config, docs.
install -d "$stage/usr/bin" "$stage/usr/sbin" "$stage/lib/systemd/system" "$stage/etc/agentd" \
    "$stage/usr/share/doc/agentd/examples"
cat >"$stage/usr/bin/agentd" <<EOF
#!/usr/bin/python$pyver -IS
# agentd launcher (Debian package): isolated interpreter (-I: no PYTHON* variables, no
# user site; -S: no system site-packages) with agentd's private library directory.
import sys
sys.path.insert(0, "/opt/agentd/lib")
from agentd.cli import main
sys.exit(main())
EOF
install -m 0755 "$repo/packaging/slurm/agentd-healthcheck" "$stage/usr/sbin/agentd-healthcheck"
install -m 0644 "$repo/systemd/agentd.service" "$stage/lib/systemd/system/agentd.service"
install -m 0644 "$repo/systemd/agentd.toml.example" "$stage/etc/agentd/agentd.toml"
for f in agentd-listen.conf.example agentd-acs.conf.example agentd-bench.conf.example \
    agentd-nvidia-group.conf.example agentd.toml.example; do
    install -m 0644 "$repo/systemd/$f" "$stage/usr/share/doc/agentd/examples/$f"
done
install -m 0644 "$repo/packaging/slurm/README.md" "$stage/usr/share/doc/agentd/slurm.md"
install -m 0644 "$repo/packaging/slurm/slurm-healthcheck.conf.example" \
    "$stage/usr/share/doc/agentd/examples/slurm-healthcheck.conf.example"
install -m 0644 "$work/src/README.md" "$stage/usr/share/doc/agentd/README.md"
cat >"$stage/usr/share/doc/agentd/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: agentd
Comment: /opt/agentd/lib also holds agentd's Python dependencies, each under its own
 licence (see the *.dist-info directories there).

Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
EOF

# 4. Normalised permissions: nothing group/world-writable, executables 0755.
chmod -R u+rwX,go+rX,go-w "$stage"
chmod 0755 "$stage/usr/bin/agentd" "$stage/usr/sbin/agentd-healthcheck"

# 5. Control files.
install -d "$stage/DEBIAN"
for f in postinst prerm postrm; do
    install -m 0755 "$here/$f" "$stage/DEBIAN/$f"
done
echo /etc/agentd/agentd.toml >"$stage/DEBIAN/conffiles"
(cd "$stage" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print0 |
    sort -z | xargs -0 md5sum | sed 's| \./| |') >"$stage/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: agentd
Version: $debversion
Architecture: $arch
Maintainer: agentd maintainers <agentd@localhost>
Installed-Size: $size
Depends: python$pyver, libudev1
Recommends: curl
Section: admin
Priority: optional
Description: per-node agent for GPU clusters
 Checks the node's GPU fabric (InfiniBand and RoCE ports, GPUDirect RDMA, PCIe
 paths, NVLink), exports Prometheus metrics and a /health endpoint, and writes
 NCCL environment and topology files from what it measures. Includes a Slurm
 HealthCheckProgram wrapper.
EOF

mkdir -p "$outdir"
deb=$outdir/agentd_${debversion}_${arch}.deb
dpkg-deb -Zxz -z6 --root-owner-group --build "$stage" "$deb" >/dev/null
echo "$deb"
