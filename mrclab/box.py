"""The lab VM image as a Vagrant box for the libvirt provider (`mrclab vm box`).

Its root is a copy of the one `mrclab vm build` makes, plus what Vagrant expects of a base box: a
`vagrant` user with passwordless sudo whose key is the box's own (the box's Vagrantfile names the
private half, which ships in the box), rsync for the synced folder, any hostname resolving
(libnss-myhostname), and this checkout already provisioned at /vagrant (its .venv and compiled
transport), so that neither `vagrant up` nor `sudo make lab` there needs a network. The disk holds
one MBR partition, the ext4 root at 1 MiB, and GRUB's boot code before it, written directly (no
loop device, no grub-install); qemu-img turns it into qcow2. The box file is an uncompressed tar
of metadata.json, Vagrantfile, box.img and the key.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import struct
import tarfile
from pathlib import Path

from . import vm
from .errors import EnvironmentNotReady

NAME = "mrclab/bookworm"
BOX_ROOT = vm.VM_DIR / "box-root"
BOX_DIR = vm.VM_DIR / "box"
BOX_FILE = vm.VM_DIR / "mrclab-bookworm.box"
KEY_NAME = "vagrant_ed25519"
PACKAGES = ["sudo", "rsync", "grub-pc-bin", "libnss-myhostname"]
SECTOR = 512
PART_START = 2048                   # sectors: the partition at 1 MiB, GRUB's core.img in the gap before it
# the guest keeps its own .venv and compiled transport (a source edited here is newer than that build, which
# then gives way to the sources until provisioning rebuilds it: mrclab/build.py)
RSYNC_EXCLUDE = [".vagrant/", ".vm/", ".venv/", ".git/", "results/", "build/", "*.so"]
CMDLINE = "root=LABEL=mrclab ro console=tty0 console=ttyS0 net.ifnames=0"
# GRUB finds its modules and grub.cfg here; core.img carries what reading them takes
GRUB_PREFIX = "(hd0,msdos1)/boot/grub"
CORE_MODULES = ["biosdisk", "part_msdos", "ext2"]


def metadata(disk_bytes: int) -> dict:
    """vagrant-libvirt's metadata.json: the disk's size in whole GiB, rounded up."""
    return {"provider": "libvirt", "format": "qcow2", "virtual_size": math.ceil(disk_bytes / 2**30)}


def master_boot_record(boot_code: bytes, start: int, sectors: int) -> bytes:
    """Sector 0: GRUB's boot.img code, then one bootable Linux partition (LBA only) and the signature."""
    if len(boot_code) < 440:
        raise ValueError(f"boot code of {len(boot_code)} bytes: expected GRUB's boot.img (512)")
    entry = struct.pack("<B3sB3sII", 0x80, b"\xfe\xff\xff", 0x83, b"\xfe\xff\xff", start, sectors)
    return boot_code[:440] + bytes(6) + entry + bytes(48) + b"\x55\xaa"


def grub_cfg(kernel: str, initrd: str) -> str:
    """Boot the given kernel and initrd (paths in the root) at once, with the console on the serial port too."""
    return (f'set default=0\nset timeout=0\nmenuentry "mrclab lab VM" {{\n  linux {kernel} {CMDLINE}\n'
            f'  initrd {initrd}\n}}\n')


def vagrantfile() -> str:
    """The box's own Vagrantfile: its key, and an rsync synced folder (no NFS server needed)."""
    return f"""# The mrclab lab VM box (`mrclab vm box`): log in with the key that ships beside this file.
Vagrant.configure("2") do |config|
  config.ssh.username = "vagrant"
  config.ssh.private_key_path = File.expand_path("{KEY_NAME}", __dir__)
  config.ssh.insert_key = false
  config.vm.synced_folder ".", "/vagrant", type: "rsync", rsync__exclude: {json.dumps(RSYNC_EXCLUDE)}
  config.vm.provider "libvirt" do |lv|
    lv.disk_bus = "virtio"
  end
end
"""


def build(say) -> Path:
    """Copy the lab VM root, make it a base box, image it, pack it."""
    vm._need("rsync", "mkfs.ext4", "qemu-img", "ssh-keygen", "chroot")
    if not (vm.ROOT / ".mrclab-debootstrap-done").exists() or \
            not (vm.ROOT / vm.GUEST_CHECKOUT.lstrip("/") / ".venv").is_dir():
        raise EnvironmentNotReady(f"vm box: no lab VM root in {vm.ROOT}: build it first with `mrclab vm build`")
    for root in (vm.ROOT, BOX_ROOT):
        if vm._mounts_under(root):
            raise EnvironmentNotReady(f"vm box: {root} still has mounts ({', '.join(vm._mounts_under(root))}): "
                                      "unmount them first")
    key = vm.VM_DIR / KEY_NAME
    if not key.exists():
        vm._run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mrclab-box-vagrant", "-f", str(key)])
    say(f"copying {vm.ROOT} to {BOX_ROOT}")
    BOX_ROOT.mkdir(mode=0o755, exist_ok=True)
    # /vagrant is kept between builds: its .venv is made once
    vm._run(["rsync", "-aHAX", "--numeric-ids", "--delete", "--exclude", "/vagrant/", f"{vm.ROOT}/", f"{BOX_ROOT}/"],
            say)
    say("copying this checkout to /vagrant in the box")
    vm.copy_checkout(BOX_ROOT / "vagrant")
    with vm.Chroot(BOX_ROOT) as chroot:
        chroot.run("apt-get", "update", "-qq", say=say)
        chroot.run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES, say=say)
        chroot.run("bash", "/vagrant/vagrant/provision.sh", "--install-only", say=say)
        chroot.run("sh", "-c", "id vagrant >/dev/null 2>&1 || useradd --create-home --shell /bin/bash vagrant",
                   say=say)
        chroot.run("sh", "-c", "rm -rf /boot/grub/i386-pc && mkdir -p /boot/grub && "
                   "cp -r /usr/lib/grub/i386-pc /boot/grub/ && grub-mkimage -O i386-pc -o /boot/grub/core.img "
                   f"-p '{GRUB_PREFIX}' {' '.join(CORE_MODULES)}", say=say)
    _configure(key)
    return _pack(say)


def _configure(key: Path) -> None:
    etc = BOX_ROOT / "etc"
    (etc / "fstab").write_text("LABEL=mrclab / ext4 rw,errors=remount-ro 0 1\n")
    kernels = sorted((BOX_ROOT / "boot").glob("vmlinuz-*"))
    initrds = sorted((BOX_ROOT / "boot").glob("initrd.img-*"))
    if not kernels or not initrds:
        raise EnvironmentNotReady(f"vm box: no kernel or initrd in {BOX_ROOT}/boot")
    (BOX_ROOT / "boot/grub/grub.cfg").write_text(grub_cfg(f"/boot/{kernels[-1].name}", f"/boot/{initrds[-1].name}"))
    sudoers = etc / "sudoers.d/vagrant"
    sudoers.write_text("vagrant ALL=(ALL) NOPASSWD: ALL\n")
    sudoers.chmod(0o440)
    # each VM made from the box gets its own machine id (and so its own DHCP client id) at first boot
    (etc / "machine-id").write_text("")
    (BOX_ROOT / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    uid, gid = _ids("vagrant")
    ssh_dir = BOX_ROOT / "home/vagrant/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    authorized = ssh_dir / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    authorized.chmod(0o600)
    for path in (ssh_dir, authorized):
        os.chown(path, uid, gid, follow_symlinks=False)


def _ids(user: str) -> tuple[int, int]:
    for line in (BOX_ROOT / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise EnvironmentNotReady(f"vm box: no user {user} in {BOX_ROOT}/etc/passwd")


def _pack(say) -> Path:
    BOX_DIR.mkdir(exist_ok=True)
    raw = BOX_DIR / "disk.raw"
    raw.unlink(missing_ok=True)
    say(f"making the box's disk ({vm.DISK_SIZE} partition at 1 MiB) with mkfs.ext4 -d")
    vm._run(["mkfs.ext4", "-q", "-F", "-L", "mrclab", "-O", "^orphan_file,^metadata_csum_seed",
             "-E", f"offset={PART_START * SECTOR}", "-d", str(BOX_ROOT), str(raw), vm.DISK_SIZE], say)
    size = raw.stat().st_size
    boot = (BOX_ROOT / "usr/lib/grub/i386-pc/boot.img").read_bytes()
    core = (BOX_ROOT / "boot/grub/core.img").read_bytes()
    if len(core) > (PART_START - 1) * SECTOR:
        raise EnvironmentNotReady(f"vm box: GRUB's core.img ({len(core)} bytes) does not fit before the partition")
    with raw.open("r+b") as disk:
        disk.write(master_boot_record(boot, PART_START, size // SECTOR - PART_START))
        disk.write(core)   # sector 1 on: where boot.img's default blocklist looks
    image = BOX_DIR / "box.img"
    say(f"converting to qcow2: {image}")
    vm._run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(image)], say)
    raw.unlink()
    (BOX_DIR / "metadata.json").write_text(json.dumps(metadata(size)) + "\n")
    (BOX_DIR / "Vagrantfile").write_text(vagrantfile())
    shutil.copy2(vm.VM_DIR / KEY_NAME, BOX_DIR / KEY_NAME)
    say(f"packing {BOX_FILE}")
    partial = BOX_FILE.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        for name in ("metadata.json", "Vagrantfile", KEY_NAME, "box.img"):
            tar.add(BOX_DIR / name, arcname=name)
    partial.replace(BOX_FILE)
    return BOX_FILE
