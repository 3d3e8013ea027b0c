#!/bin/sh
# Build the vendored pyslurm 22.5.3 (Slurm 22.05's Python binding; PyPI has none) into a
# virtual environment, against the installed libslurm headers and library.
#
#   scripts/build-pyslurm.sh VENV [TARBALL]
#
# VENV: the environment to install into (e.g. Mirage's); it gets Cython<3, setuptools and
# wheel for the build. TARBALL: default ../shared/vendor/pyslurm-22.5.3.tar.gz beside the
# checkout, or $PYSLURM_TARBALL. Needs libslurm-dev (Debian: apt-get install libslurm-dev)
# and a C compiler. SLURM_INCLUDE_DIR / SLURM_LIB_DIR override where Slurm is found
# (default /usr/include and the library's directory from the multiarch triplet).
# Ends by importing pyslurm and printing its version and the Slurm API it was built for.
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 VENV [TARBALL]" >&2
    exit 2
fi
venv=$1
here=$(cd "$(dirname "$0")/.." && pwd)
tarball=${2:-${PYSLURM_TARBALL:-$here/../shared/vendor/pyslurm-22.5.3.tar.gz}}
py=$venv/bin/python

[ -x "$py" ] || { echo "$0: no Python at $py (create the venv first)" >&2; exit 1; }
[ -f "$tarball" ] || { echo "$0: no pyslurm source at $tarball" >&2; exit 1; }

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

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'pyslurm-*' | head -n 1)

"$py" -m pip install --quiet 'Cython<3' setuptools wheel
(cd "$src" && nice "$py" -m pip install --no-build-isolation --quiet .)
cd /
"$py" -c 'import pyslurm; print("pyslurm", pyslurm.version(), "for Slurm API", pyslurm.slurm_api_version())'
