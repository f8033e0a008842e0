import pytest

from mrclab.units import format_rate, format_size, rate_bps, seconds, size_bytes


@pytest.mark.parametrize("text,expected",
                         [("64KiB", 65536), ("1MiB", 1 << 20), (1500, 1500), ("2 GiB", 2 << 30), ("10kb", 10000)])
def test_sizes(text, expected):
    assert size_bytes(text) == expected


@pytest.mark.parametrize("text,expected",
                         [("100Mbit", 100_000_000), ("1Gbit", 10**9), ("20Mbit", 20_000_000), ("512Kbit", 512_000)])
def test_rates(text, expected):
    assert rate_bps(text) == expected


@pytest.mark.parametrize("text,expected", [("200ms", 0.2), ("3s", 3.0), (5, 5.0), ("1.5s", 1.5), ("100us", 1e-4)])
def test_durations(text, expected):
    assert seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad,func", [("-1KiB", size_bytes), ("10 parsecs", size_bytes), (100, rate_bps),
                                      ("fast", rate_bps), ("-3s", seconds), (True, seconds)])
def test_bad_values_raise(bad, func):
    with pytest.raises(ValueError):
        func(bad)


def test_format_round_trips():
    for bps in (100_000_000, 1_000_000_000, 20_000_000, 1500):
        assert rate_bps(format_rate(bps)) == bps
    for n in (65536, 1 << 20, 1000):
        assert size_bytes(format_size(n)) == n


def test_seconds_and_bytes_read_as_a_user_writes_them():
    from mrclab.units import format_bytes, format_seconds
    assert [format_seconds(s) for s in (0.05, 0.0116, 2.5, 3e-5, 0.0)] == ["50 ms", "11.6 ms", "2.5 s", "30 µs",
                                                                          "0 µs"]
    assert [format_bytes(n) for n in (25165824, 1536, 512, 3 << 30)] == ["24.0 MiB", "1.5 KiB", "512 B", "3.0 GiB"]
