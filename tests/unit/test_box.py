"""The Vagrant box's pure parts (mrclab/box.py) and the project Vagrantfile's choice of box."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from mrclab import box

REPO = Path(__file__).resolve().parents[2]


def test_metadata_rounds_the_disk_up_to_whole_gib():
    assert box.metadata(8 * 2**30) == {"provider": "libvirt", "format": "qcow2", "virtual_size": 8}
    assert box.metadata(8 * 2**30 + 2**20)["virtual_size"] == 9


def test_master_boot_record_one_bootable_linux_partition():
    code = bytes(range(256)) * 2
    mbr = box.master_boot_record(code, 2048, 16 * 2**21)
    assert len(mbr) == 512 and mbr[:440] == code[:440] and mbr[510:] == b"\x55\xaa"
    status, ptype, start, sectors = mbr[446], mbr[450], *struct.unpack("<II", mbr[454:462])
    assert (status, ptype, start, sectors) == (0x80, 0x83, 2048, 16 * 2**21)
    assert mbr[462:510] == bytes(48)
    with pytest.raises(ValueError):
        box.master_boot_record(b"short", 2048, 1)


def test_grub_cfg_boots_the_labelled_root():
    cfg = box.grub_cfg("/boot/vmlinuz-6.1", "/boot/initrd.img-6.1")
    assert "linux /boot/vmlinuz-6.1 root=LABEL=mrclab" in cfg and "initrd /boot/initrd.img-6.1" in cfg
    assert "set timeout=0" in cfg


def test_box_vagrantfile_names_its_own_private_key_and_rsync():
    text = box.vagrantfile()
    assert f'config.ssh.private_key_path = File.expand_path("{box.KEY_NAME}", __dir__)' in text
    assert "insecure" not in text and "config.ssh.insert_key = false" in text
    assert 'type: "rsync"' in text and '".vm/"' in text and '".venv/"' in text


# Vagrant's configure block replaced by one that records what the Vagrantfile sets.
RECORDER = r'''
require "json"
class Rec
  attr_reader :h
  def initialize; @h = {}; end
  def method_missing(name, *args, **_kw, &blk)
    key = name.to_s
    if key.end_with?("=") then @h[key.chomp("=")] = args[0]
    elsif blk then recs = Array.new(blk.arity.abs) { Rec.new }; @h["#{key}:#{args[0]}"] = recs; blk.call(*recs)
    elsif args.empty? then @h[key] ||= Rec.new
    else (@h["#{key}()"] ||= []) << args
    end
  end
  def respond_to_missing?(*) = true
end
module Vagrant
  def self.configure(_version); $config = Rec.new; yield $config; end
end
load ARGV[0]
vm = $config.h["vm"]
lv = vm.h["provider:libvirt"][0]
puts JSON.dump({"box" => vm.h["box"], "mode" => lv.h["management_network_mode"]})
'''


@pytest.mark.skipif(shutil.which("ruby") is None, reason="no ruby here to read the Vagrantfile")
@pytest.mark.parametrize("added", [True, False])
def test_vagrantfile_prefers_the_local_box_when_added(tmp_path, added):
    if added:
        (tmp_path / "boxes" / "mrclab-VAGRANTSLASH-bookworm").mkdir(parents=True)
    result = subprocess.run(["ruby", "-e", RECORDER, str(REPO / "Vagrantfile")], capture_output=True, text=True,
                            env={"VAGRANT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                            check=True)
    chosen = json.loads(result.stdout)
    assert chosen == ({"box": box.NAME, "mode": "none"} if added else {"box": "debian/bookworm64", "mode": None})
