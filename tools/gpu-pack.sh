#!/bin/sh
# Makes build/gpu-check, all that tools/gpu-check.sh needs on a GPU machine
# without network, Tcl or compilers: Debian's tcl8.6, libtcl8.6 and
# tcl-thread packages (this machine's archive, Debian 12), the tclamp wheel
# for PYTHON's version (tools/wheels.sh: bridges for Tcl 8.6 and 9.0), and
# the wheels of the test tools for that version.  The GPU machine brings its
# own torch.
#     tools/gpu-pack.sh [PYTHON]      (make gpu-pack; default: pyenv's 3.12.1)
set -eu
cd "$(dirname "$0")/.."
python=${1:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/3.12.1/bin/python3}
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
wheel="dist/tclamp-*-cp$(echo "$version" | tr -d .)-*.whl"
# That Python's own pip, so that a fresh clone needs no `make setup` first.
pip=${PACK_PIP:-$python -m pip}
pack=build/gpu-check
rm -rf $pack
mkdir -p $pack/debs $pack/wheels
(cd $pack/debs && apt-get download -q tcl8.6 libtcl8.6 tcl-thread)
rm -f $wheel
tools/wheels.sh "$python"
cp $wheel $pack/wheels/
# numpy too, for a machine whose torch came without it (torch warns then).
$pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$version" \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 -d $pack/wheels \
    pytest pytest-xdist pytest-timeout hypothesis pexpect numpy
ls $pack/debs $pack/wheels
du -sh $pack
