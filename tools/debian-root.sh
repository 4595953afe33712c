#!/usr/bin/env bash
# A Debian root for testing tclamp on the Tcls and Pythons of another
# Debian: trixie (Debian 13: Tcl 9.0, Python 3.13) or sid (unstable: Tcl
# 8.6.18 and 9.0.4, Pythons 3.14 and 3.15).  Run as root.
#
#   tools/debian-root.sh SUITE ROOT              make the root (reused when done)
#   tools/debian-root.sh SUITE ROOT run CMD...   run CMD inside it, with proc,
#                                                dev, dev/pts and sys mounted
#                                                for CMD only
#
# The packages come from the Debian archive this machine's apt already uses.
set -euo pipefail

suite=${1:?usage: $0 trixie|sid ROOT [run CMD...]}
root=${2:?usage: $0 trixie|sid ROOT [run CMD...]}
shift 2
# xauth for xvfb-run (only recommended by xvfb); python3-tk, whose Tcl is
# 8.6, for the tests that say why a tkinter host cannot load Tcl 9's bridge.
# sid has one tcl-thread for both Tcls (no tcl9.0-thread) and its Pythons
# by version; valgrind is what `make setup` would install otherwise.
case $suite in
    trixie) packages=tcl9.0-dev,tcl9.0-thread,tk9.0,tcl8.6-dev,tcl-thread,python3-dev,python3-venv,build-essential,make,git,xvfb,xauth,python3-tk ;;
    sid) packages=tcl9.0-dev,tk9.0,tcl8.6-dev,tk8.6,tcl-thread,python3.14-dev,python3.14-venv,python3.15-dev,python3.15-venv,build-essential,make,git,xvfb,xauth,valgrind,python3-tk ;;
    *) echo "$0: no packages known for suite $suite (trixie, sid)" >&2; exit 2 ;;
esac
stamp=$root/.tclamp-$suite-root

# The first non-security archive named in apt's sources (deb822 or one-line).
debian_archive() {
    local uri
    uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' \
              /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1)
    if [ -z "$uri" ]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; break } }' \
                  /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
              grep -v security | head -n1)
    fi
    [ -n "$uri" ] || { echo "no Debian archive in this machine's apt sources" >&2; exit 1; }
    echo "$uri"
}

make_root() {
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
        return
    fi
    [ "$(id -u)" = 0 ] || { echo "$0: run as root (debootstrap, chroot, mount)" >&2; exit 1; }
    if [ -f "$stamp" ]; then
        # A root made with fewer packages gets the rest.
        run_inside sh -c "apt-get update -qq && apt-get install -y -qq ${packages//,/ }"
    else
        # A half-made root (an interrupted debootstrap) is started over.
        if [ -e "$root" ]; then
            unmount_all
            rm -rf --one-file-system "$root"
        fi
        # A new machine may not have it: it is this machine's own Debian's.
        command -v debootstrap >/dev/null ||
            { apt-get update -qq && apt-get install -y -qq debootstrap; }
        debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$(debian_archive)"
        copy_host_files
    fi
    echo "$packages" > "$stamp"
}

# pip needs this machine's CA bundle; torchrun's rendezvous needs the host
# name to resolve.  sid's Release file is often past its Valid-Until (the
# archive is renewed weekly, a snapshot of it is not): apt inside the root
# takes it anyway.
copy_host_files() {
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    cp /etc/hosts /etc/resolv.conf "$root/etc/"
    echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99tclamp-valid-until"
}

# Mounts that an interrupted debootstrap left behind (removed before a
# half-made root is deleted).
mounts=(proc dev dev/pts sys)

unmount_all() {
    local i
    for (( i = ${#mounts[@]} - 1; i >= 0; i-- )); do
        if mountpoint -q "$root/${mounts[i]}"; then
            umount "$root/${mounts[i]}" 2>/dev/null || umount -l "$root/${mounts[i]}"
        fi
    done
}

# The command runs in a mount namespace of its own: its mounts are seen by
# nothing else (two runs at once cannot unmount each other's) and vanish
# with it, however it ends.
run_inside() {
    copy_host_files
    unshare --mount --propagation private /bin/sh -c '
        root=$1; shift
        for m in proc dev dev/pts sys; do mount --bind "/$m" "$root/$m" || exit 1; done
        exec chroot "$root" "$@"' sh "$root" \
        /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt "$@"
}

# Two stacks may want one root at once (CI's lanes): one makes it, the
# other waits for it.
exec 8>"$root.lock"
flock 8
make_root
exec 8>&-
case "${1:-}" in
    "") ;;
    run) shift; run_inside "$@" ;;
    *) echo "usage: $0 trixie|sid ROOT [run CMD...]" >&2; exit 2 ;;
esac
