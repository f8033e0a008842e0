"""The committed Python classes of the Chakra schema (mrclab/trace/et_def_pb2.py, made by `make proto`) are the
schema's: protoc run on et_def.proto now gives the same descriptor, and the same module text when it is the same
protoc. The classes are committed rather than generated at install time so that installing mrclab needs no
protoc (remote targets, the lab VM, a plain `pip install`)."""
import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from mrclab.trace import et_def_pb2
from tests.conftest import REPO

PROTO = "mrclab/trace/et_def.proto"


@pytest.fixture(scope="module")
def protoc() -> str:
    found = shutil.which("protoc")
    if found is None:
        pytest.fail("protoc is missing: vagrant/provision.sh installs it (Debian's protobuf-compiler)")
    return found


def test_the_committed_classes_describe_the_proto_file(protoc, tmp_path):
    out = tmp_path / "set.pb"
    subprocess.run([protoc, "--proto_path=.", f"--descriptor_set_out={out}", PROTO], cwd=REPO, check=True)
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in fresh.message_type:  # a descriptor set names each field's JSON name; the module leaves it out
        for f in message.field:
            f.ClearField("json_name")
    committed = descriptor_pb2.FileDescriptorProto.FromString(et_def_pb2.DESCRIPTOR.serialized_pb)
    assert committed == fresh, "mrclab/trace/et_def_pb2.py is stale: run `make proto` and commit it"


def test_the_committed_module_is_what_this_protoc_writes(protoc, tmp_path):
    subprocess.run([protoc, "--proto_path=.", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", PROTO], cwd=REPO,
                   check=True)
    for name in ("et_def_pb2.py", "et_def_pb2.pyi"):
        assert (tmp_path / "mrclab/trace" / name).read_text() == (Path(REPO) / "mrclab/trace" / name).read_text(), \
            f"{name} differs from what `make proto` writes: run it and commit the result"


def test_the_schema_keeps_the_public_field_numbers():
    """Wire compatibility with Chakra's et_def.proto: the numbers a converter writes."""
    node = et_def_pb2.Node.DESCRIPTOR.fields_by_name
    assert {k: node[k].number for k in ("id", "name", "type", "ctrl_deps", "data_deps", "duration_micros",
                                        "attr")} == {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5,
                                                     "duration_micros": 7, "attr": 10}
    attr = et_def_pb2.AttributeProto.DESCRIPTOR.fields_by_name
    assert (attr["int64_val"].number, attr["string_val"].number, attr["bool_list"].number) == (9, 29, 28)
    assert et_def_pb2.COMM_COLL_NODE == 7 and et_def_pb2.ALL_TO_ALL == 6 and et_def_pb2.BARRIER == 9
