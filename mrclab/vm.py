"""The lab VM without Vagrant: the Debian 12 machine the Vagrantfile describes, built and booted with QEMU.

`build` makes a root with debootstrap (kernel, kmod, systemd) from the mirror this machine's apt
takes bookworm's main from (a local mirror or proxy serves the build too), installs openssh-server and
Open vSwitch and runs `vagrant/provision.sh --install-only` on this checkout inside it
(chroot, the host's network, a policy-rc.d that starts no daemon; anything still running
from the root afterwards is stopped by its PID), then turns it into an ext4 image with
`mkfs.ext4 -d`. Keys are generated for it: a host key (so the VM is known before it ever
boots) and a client key for root.

`up` boots it with `qemu-system-x86_64`: KVM when a guest comes up with it, else TCG;
user-mode networking with `restrict=on` (the guest reaches nothing) and one forward, from
127.0.0.1:<free port> to the guest's sshd. It writes `.vm/ssh-config`, which `--target vm`
and `mrclab vm ssh` read. Inside, systemd starts OVS with the kernel module.

Everything lives in `.vm/` of the checkout (git-ignored); the qemu process is recorded by
PID and start time, and stopped only by those.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .errors import EnvironmentNotReady
from .runstate import proc_start_time

CHECKOUT = Path(__file__).resolve().parents[1]
VM_DIR = CHECKOUT / ".vm"
ROOT = VM_DIR / "root"
DISK = VM_DIR / "disk.img"
DISK_SIZE = "8G"
DEFAULT_MIRROR = "http://deb.debian.org/debian"   # when this machine's apt names none for bookworm main
MIRROR_SCHEMES = ("http://", "https://", "file:/")   # what debootstrap fetches from (not cdrom:, mirror+...)
BASE_PACKAGES = "linux-image-amd64,kmod,systemd,systemd-sysv,udev,dbus,ca-certificates,iproute2,procps"
DAEMON_PACKAGES = ["openssh-server", "openvswitch-switch"]   # installed under policy-rc.d, in the chroot
GUEST_CHECKOUT = "/opt/mrclab"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CA = "/usr/local/share/mrclab-build-ca.crt"   # the host's CA bundle, for pip in the chroot (a TLS proxy)
STATE = VM_DIR / "vm.json"
SSH_CONFIG = VM_DIR / "ssh-config"
BOOT_TIMEOUT_S = {"kvm": 120, "tcg": 420}
SSHD_CONFIG = """HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
"""
NETWORK = "[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n"


def _run(cmd: list[str], say=None, **kwargs) -> None:
    if say:
        say("$ " + " ".join(cmd))
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
        raise EnvironmentNotReady(f"vm: `{' '.join(cmd[:3])} ...` failed: {' | '.join(tail)}")


def _need(*tools: str) -> None:
    if os.geteuid() != 0:
        raise EnvironmentNotReady("vm: building and booting the lab VM needs root")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise EnvironmentNotReady(f"vm: {', '.join(missing)} not installed (fix: make vm-setup)")


Source = tuple[list[str], list[str], list[str], list[str]]   # an apt source: types, URIs, suites, components


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[Path]:
    """The files apt reads its sources from, in its order: sources.list, then sources.list.d's *.list and
    *.sources by name."""
    listed = sorted(p for p in (etc_apt / "sources.list.d").glob("*") if p.suffix in (".list", ".sources"))
    return [etc_apt / "sources.list", *listed]


def debian_mirror(sources: list[Path]) -> str:
    """The first `deb` URI these apt sources take bookworm's main from (one-line *.list or deb822
    *.sources), so the image comes from where this machine's own packages do; else DEFAULT_MIRROR."""
    for path in sources:
        try:
            text = path.read_text()
        except OSError:  # absent or unreadable: apt would skip it too
            continue
        entries = _deb822_entries(text) if path.suffix == ".sources" else _one_line_entries(text)
        for types, uris, suites, components in entries:
            if "deb" in types and "bookworm" in suites and "main" in components:
                uri = next((u for u in uris if u.startswith(MIRROR_SCHEMES)), None)
                if uri:
                    return uri
    return DEFAULT_MIRROR


def _one_line_entries(text: str) -> list[Source]:
    """`deb [options] URI suite component...` lines as (types, URIs, suites, components)."""
    entries = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        rest = words[1:]
        if rest and rest[0].startswith("["):  # options, which may hold spaces
            closing = next((i for i, w in enumerate(rest) if w.endswith("]")), len(rest))
            rest = rest[closing + 1:]
        if len(rest) >= 3:
            entries.append(([words[0]], rest[:1], rest[1:2], rest[2:]))
    return entries


def _deb822_entries(text: str) -> list[Source]:
    """The stanzas of a deb822 sources file as (types, URIs, suites, components), disabled ones left out."""
    entries = []
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1].isspace() and key:  # a continuation of the field above
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() != "no":
            types, uris, suites, components = (fields.get(name, "").split()
                                               for name in ("types", "uris", "suites", "components"))
            entries.append((types, uris, suites, components))
    return entries


def _keys() -> None:
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        if not (VM_DIR / name).exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"mrclab-vm-{name}", "-f", str(VM_DIR / name)])


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(prefix)]


class Chroot:
    """/proc, /sys, /dev and /dev/pts of the host mounted into a root (ROOT unless told) for package
    scripts, and a policy-rc.d there that starts no daemon; all undone on exit."""

    MOUNTS = (("proc", "proc", ["-t", "proc"]), ("sys", "sys", ["-t", "sysfs"]), ("dev", "/dev", ["--bind"]),
              ("dev/pts", "/dev/pts", ["--bind"]))

    def __init__(self, root: Path = ROOT):
        self.root = root

    def __enter__(self):
        shutil.copy2("/etc/resolv.conf", self.root / "etc/resolv.conf")
        policy = self.root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\n# mrclab vm build: no daemon starts in the chroot\nexit 101\n")
        policy.chmod(0o755)
        if HOST_CA.exists():
            shutil.copy2(HOST_CA, self.root / BUILD_CA.lstrip("/"))
        self.mounted = []
        try:
            for where, what, how in self.MOUNTS:
                _run(["mount", *how, what, str(self.root / where)])
                self.mounted.append(self.root / where)
        except EnvironmentNotReady:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for path in reversed(self.mounted):
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        stop_processes_in(self.root)
        (self.root / "usr/sbin/policy-rc.d").unlink(missing_ok=True)
        (self.root / BUILD_CA.lstrip("/")).unlink(missing_ok=True)

    def run(self, *cmd: str, say=None, env: dict[str, str] | None = None) -> None:
        full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive",
                "LANG": "C.UTF-8", **(env or {})}
        if (self.root / BUILD_CA.lstrip("/")).exists():
            full["PIP_CERT"] = BUILD_CA
        _run(["chroot", str(self.root), *cmd], say, env=full)


def stop_processes_in(root: Path) -> list[int]:
    """Every process whose root directory is `root` (a daemon a package script started despite
    policy-rc.d), stopped by its PID."""
    stopped = []
    target = str(root.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "root") == target:
                os.kill(int(entry.name), signal.SIGKILL)
                stopped.append(int(entry.name))
        except OSError:
            continue
    return stopped


def copy_checkout(guest: Path) -> None:
    """This checkout's files (git's list) into `guest`, a directory of an image root."""
    from .remote.install import source_files

    guest.mkdir(parents=True, exist_ok=True)
    for path in source_files():
        dest = guest / path.relative_to(CHECKOUT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)


def build(say) -> None:
    """debootstrap, provision, configure, image. The debootstrap stage is kept between builds."""
    _need("debootstrap", "mkfs.ext4", "ssh-keygen", "chroot")
    VM_DIR.mkdir(exist_ok=True)
    _keys()
    done = ROOT / ".mrclab-debootstrap-done"
    if not done.exists():
        if _mounts_under(ROOT):  # never delete through a bind mount of the host's /dev
            raise EnvironmentNotReady(f"vm: {ROOT} still has mounts ({', '.join(_mounts_under(ROOT))}): "
                                      "unmount them first")
        shutil.rmtree(ROOT, ignore_errors=True)
        mirror = debian_mirror(apt_sources())
        say(f"debootstrap Debian 12 from {mirror} into {ROOT} (minutes)")
        _run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(ROOT), mirror], say)
        done.touch()
    say(f"copying this checkout to {GUEST_CHECKOUT} in the image")
    copy_checkout(ROOT / GUEST_CHECKOUT.lstrip("/"))
    with Chroot() as chroot:
        chroot.run("apt-get", "update", "-qq", say=say)
        chroot.run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *DAEMON_PACKAGES, say=say)
        chroot.run("bash", f"{GUEST_CHECKOUT}/vagrant/provision.sh", "--install-only", say=say)
        chroot.run("systemctl", "enable", "systemd-networkd", "ssh", "openvswitch-switch", say=say)
    _configure()
    kernels = sorted((ROOT / "boot").glob("vmlinuz-*"))
    initrds = sorted((ROOT / "boot").glob("initrd.img-*"))
    if not kernels or not initrds:
        raise EnvironmentNotReady(f"vm: no kernel or initrd in {ROOT}/boot")
    shutil.copy2(kernels[-1], VM_DIR / "vmlinuz")
    shutil.copy2(initrds[-1], VM_DIR / "initrd.img")
    say(f"making {DISK} ({DISK_SIZE}, sparse) with mkfs.ext4 -d")
    DISK.unlink(missing_ok=True)
    _run(["mkfs.ext4", "-q", "-F", "-L", "mrclab", "-d", str(ROOT), str(DISK), DISK_SIZE], say)


def _configure() -> None:
    etc = ROOT / "etc"
    (etc / "hostname").write_text("mrclab-vm\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n127.0.1.1 mrclab-vm\n::1 localhost\n")
    (etc / "fstab").write_text("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")
    (etc / "systemd/network/20-wired.network").write_text(NETWORK)
    (etc / "modules-load.d/mrclab.conf").write_text("openvswitch\n")
    (etc / "ssh/sshd_not_to_be_run").unlink(missing_ok=True)
    for old in (etc / "ssh").glob("ssh_host_*"):
        old.unlink()
    for suffix in ("", ".pub"):
        shutil.copy2(VM_DIR / f"ssh_host_ed25519_key{suffix}", etc / f"ssh/ssh_host_ed25519_key{suffix}")
    (etc / "ssh/ssh_host_ed25519_key").chmod(0o600)
    (etc / "ssh/sshd_config.d/mrclab.conf").write_text(SSHD_CONFIG)
    ssh_dir = ROOT / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text((VM_DIR / "id_ed25519.pub").read_text())
    (ssh_dir / "authorized_keys").chmod(0o600)
    link = ROOT / "usr/local/bin/mrclab"
    link.unlink(missing_ok=True)
    link.symlink_to(f"{GUEST_CHECKOUT}/.venv/bin/mrclab")


def _state() -> dict | None:
    """The recorded qemu process, if it still runs."""
    try:
        state = json.loads(STATE.read_text())
    except (OSError, ValueError):
        return None
    return state if proc_start_time(state["pid"]) == state["start"] else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HARDWARE_KVM = ("kvm_intel", "kvm_amd")  # KVM on the CPU's own virtualization: runs any guest kernel
MODULES = Path("/sys/module")


def kvm_problem(modules: Path = MODULES) -> str | None:
    """Why KVM cannot boot the lab VM's stock Debian kernel here, or None when it can. A machine that is itself a
    guest may offer /dev/kvm through PVM (the kvm_pvm module, a hypervisor for nested guests without the CPU's
    virtualization extensions), which runs only guest kernels built for PVM: it starts the domain and the guest
    never prints a line."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "no /dev/kvm to use"
    if any((modules / name).exists() for name in HARDWARE_KVM):
        return None
    if (modules / "kvm_pvm").exists():
        return ("this machine's KVM is PVM (module kvm_pvm, no kvm_intel or kvm_amd): it runs only guest kernels "
                "built for PVM, not Debian's")
    return None


def qemu_command(accel: str, port: int) -> list[str]:
    return ["qemu-system-x86_64", "-accel", accel, "-cpu", "host" if accel == "kvm" else "max",
            "-smp", "2", "-m", "2048", "-nodefaults", "-display", "none",
            "-serial", f"file:{VM_DIR / 'console.log'}", "-kernel", str(VM_DIR / "vmlinuz"),
            "-initrd", str(VM_DIR / "initrd.img"), "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0",
            "-drive", f"file={DISK},format=raw,if=virtio",
            "-netdev", f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
            "-device", "virtio-net-pci,netdev=net0", "-pidfile", str(VM_DIR / "qemu.pid"), "-daemonize"]


def up(say) -> dict:
    _need("qemu-system-x86_64")
    running = _state()
    if running:
        say(f"the lab VM already runs (pid {running['pid']}, {running['accel']}, ssh port {running['port']})")
        return running
    if not DISK.exists():
        raise EnvironmentNotReady(f"vm: no image at {DISK}: build it with `mrclab vm build`")
    problem = kvm_problem()
    if problem is not None:
        say(f"no KVM for the lab VM: {problem}; TCG instead (about twenty times slower)")
    for accel in (["kvm"] if problem is None else []) + ["tcg"]:
        port = _free_port()
        host_key = (VM_DIR / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        (VM_DIR / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_key)}\n")
        SSH_CONFIG.write_text(f"Host mrclab-vm\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                              f"  IdentityFile {VM_DIR / 'id_ed25519'}\n  IdentitiesOnly yes\n"
                              f"  UserKnownHostsFile {VM_DIR / 'known_hosts'}\n  StrictHostKeyChecking yes\n")
        (VM_DIR / "console.log").unlink(missing_ok=True)
        say(f"booting the lab VM with {accel} (ssh on 127.0.0.1:{port})")
        started = subprocess.run(qemu_command(accel, port), capture_output=True, text=True, check=False)
        if started.returncode != 0:
            say(f"qemu with {accel} did not start: {started.stderr.strip().splitlines()[-1:]}")
            continue
        pid = int((VM_DIR / "qemu.pid").read_text())
        state = {"pid": pid, "start": proc_start_time(pid), "port": port, "accel": accel, "booted_at": time.time()}
        STATE.write_text(json.dumps(state))
        t0 = time.monotonic()
        if _wait_for_ssh(state, BOOT_TIMEOUT_S[accel]):
            state["boot_s"] = round(time.monotonic() - t0, 1)
            STATE.write_text(json.dumps(state))
            say(f"the lab VM is up after {state['boot_s']} s ({accel}); `mrclab run --target vm ...`")
            return state
        say(f"no ssh from the guest within {BOOT_TIMEOUT_S[accel]} s with {accel} (console: "
            f"{VM_DIR / 'console.log'})")
        _stop_qemu(state)
    raise EnvironmentNotReady(f"vm: the lab VM did not boot (console: {VM_DIR / 'console.log'})")


def _wait_for_ssh(state: dict, timeout: float) -> bool:
    from .remote import ssh, target
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # a guest still booting resets the forward
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_start_time(state["pid"]) != state["start"]:
            return False
        try:
            with ssh.Connection(target.parse("vm"), say=lambda _: None) as conn:
                if conn.run("systemctl is-system-running --wait >/dev/null 2>&1; true", timeout=timeout).code == 0:
                    return True
        except EnvironmentNotReady:
            time.sleep(2)
    return False


def _stop_qemu(state: dict, grace: float = 5.0) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        if proc_start_time(state["pid"]) != state["start"]:
            return
        os.kill(state["pid"], sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and proc_start_time(state["pid"]) == state["start"]:
            time.sleep(0.1)


def down(say) -> None:
    from .remote import ssh, target
    state = _state()
    if state is None:
        say("the lab VM is not running")
    else:
        say("shutting the lab VM down")
        try:
            with ssh.Connection(target.parse("vm"), say=say) as conn:
                conn.run("systemctl poweroff >/dev/null 2>&1 &", timeout=30)
        except EnvironmentNotReady as exc:
            say(f"no clean shutdown ({exc}); stopping qemu")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc_start_time(state["pid"]) == state["start"]:
            time.sleep(0.5)
        _stop_qemu(state)
    for path in (STATE, SSH_CONFIG, VM_DIR / "qemu.pid"):
        path.unlink(missing_ok=True)


def ssh_command(args: tuple[str, ...]) -> list[str]:
    if _state() is None:
        raise EnvironmentNotReady("vm: the lab VM is not running: `mrclab vm up`")
    return ["ssh", "-F", str(SSH_CONFIG), "mrclab-vm", *args]
