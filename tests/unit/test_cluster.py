"""A lab over several servers: the placements (Mininet Cluster placers) and the cluster file; no server needed."""
import pytest
from mininet.examples.cluster import Placer

from mrclab import placements
from mrclab.cluster.placement import MapPlacer, PodsPlacer, assign, spec_name
from mrclab.errors import UsageError
from mrclab.spec import cluster, topology

TOPOLOGIES = ["clos-4p-4l-4s", "clos-8p-4l-4s"]


def servers(n):
    return [f"server{i}" for i in range(n)]


def spreads_within(counts, most):
    return max(counts) - min(counts) <= most


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("n", [2, 3])
def test_pods_keep_a_leaf_position_and_its_hosts_together(name, n):
    t = topology.load(name)
    a = assign(t, servers(n), "pods", source="test")
    placed = [node for share in a.shares for node in (*share.leaves, *share.spines, *share.hosts)]
    assert sorted(placed) == sorted([*t.host_names, *t.switch_names])  # every node once
    assert a.crossing["host-leaf"] == 0 and a.crossing["leaf-spine"] > 0
    for share in a.shares:  # whole positions: leaf j of every plane, and the hosts under it
        positions = {int(leaf.split("l")[1]) for leaf in share.leaves}
        assert set(share.leaves) == {f"p{k}l{j}" for k in range(t.planes) for j in positions}
        assert {t.plan.leaf_of(t.host_index(h)) for h in share.hosts} == positions
    assert spreads_within([len(s.leaves) // t.planes for s in a.shares], 1)
    assert spreads_within([s.agents for s in a.shares], t.hosts_per_leaf)  # whole pods: within one pod's hosts
    assert spreads_within([len(s.spines) for s in a.shares], 1)
    if t.leaves % n == 0:
        assert len({s.agents for s in a.shares}) == 1


def test_pods_give_the_extra_spine_to_a_server_with_a_position_fewer():
    a = assign(topology.load("clos-4p-4l-4s"), servers(3), "pods", source="test")
    assert [(len(s.leaves), len(s.spines), s.agents) for s in a.shares] == [(8, 5, 4), (4, 6, 2), (4, 5, 2)]
    assert set(a.shares[1].spines) == {"p1s1", "p2s1", "p3s1", "p0s2", "p1s2", "p2s2"}  # in index order


def test_pods_on_two_servers_cross_only_leaf_spine_cables_to_the_other_half():
    a = assign(topology.load("clos-4p-4l-4s"), servers(2), source="test")  # pods is the default
    assert a.placement == "pods" and a.cables == {"host-leaf": 32, "leaf-spine": 64}
    assert a.crossing == {"host-leaf": 0, "leaf-spine": 32}
    assert a.shares[0].hosts == ("h0", "h1", "h2", "h3") and a.shares[0].spines[:3] == ("p0s0", "p0s1", "p1s0")


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("n", [2, 3])
def test_planes_keep_a_plane_together_and_spread_the_hosts(name, n):
    t = topology.load(name)
    a = assign(t, servers(n), "planes", source="test")
    assert a.crossing["leaf-spine"] == 0
    for share in a.shares:
        planes = {int(leaf[1:].split("l")[0]) for leaf in share.leaves}
        assert set(share.leaves) | set(share.spines) == {f"p{k}{kind}{i}" for k in planes
                                                         for kind, count in (("l", t.leaves), ("s", t.spines))
                                                         for i in range(count)}
    assert spreads_within([s.agents for s in a.shares], 1)
    # a host's cables to every plane on another server cross
    on = {h: s for s in a.shares for h in s.hosts}
    assert a.crossing["host-leaf"] == sum(t.planes - len(on[h].leaves) // t.leaves for h in t.host_names)


@pytest.mark.parametrize("placement,n,fragment", [
    ("pods", 5, "--servers 5: pods placement: 5 servers is more than the fabric's 4 leaf positions"),
    ("planes", 5, "--servers 5: planes placement: 5 servers is more than the fabric's 4 planes"),
])
def test_more_servers_than_the_placement_can_fill_is_bad_input(placement, n, fragment):
    with pytest.raises(UsageError, match=fragment):
        assign(topology.load("clos-4p-4l-4s"), servers(n), placement, source=f"--servers {n}")


def test_the_placers_are_mininet_cluster_placers_and_tell_roles_by_name():
    """Built as MininetCluster.placeNodes builds them: routers (Mininet hosts, no switches) and the run's prefix."""
    t = topology.load("clos-2p-2l-2s")
    nodes = [f"mab1{n}" for n in (*t.host_names, *t.switch_names)]
    placer = PodsPlacer(servers=["a", "b"], nodes=nodes, hosts=nodes, switches=[],
                        links=[(f"mab1{link.b}", f"mab1{link.a}") for link in t.links])
    assert isinstance(placer, Placer)
    places = [placer.place(n) for n in ("mab1h0", "mab1h1", "mab1p1l0", "mab1h2", "mab1p0l1")]
    assert places == ["a", "a", "a", "b", "b"]
    assert spec_name("mab1p10s3") == "p10s3"
    for bad in ("c0", "mab1p01l1"):
        with pytest.raises(ValueError, match="not a host, leaf or spine name"):
            spec_name(bad)
    with pytest.raises(ValueError, match="no link to a leaf"):
        PodsPlacer(servers=["a"], nodes=["h0", "p0l0"], links=[])


def full_map(t, server=lambda node: 0):
    return {node: server(node) for node in (*t.host_names, *t.switch_names)}


def test_an_explicit_map_places_every_node_where_it_says():
    t = topology.load("clos-2p-2l-2s")
    a = assign(t, servers(2), full_map(t, lambda node: int(node.startswith("p1"))), source="test")
    assert a.placement == "map" and a.shares[1].leaves == ("p1l0", "p1l1") and a.shares[0].hosts == t.host_names
    assert a.crossing == {"host-leaf": 4, "leaf-spine": 0}


@pytest.mark.parametrize("change,fragment", [
    (lambda m: m.pop("p1s1"), "c.yaml: placement: every node needs a server: p1s1 has none"),
    (lambda m: [m.pop("h0"), m.pop("h1")], "h0 has none (nor 1 more)"),
    (lambda m: m.update(p2l0=0), "c.yaml: placement: p2l0 is not a node of this fabric"),
])
def test_an_explicit_map_must_place_every_node_of_the_fabric_once(change, fragment):
    t = topology.load("clos-2p-2l-2s")
    mapping = full_map(t)
    change(mapping)
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        assign(t, servers(2), mapping, source="c.yaml: placement")
    assert issubclass(MapPlacer, Placer)


def test_every_placement_is_a_mininet_cluster_placer():
    for row in placements.PLACEMENTS.values():
        assert issubclass(row.placer_class(), Placer) and row.name in row.placer.lower()
    assert placements.DEFAULT in placements.PLACEMENTS


def read(tmp_path, text):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return cluster.load(path)


def test_a_cluster_file(tmp_path):
    c = read(tmp_path, "servers: [alice@lab1:2200, lab2, '[fd00::3]']\n")
    assert c.placement == "pods" and c.server_names == ["alice@lab1:2200", "lab2", "[fd00::3]"]
    assert [(s.user, s.host, s.port) for s in c.servers] == [("alice", "lab1", 2200), (None, "lab2", None),
                                                              (None, "fd00::3", None)]
    assert read(tmp_path, "servers: [lab1, lab2]\nplacement: planes\n").placement == "planes"
    c = read(tmp_path, "servers: [alice@lab1, lab2:2222]\nplacement: {h0: lab1, h1: 'lab2:2222', p0l0: 1}\n")
    assert dict(c.placement) == {"h0": 0, "h1": 1, "p0l0": 1}
    with pytest.raises(TypeError):
        c.placement["h0"] = 1  # frozen


@pytest.mark.parametrize("text,fragment", [
    ("placement: pods\n", "servers: expected a non-empty list of [user@]host[:port], got None"),
    ("servers: lab1\n", "servers: expected a non-empty list"),
    ("servers: [lab1, 7]\n", "servers[1]: expected [user@]host[:port], got 7"),
    ("servers: ['a b']\n", "servers[0]: 'a b': expected [user@]host[:port]"),
    ("servers: ['lab1:0']\n", "servers[0]: 'lab1:0': port '0' is not a number from 1 to 65535"),
    ("servers: ['-oProxyCommand=x']\n", "servers[0]: '-oProxyCommand=x': host '-oProxyCommand=x' starts with '-'"),
    ("servers: [lab1, bob@LAB1]\n", "servers[1]: 'bob@LAB1' is servers[0] ('lab1') again"),
    ("servers: [lab1]\nplacement: rack\n", "placement: 'rack' is not one of: pods, planes, or a map"),
    ("servers: [lab1]\nplacement: [pods]\n", "placement: ['pods'] is not one of"),
    ("servers: [lab1]\nplacement: {}\n", "placement: an empty map places nothing"),
    ("servers: [lab1]\nplacement: {p0x1: 0}\n", "placement.'p0x1': not a host, leaf or spine name"),
    ("servers: [lab1]\nplacement: {h0: 1}\n", "placement.h0: a server index: must be between 0 and 0, got 1"),
    ("servers: [lab1]\nplacement: {h0: true}\n", "placement.h0: a server index: expected a whole number"),
    ("servers: [lab1]\nplacement: {h0: lab9}\n", "placement.h0: 'lab9' is not one of the servers (lab1)"),
    ("servers: [lab1, 'lab1:2222']\nplacement: {h0: lab1}\n", "placement.h0: 'lab1' is more than one of"),
    ("servers: [lab1]\nplacment: pods\n",
     "placment: unknown key (did you mean placement?); allowed: placement, servers"),
    ("servers: [lab1]\nservers: [lab2]\n", "duplicate key 'servers'"),
])
def test_a_bad_cluster_file_is_one_line_naming_the_key(tmp_path, text, fragment):
    with pytest.raises(UsageError) as caught:
        read(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "cluster.yaml")) and fragment in message
