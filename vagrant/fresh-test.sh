#!/usr/bin/env bash
# `make fresh-test`: what `make check`, `make lab` and `make test` do on a new Debian 12 machine.
# Builds a Debian 12 root file system with debootstrap (cached in $FRESH_DIR/base, copied fresh for
# every run), clones this checkout's committed state into it, and runs the three commands there as
# root, in mount and PID namespaces of its own (and, after `make check`, a network namespace). The root becomes the mount namespace's root with
# pivot_root (a chroot is not enough: Mininet's processes enter the hosts' mount namespaces and so
# would leave a chroot), with a private /run and /tmp. The machine's CA certificates, its apt
# settings and pip's `cert` setting are copied in, so packages install as on the machine itself.
# Everything started inside dies with the PID namespace; afterwards the script checks that nothing of it is left
# on this machine (processes, mounts, namespaces, bridges, interfaces) and that no remote or cluster test was
# skipped in there. The root is removed when all passed (FRESH_KEEP=1 keeps it), kept for inspection when not,
# until the next run. `.ci/run` runs it after `make test`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "fresh-test: run as root" >&2; exit 3; }
work=${FRESH_DIR:-/var/tmp/mrclab-fresh}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
root="$work/root-$stamp"
log="$work/fresh-test-$stamp.log"
mkdir -p "$work"
chmod 700 "$work"
started=$(date +%s)
in_use() {  # a process runs with its root there (another fresh-test still running)
  for proc in /proc/[0-9]*; do
    case "$(readlink "$proc/root" 2>/dev/null)" in "$1"|"$1"/*) return 0 ;; esac
  done
  return 1
}
for old in "$work"/root-*; do  # the last run's root, kept because it failed: its log stays
  if [ -d "$old" ] && ! in_use "$old"; then rm -rf --one-file-system "$old"; fi
done

# What this machine has before, to find what the run leaves behind (a fresh root's everything lives in
# namespaces of its own: none of it may outlive them).
host_state() {
  { ip netns list 2>/dev/null | awk '{print "namespace " $1}'
    ovs-vsctl --timeout=2 list-br 2>/dev/null | sed 's/^/bridge /'
    ip -o link show 2>/dev/null | awk -F': ' '{print "interface " $2}' | sed 's/@.*//'
  } | sort
}
before=$(host_state)

if ! command -v debootstrap >/dev/null; then
  echo "fresh-test: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
if [ ! -x "$work/base/usr/bin/apt-get" ]; then
  echo "fresh-test: debootstrap bookworm into $work/base (once; minutes)"
  rm -rf "$work/base.new"
  debootstrap --variant=minbase --include=make,git,ca-certificates,python3 bookworm "$work/base.new" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { echo "fresh-test: debootstrap failed, see $work/debootstrap.log" >&2; exit 1; }
  mv "$work/base.new" "$work/base"
fi
echo "fresh-test: a fresh root at $root"
cp -a "$work/base" "$root"

# What makes packages install here as on this machine: CA certificates, apt settings, pip's cert.
cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then  # the machine's sources replace debootstrap's
  cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/"
  rm -f "$root/etc/apt/sources.list"
fi
cp /etc/apt/apt.conf.d/99* "$root/etc/apt/apt.conf.d/" 2>/dev/null || true
cert=$(pip3 config get global.cert 2>/dev/null || true)
if [ -n "$cert" ]; then
  printf '[global]\ncert = %s\n' "$cert" >"$root/etc/pip.conf"
fi
git clone -q --no-hardlinks "$here" "$root/root/mrclab"

# `make check` installs everything (it needs the network); `make lab` and `make test` then run in a
# network namespace of their own too, with an OVS of their own, so no other lab on this machine shares
# their loopback or their interfaces. Each target runs whatever the one before said.
inside='cd /root/mrclab
failed=0
step() {
  echo "=== make $1"
  start=$(date +%s)
  if make "$1"; then
    echo "=== make $1 ok after $(( $(date +%s) - start )) s"
  else
    echo "=== make $1 FAILED (exit $?) after $(( $(date +%s) - start )) s"
    failed=1
  fi
}
step check
/usr/share/openvswitch/scripts/ovs-ctl stop >/dev/null 2>&1 || true
export -f step
# sysfs shows the network namespace it was mounted in: mount it again from inside the new one, or
# /sys/class/net would list the interfaces of the machine, not those of the lab.
unshare --net bash -c "mount -t sysfs sysfs /sys && ip link set lo up; failed=0; step lab; step test; exit \$failed" || failed=1
exit $failed'

# Mount + PID namespaces; the new root is mounted privately, /run and /tmp are its own.
unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
root=$1; inside=$2
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mkdir -p "$root/.old-root"
cd "$root"
pivot_root . .old-root
umount -l /.old-root
rmdir /.old-root
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  TERM="${TERM:-dumb}" bash -c "$inside"  # a clean environment: nothing of this machine but the copied files
' fresh-test "$root" "$inside" 2>&1 | tee "$log" && status=0 || status=$?  # (pipefail: unshare's)

# Nothing of the root may be left: no process running in it, no mount in it, no namespace, bridge or interface.
left=()
for proc in /proc/[0-9]*; do
  case "$(readlink "$proc/root" 2>/dev/null)" in "$root"|"$root"/*) left+=("process ${proc#/proc/}: $(tr '\0' ' ' <"$proc/cmdline")") ;; esac
done
while read -r _ _ _ _ point _; do
  case "$point" in "$root"|"$root"/*) left+=("mount $point") ;; esac
done </proc/self/mountinfo
while read -r line; do left+=("$line"); done < <(comm -13 <(echo "$before") <(host_state))
if [ "${#left[@]}" -gt 0 ]; then
  printf 'fresh-test: left behind on this machine: %s\n' "${left[@]}" | tee -a "$log"
  status=1
fi
# The remote and cluster tests must have run there, not skipped.
if skipped=$(grep -E '^SKIPPED .*tests/integration/test_(remote|cluster)' "$log"); then
  printf 'fresh-test: remote or cluster tests were skipped on the fresh root:\n%s\n' "$skipped" | tee -a "$log"
  status=1
fi
took=$(( $(date +%s) - started ))
if [ "$status" -eq 0 ] && [ -z "${FRESH_KEEP:-}" ]; then
  rm -rf --one-file-system "$root"
  echo "fresh-test: ok after ${took} s; log $log"
else
  echo "fresh-test: exit $status after ${took} s; log $log; root left at $root (the next run removes it)"
fi
exit "$status"
