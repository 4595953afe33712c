#!/usr/bin/env bash
# The wheel as a user gets it: built here for the Python of the Debian 13
# root's version, installed with pip into a venv of the root's own Python
# (another build of that version), then `package require tclamp` and a
# bfloat16 matmul under autocast in the root's tclsh9.0 and tclsh8.6, both
# finding the one index that `tclamp install-tcl` writes.
#     tools/wheel-check.sh ROOT PYTHON3.13     (make matrix runs it as "wheel")
set -euo pipefail
cd "$(dirname "$0")/.."
root=$1 python=$2
rm -rf dist
tools/wheels.sh "$python"
wheel=$(ls dist/tclamp-*.whl)
# A manylinux wheel whose binaries name no path of this machine and link
# neither libpython nor libtcl.
unpacked=$(mktemp -d)
(cd "$unpacked" && python3 -m zipfile -e "$OLDPWD/$wheel" .)
binaries=$(ls "$unpacked"/tclamp/_bridge[89]*.so "$unpacked"/tclamp/_loader[89]*.so)
[ "$(echo "$binaries" | wc -l)" = 4 ] || { echo "wheel-check: expected 4 binaries: $binaries"; exit 1; }
for binary in $binaries; do
    if strings "$binary" | grep -E "$PWD|/root/|/home/|pyenv" ||
       readelf -d "$binary" | grep -E 'RPATH|RUNPATH|libpython|libtcl'; then
        echo "wheel-check: $binary names this machine or links Python or Tcl"; exit 1
    fi
done
# The checkout's package and nothing else: no file left in build/ by an
# older tree.  (Not git's list: the matrix's copy of the checkout has no
# .git; the binaries, pkgIndex.tcl and bytecode are builds' own.)
package_files() {
    (cd "$1" && find tclamp -type f ! -name '*.so' ! -name pkgIndex.tcl ! -name '*.pyc' | sort)
}
if [ "$(package_files "$unpacked")" != "$(package_files src)" ]; then
    echo "wheel-check: the wheel's files are not src/tclamp's:"
    diff <(package_files "$unpacked") <(package_files src); exit 1
fi
build/wheel-tools/bin/auditwheel show "$wheel" | tr -s ' \n' ' ' | grep -q 'manylinux_2_17_x86_64' ||
    { echo "wheel-check: auditwheel does not take it as manylinux_2_17"; exit 1; }
rm -rf "$unpacked"
venv=/var/tmp/tclamp-wheel-venv
rm -rf "$root$venv" "$root/tmp/tclamp-wheel"
mkdir -p "$root/tmp/tclamp-wheel"
cp "$wheel" "$root/tmp/tclamp-wheel/"
cat > "$root/tmp/tclamp-wheel/check.tcl" <<'TCL'
package require tclamp
torch::autocast_enable cpu bfloat16
py exec {import torch; product = torch.mm(torch.ones(2, 2), torch.ones(2, 2))}
puts "Tcl [info patchlevel]: [py eval {str(product.dtype)}]"
TCL
out=$(tools/debian-root.sh trixie "$root" run sh -ec "
    python3 -m venv $venv
    $venv/bin/pip install -q /tmp/tclamp-wheel/$(basename "$wheel")
    $venv/bin/tclamp install-tcl /usr/local/lib/tcltk/tclamp >/dev/null
    for tclsh in tclsh9.0 tclsh8.6; do \$tclsh /tmp/tclamp-wheel/check.tcl || true; done")
echo "$out"
passed=$(echo "$out" | grep -cE '^Tcl (9\.0|8\.6)\.[0-9]+: torch\.bfloat16$' || true)
echo "$passed passed, $((2 - passed)) failed"
[ "$passed" = 2 ]
