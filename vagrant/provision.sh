#!/usr/bin/env bash
# One idempotent set-up for a mrclab lab machine (Debian 12 / Ubuntu 22.04+, as root).
# Installs system packages, starts OVS without systemd or the kernel module when needed,
# and makes .venv from the system Python (Debian's Mininet lives in its site-packages).
# --install-only: packages and .venv only, no sysctl and no daemon: for an image root being
# built in a chroot (`mrclab vm build`), whose own systemd starts OVS when it boots.
# --vm: also what building and booting the lab VM takes here (`make vm-test`).
# --vagrant: also Vagrant with the libvirt provider and what `mrclab vm box` takes (`make vagrant-test`,
# which starts libvirtd in a network namespace of its own).
# --venv-only: .venv alone, as any user (`make unit`, `lint`, `typecheck`): no packages, no daemon.
set -euo pipefail
install_only=0 vm=0 vagrant=0 venv_only=0
for arg in "$@"; do
  case "$arg" in
    --install-only) install_only=1 ;;
    --vm) vm=1 ;;
    --vagrant) vm=1 vagrant=1 ;;
    --venv-only) venv_only=1 ;;
    *) echo "provision.sh: unknown option $arg (--install-only, --vm, --vagrant, --venv-only)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

system_packages() {
  pkgs=(openvswitch-switch openvswitch-common mininet iproute2 ethtool clang llvm libbpf-dev
        iperf3 tcpdump tshark python3-venv python3-dev gcc make openssh-server)
  [ "$vm" -eq 0 ] || pkgs+=(qemu-system-x86 debootstrap)
  [ "$vagrant" -eq 0 ] || pkgs+=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients
                                    dnsmasq-base qemu-utils rsync)
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "provision: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # wireshark-common asks whether non-root users may capture: no (mrclab captures as root)
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    # Installing must start no daemon (openssh-server is here for the tests' own sshd, never the
    # machine's): a policy-rc.d that refuses every start, for the install only, unless one is there.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"
      trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian's ssh unit and init script never start while this file exists: the machine's sshd
    # stays off at the next boot too. Only when this script installed the server.
    [[ " ${missing[*]} " != *" openssh-server "* ]] || touch /etc/ssh/sshd_not_to_be_run
    if [ "$(trap -p EXIT)" ]; then rm -f "$policy"; trap - EXIT; fi
  fi

  # asm/ headers for BPF programs built with clang -target bpf.
  if [ ! -e /usr/include/asm ] && [ -d "/usr/include/$(uname -m)-linux-gnu/asm" ]; then
    ln -s "/usr/include/$(uname -m)-linux-gnu/asm" /usr/include/asm
  fi
}

host_setup() {
  # The userspace datapath sends on every port through ONE AF_PACKET socket, created with the
  # default send buffer; packets waiting in every shaped port's queue are charged to it, and
  # once it is full OVS drops them (tx_dropped) - losses the emulated network never made.
  # Give new sockets a large default before ovs-vswitchd starts, and restart an OVS whose
  # socket is small, but only while no bridge exists (never under someone's running lab).
  wmem=$((16 << 20))
  [ "$(sysctl -n net.core.wmem_max)" -ge "$wmem" ] || sysctl -q -w net.core.wmem_max="$wmem"
  [ "$(sysctl -n net.core.wmem_default)" -ge "$wmem" ] || sysctl -q -w net.core.wmem_default="$wmem"
  # (empty, not a failure, when ovs-vswitchd has no packet socket yet: none before the first bridge)
  ovs_sndbuf() { { ss -0 -m -p 2>/dev/null | grep -A1 '"ovs-vswitchd"' | grep -o 'tb[0-9]*' | head -1 | tr -d tb; } || true; }
  if ovs-vsctl --timeout=2 show >/dev/null 2>&1 && [ -z "$(ovs-vsctl list-br)" ]; then
    tb=$(ovs_sndbuf)
    if [ -n "$tb" ] && [ "$tb" -lt "$wmem" ]; then
      echo "provision: restarting ovs-vswitchd for a larger packet-socket send buffer"
      /usr/share/openvswitch/scripts/ovs-ctl stop >/dev/null 2>&1 || true
    fi
  fi

  # Open vSwitch daemons: answer, or start them with ovs-ctl (no systemd needed).
  if ! ovs-vsctl --timeout=2 show >/dev/null 2>&1; then
    echo "provision: starting Open vSwitch"
    ctl=/usr/share/openvswitch/scripts/ovs-ctl
    if [ -d /sys/module/openvswitch ]; then
      "$ctl" start --system-id=random >/dev/null
    else
      "$ctl" start --system-id=random --no-ovs-vswitchd >/dev/null 2>&1 || true
      "$ctl" start --system-id=random --no-ovsdb-server --no-mlockall >/dev/null 2>&1 || true
      # ovs-ctl tries to load the kernel module; without it vswitchd still runs userspace-only.
      ovs-vsctl --timeout=5 show >/dev/null 2>&1 || "$ctl" start --system-id=random --no-mlockall --no-full-hostname >/dev/null
    fi
    ovs-vsctl --timeout=5 show >/dev/null
  fi
}

python_env() {
  # Python environment: the system interpreter, which is the one Debian's Mininet is built for.
  py=/usr/bin/python3
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv --system-site-packages .venv || {
      echo "provision.sh: cannot make .venv: run 'make setup' as root first (it installs python3-venv)" >&2; exit 3; }
  fi
  stamp=.venv/.mrclab-installed
  if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ setup.py -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "provision: installing mrclab into .venv"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    # pure here: the compiled transport is built in place below, where an edit makes it rebuild
    MRCLAB_PURE=1 .venv/bin/python -m pip install -q -e '.[test]'
    touch "$stamp"
  fi
  # The checkout itself on the venv's path, for every process started from it: setuptools' editable finder
  # comes after the path, so a working directory holding a folder named mrclab (the checkout, cloned to
  # ~/mrclab, seen from ~ over SSH) would shadow the package with a namespace package, and mypyc's shared
  # library beside the package (mrclab_transport__mypyc) would not be found.
  pth="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/mrclab-checkout.pth"
  [ "$(cat "$pth" 2>/dev/null)" = "$here" ] || printf '%s\n' "$here" > "$pth"
  # The compiled build (mrclab/build.py: the transport by mypyc, the agent's batched datagram I/O in C), when it
  # is missing or older than its sources.
  # MRCLAB_PURE=1 keeps the pure-Python build; so does a machine without a C compiler.
  if [ "${MRCLAB_PURE:-}" != 1 ] && ! .venv/bin/python -c 'import sys; from mrclab import build; sys.exit(build.BUILD != "compiled")'; then
    echo "provision: compiling the transport with mypyc and the batched I/O (a minute or two)"
    # (an edit that leaves the C code as it was relinks nothing: the library is then as new as the sources)
    if .venv/bin/python setup.py -q build_ext --inplace > .venv/mypyc-build.log 2>&1; then
      touch -c mrclab_transport__mypyc.*.so mrclab/agent/_batchio.*.so
    else
      echo "provision: the transport did not compile (see .venv/mypyc-build.log); pure Python runs instead" >&2
    fi
  fi
}

if [ "$venv_only" -eq 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "provision.sh: run as root (sudo)" >&2; exit 3; }
  system_packages
  [ "$install_only" -eq 1 ] || host_setup
fi
python_env
echo "provision: ok"
