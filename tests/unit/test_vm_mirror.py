"""The Debian mirror `mrclab vm build` debootstraps from: the one this machine's apt uses for bookworm main."""
from mrclab import vm

DVD = "deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_ - Official amd64 DVD Binary-1 20240210-11:28]/ bookworm main\n"


def test_the_first_bookworm_main_deb_line_of_sources_list(tmp_path):
    sources = tmp_path / "sources.list"
    sources.write_text(DVD + "# deb http://commented.example/debian bookworm main\n"
                       "deb-src http://src.example/debian bookworm main\n"
                       "deb http://security.example/debian-security bookworm-security main\n"
                       "deb http://contrib.example/debian bookworm contrib\n"
                       "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                       "http://mirror.lan/debian bookworm main contrib\n"
                       "deb http://later.example/debian bookworm main\n")
    assert vm.debian_mirror([tmp_path / "absent.list", sources]) == "http://mirror.lan/debian"


def test_a_deb822_sources_file(tmp_path):
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nComponents: main\n"
                       "Enabled: no\n\n"
                       "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
                       "URIs: https://mirror.lan/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
                       "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                       "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
                       "Components: main\n")
    other = tmp_path / "nodesource.list"
    other.write_text("deb https://deb.nodesource.com/node_20.x nodistro main\n")
    assert vm.debian_mirror([other, sources]) == "https://mirror.lan/debian"


def test_apt_reads_sources_list_first_then_its_directory_by_name(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "b.sources").write_text("")
    (tmp_path / "sources.list.d" / "a.list").write_text("")
    (tmp_path / "sources.list.d" / "c.list.disabled").write_text("")
    assert vm.apt_sources(tmp_path) == [tmp_path / "sources.list", tmp_path / "sources.list.d" / "a.list",
                                        tmp_path / "sources.list.d" / "b.sources"]


def test_the_public_mirror_when_apt_names_none_for_bookworm(tmp_path):
    sources = tmp_path / "sources.list"
    sources.write_text(DVD + "deb http://deb.example/debian trixie main\n")
    assert vm.debian_mirror([sources, tmp_path / "absent.sources"]) == vm.DEFAULT_MIRROR == "http://deb.debian.org/debian"
