#!/bin/sh
# Build the vendored pyslurm 22.5.3 (Slurm 22.05's Python binding; PyPI has none) and
# install it into a virtual environment, against the installed libslurm.
#
#   scripts/build-pyslurm.sh VENV [TARBALL]
#
# VENV: the environment to install into (e.g. Mirage's .venv). TARBALL: default
# ../shared/vendor/pyslurm-22.5.3.tar.gz beside the checkout, or $PYSLURM_TARBALL.
#
# - Already installed at 22.5.x in VENV: nothing to do.
# - The wheel is built once per (source, libslurm, Python) and kept in
#   ${MIRAGE_CACHE_DIR:-~/.cache/mirage}/pyslurm/ (a build takes 5-9 minutes on 2 cores);
#   VENV gets only the wheel: Cython<3 and the other build tools stay in a throw-away
#   build environment.
# - Needs libslurm-dev, a C compiler and the Python headers; as root on Debian the missing
#   ones are installed (apt-get), otherwise the script says what to install.
# SLURM_INCLUDE_DIR / SLURM_LIB_DIR override where Slurm is found (default /usr/include and
# the library's multiarch directory). Ends by importing pyslurm and printing its version.
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 VENV [TARBALL]" >&2
    exit 2
fi
[ -d "$1" ] || { echo "$0: no virtual environment at $1 (create it first)" >&2; exit 1; }
venv=$(cd "$1" && pwd)  # absolute: the last step runs from / (not the source tree)
here=$(cd "$(dirname "$0")/.." && pwd)
tarball=${2:-${PYSLURM_TARBALL:-$here/../shared/vendor/pyslurm-22.5.3.tar.gz}}
py=$venv/bin/python
say() { echo "[build-pyslurm] $*"; }

[ -x "$py" ] || { echo "$0: no Python at $py (create the venv first)" >&2; exit 1; }
if "$py" -c 'import pyslurm, sys; sys.exit(0 if pyslurm.version().startswith("22.5.") else 1)' \
    2>/dev/null; then
    say "pyslurm $("$py" -c 'import pyslurm; print(pyslurm.version())') is already in $venv"
    exit 0
fi
[ -f "$tarball" ] || { echo "$0: no pyslurm source at $tarball" >&2; exit 1; }

# ---- build dependencies (Debian package names)
include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
missing=""
[ -f /usr/include/slurm/slurm.h ] || missing="$missing libslurm-dev"
command -v gcc >/dev/null 2>&1 || missing="$missing gcc"
[ -f "$include/Python.h" ] || missing="$missing python3-dev"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing >/dev/null
    else
        echo "$0: missing$missing (sudo apt-get install$missing)" >&2
        exit 1
    fi
fi

: "${SLURM_INCLUDE_DIR:=/usr/include}"
if [ -z "${SLURM_LIB_DIR:-}" ]; then
    triplet=$(gcc -print-multiarch 2>/dev/null || true)
    SLURM_LIB_DIR=/usr/lib${triplet:+/$triplet}
fi
[ -f "$SLURM_INCLUDE_DIR/slurm/slurm.h" ] || {
    echo "$0: no $SLURM_INCLUDE_DIR/slurm/slurm.h (install libslurm-dev)" >&2; exit 1; }
ls "$SLURM_LIB_DIR"/libslurm.so* >/dev/null 2>&1 || {
    echo "$0: no libslurm.so in $SLURM_LIB_DIR (set SLURM_LIB_DIR)" >&2; exit 1; }
export SLURM_INCLUDE_DIR SLURM_LIB_DIR

# ---- the wheel: from the cache, or built into it
source_id=$(sha256sum "$tarball" | cut -c1-12)
libslurm=$(dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null \
    || readlink -f "$SLURM_LIB_DIR/libslurm.so" | sed 's|.*/||')
pytag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
cache=${MIRAGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mirage}/pyslurm/$source_id-$libslurm-$pytag
wheel=$(ls "$cache"/pyslurm-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    tar xzf "$tarball" -C "$work"
    src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'pyslurm-*' | head -n 1)
    say "building $(basename "$src") against libslurm $libslurm (5-9 minutes)"
    "$py" -m venv "$work/build"
    "$work/build/bin/pip" install --quiet 'Cython<3' setuptools wheel
    mkdir -p "$cache"
    (cd "$src" && nice "$work/build/bin/pip" wheel --quiet --no-build-isolation --no-deps \
        -w "$cache" .)
    wheel=$(ls "$cache"/pyslurm-*.whl | head -n 1)
else
    say "cached wheel $wheel"
fi
"$venv/bin/pip" install --quiet --no-deps --force-reinstall "$wheel"
cd /
"$py" -c 'import pyslurm; print("pyslurm", pyslurm.version(), "for Slurm API", pyslurm.slurm_api_version())'
