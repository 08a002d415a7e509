#!/bin/sh
# Build dist/agentd_<version>_<arch>.deb with plain dpkg-deb (no debhelper needed).
#
#   packaging/deb/build.sh [OUTDIR]        (default OUTDIR: <repo>/dist)
#   PYTHON=/usr/bin/python3.11 packaging/deb/build.sh
#
# Layout of the package:
#   /usr/lib/agentd/                agentd and its dependencies (pip install --target from
#                                   packaging/requirements.lock, hash-checked): private to
#                                   agentd, never mixed with system packages. Byte-code is
#                                   compiled by postinst and removed by prerm (as dh_python3's
#                                   py3compile/py3clean do): the sandboxed service cannot write
#                                   __pycache__ there at run time.
#   /usr/bin/agentd                 launcher: python3.X -I -S, /usr/lib/agentd first
#   /usr/sbin/agentd-healthcheck    Slurm HealthCheckProgram wrapper
#   /lib/systemd/system/agentd.service
#   /etc/agentd/agentd.toml         conffile (documented defaults)
#   /usr/share/doc/agentd/          README, changelog, drop-in and config examples (also
#                                   slurm-healthcheck.conf.example, for the wrapper)
#   /usr/share/man/                 agentd(1), agentd-healthcheck(8), generated from the
#                                   programs' own help (manpage.py)
#   /usr/share/lintian/overrides/agentd
#
# Dependencies: the wheels named in packaging/requirements.lock, from PyPI (or
# PIP_INDEX_URL / PIP_FIND_LINKS) at build time, binary only, each checked against its
# locked hash. Some have compiled parts (pydantic-core, aiohttp, psutil), so the package is
# tied to the architecture and to the Python minor version it was built with: it depends
# on exactly that interpreter (python3.11 on Debian 12), which the launcher runs, and on
# the shared libraries those compiled parts link (dpkg-shlibdeps). Build with the target
# distribution's /usr/bin/python3.
#
# Needs: dpkg-deb, dpkg-shlibdeps (dpkg-dev), strip (binutils), gzip.
#   DEB_MAINTAINER="Name <mail>" overrides the Maintainer field.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
outdir=${1:-$repo/dist}
python=${PYTHON:-/usr/bin/python3}
maintainer=${DEB_MAINTAINER:-agentd maintainers <agentd@example.org>}

for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (dpkg-dev, binutils)" >&2; exit 1; }
done
"$python" -c 'import sys; assert sys.version_info >= (3, 11), "agentd needs Python >= 3.11"'
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
# PEP 440 pre-releases sort before the release in Debian only with '~' (0.2.0~rc1).
debversion=$(printf '%s' "$version" | sed -E 's/\.?(a|b|rc|dev)([0-9]*)/~\1\2/g; s/\+/+local./')
arch=$(dpkg --print-architecture)

# The changelog's top entry must be this version (it is what `apt changelog` shows).
changelog=$here/changelog
top=$(sed -n '1s/^agentd (\([^)]*\)).*/\1/p' "$changelog")
if [ "$top" != "$debversion" ]; then
    echo "build.sh: $changelog: top entry is '$top', pyproject.toml says $version ($debversion): add an entry" >&2
    exit 1
fi
# Dates inside the package (man pages) come from the changelog, not the clock.
date=$(sed -n 's/^ -- .*>  //p' "$changelog" | head -n 1)
SOURCE_DATE_EPOCH=$(date -d "$date" +%s)
export SOURCE_DATE_EPOCH
mandate=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
year=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
stage=$work/root
libdir=/usr/lib/agentd
lib=$stage$libdir

# 1. Source copy: building in the checkout would leave build/ and *.egg-info behind.
mkdir -p "$work/src"
cp -R "$repo/pyproject.toml" "$repo/agentd" "$work/src/"
if [ -f "$repo/README.md" ]; then
    cp "$repo/README.md" "$work/src/"
else
    printf 'agentd\n' >"$work/src/README.md"
fi
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +

# 2. Dependencies exactly as locked (wheels only, hashes checked), then agentd itself,
#    with a throwaway venv's pip (Debian's system pip refuses to install anything: PEP 668).
"$python" -m venv "$work/venv"
pip() {
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_WARN_SCRIPT_LOCATION=1 \
        "$work/venv/bin/pip" install --quiet --no-compile --no-deps --target "$lib" "$@"
}
pip --require-hashes --only-binary :all: -r "$repo/packaging/requirements.lock"
rm -rf "$lib/bin"
# agentd's own wheel is built with the hash-locked build backend, installed into the
# throwaway venv (no build isolation: nothing fetched unpinned).
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore "$work/venv/bin/pip" install --quiet \
    --require-hashes --no-deps --only-binary :all: -r "$repo/packaging/build-requirements.lock"
pip --no-build-isolation "$work/src"
rm -rf "$lib/bin"
find "$lib" -name __pycache__ -prune -exec rm -rf {} +
# What dh_strip does: the wheels' extension modules carry symbols and build notes.
find "$lib" -type f -name '*.so*' -exec strip --strip-unneeded --remove-section=.comment --remove-section=.note {} +
# Modules that are not programs keep no '#!' line (it would name an interpreter nobody
# runs them with); the line is blanked, not removed, so tracebacks keep their line numbers.
find "$lib" -type f -name '*.py' ! -perm -u+x -exec sed -i '1s/^#!.*$//' {} +

# 3. Launcher, scripts, unit, config, docs, man pages.
install -d "$stage/usr/bin" "$stage/usr/sbin" "$stage/lib/systemd/system" "$stage/etc/agentd" \
    "$stage/usr/share/doc/agentd/examples" "$stage/usr/share/man/man1" "$stage/usr/share/man/man8" \
    "$stage/usr/share/lintian/overrides"
cat >"$stage/usr/bin/agentd" <<EOF
#!/usr/bin/python$pyver -IS
# agentd launcher (Debian package): isolated interpreter (-I: no PYTHON* variables, no
# user site; -S: no system site-packages) with agentd's private library directory.
import sys
sys.path.insert(0, "$libdir")
from agentd.entry import main
sys.exit(main())
EOF
install -m 0755 "$repo/packaging/slurm/agentd-healthcheck" "$stage/usr/sbin/agentd-healthcheck"
install -m 0644 "$repo/systemd/agentd.service" "$stage/lib/systemd/system/agentd.service"
install -m 0644 "$repo/systemd/agentd.toml.example" "$stage/etc/agentd/agentd.toml"
for f in agentd-listen.conf.example agentd-acs.conf.example agentd-bench.conf.example \
    agentd-nvidia-group.conf.example agentd-enforce.conf.example agentd.toml.example; do
    install -m 0644 "$repo/systemd/$f" "$stage/usr/share/doc/agentd/examples/$f"
done
install -m 0644 "$repo/packaging/slurm/README.md" "$stage/usr/share/doc/agentd/slurm.md"
install -m 0644 "$repo/packaging/slurm/slurm-healthcheck.conf.example" \
    "$stage/usr/share/doc/agentd/examples/slurm-healthcheck.conf.example"
install -m 0644 "$work/src/README.md" "$stage/usr/share/doc/agentd/README.md"
# A native version (no Debian revision) names its changelog changelog.gz; a version with a
# revision (0.1.0-1) would have changelog.Debian.gz (Debian Policy 12.7).
case $debversion in
    *-*) clname=changelog.Debian.gz ;;
    *) clname=changelog.gz ;;
esac
gzip -9n <"$changelog" >"$stage/usr/share/doc/agentd/$clname"
"$python" -B -IS "$here/manpage.py" agentd "$lib" "$version" "$mandate" | gzip -9n >"$stage/usr/share/man/man1/agentd.1.gz"
"$python" -B -IS "$here/manpage.py" script "$repo/packaging/slurm/agentd-healthcheck" 8 "$version" "$mandate" |
    gzip -9n >"$stage/usr/share/man/man8/agentd-healthcheck.8.gz"
install -m 0644 "$here/lintian-overrides" "$stage/usr/share/lintian/overrides/agentd"
cat >"$stage/usr/share/doc/agentd/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: agentd
Comment: $libdir also holds agentd's Python dependencies, each under its own
 licence (see the *.dist-info directories there).

Files: *
Copyright: $year the agentd authors
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
EOF

# 4. Normalised permissions: nothing group/world-writable, executables 0755.
chmod -R u+rwX,go+rX,go-w "$stage"
chmod 0755 "$stage/usr/bin/agentd" "$stage/usr/sbin/agentd-healthcheck"
# Nothing in the private library is run as a program (modules are imported, extension
# modules dlopen()ed): 0644 throughout, as dh_fixperms makes shared libraries.
find "$lib" -type f -exec chmod 0644 {} +

# 5. Control files.
install -d "$stage/DEBIAN"
for f in postinst prerm postrm; do
    sed "s|@PYTHON@|python$pyver|g; s|@LIBDIR@|$libdir|g" "$here/$f" >"$stage/DEBIAN/$f"
    chmod 0755 "$stage/DEBIAN/$f"
done
echo /etc/agentd/agentd.toml >"$stage/DEBIAN/conffiles"
(cd "$stage" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print0 |
    sort -z | xargs -0 md5sum | sed 's| \./| |') >"$stage/DEBIAN/md5sums"
# The shared libraries the compiled modules link (libc6, libgcc-s1, ...): dpkg-shlibdeps
# wants a debian/control to read, here a minimal one in the work directory.
mkdir -p "$work/shlibs/debian"
printf 'Source: agentd\n\nPackage: agentd\nArchitecture: any\n' >"$work/shlibs/debian/control"
find "$lib" -type f -name '*.so*' >"$work/elf"
shlibs=$(cd "$work/shlibs" && xargs dpkg-shlibdeps --warnings=1 -O <"$work/elf" | sed -n 's/^shlibs:Depends=//p')
case $shlibs in
    *libc6*) ;;
    *) echo "build.sh: dpkg-shlibdeps found no libc6 dependency ($shlibs)" >&2; exit 1 ;;
esac
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: agentd
Version: $debversion
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: python$pyver, libudev1, adduser, $shlibs
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
