#!/bin/sh
# Unpacks Debian's tcl<VERSION>-dev (headers, stub library, tclConfig.sh)
# into DEST without installing it, and prints the tclConfig.sh that the
# build reads (setup.py finds the paths below DEST).  Debian 13 has both Tcl
# 8.6 and 9.0; the archive is the one this machine's apt already uses.
#     tools/tcl-headers.sh 9.0 build/tcl/9.0
set -eu
version=$1
dest=$(mkdir -p "$2" && cd "$2" && pwd)
arch=$(dpkg --print-architecture)
config=$dest/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$arch-linux-gnu")/tcl$version/tclConfig.sh
if [ ! -f "$config" ]; then
    archive=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null \
              | grep -v security | head -n 1)
    [ -n "$archive" ] || archive=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' \
                                   /etc/apt/sources.list 2>/dev/null)
    [ -n "$archive" ] || { echo "tcl-headers: no Debian archive in this machine's apt sources" >&2; exit 1; }
    apt=$dest/.apt
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
    echo "deb $archive trixie main" > "$apt/sources.list"
    # No dpkg status: what this machine has installed (another Debian's
    # Tcl, in a sid root) must not pick the version to download.
    opts="-o Dir::Etc::SourceList=$apt/sources.list -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists=$apt/lists -o Dir::Cache=$apt/cache -o APT::Sandbox::User=root
          -o Dir::State::status=/dev/null"
    apt-get $opts update -qq
    (cd "$apt" && apt-get $opts download "tcl$version-dev" >/dev/null)
    dpkg -x "$apt"/tcl"$version"-dev_*.deb "$dest"
fi
[ -f "$config" ] || { echo "tcl-headers: $config missing after unpacking" >&2; exit 1; }
echo "$config"
