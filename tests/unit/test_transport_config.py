"""TransportConfig: documented defaults, fed from a scenario's transport_options."""
import pytest

from mrclab.transport import TransportConfig
from mrclab.transport.config import CC_TARGET_DELAY_FLOOR
from mrclab.transport.wire import IP_UDP_OVERHEAD


def test_defaults_are_valid_and_fit_the_lab_mtu():
    c = TransportConfig()
    assert c.packet_size + IP_UDP_OVERHEAD <= 9000
    assert c.ev_min_active <= c.ev_count


def test_from_options_sets_known_keys_and_widens_ints_to_floats():
    c = TransportConfig.from_options({"ev_count": 16, "probe_interval": 1, "probe_interval_max": 2,
                                      "single_path": True})
    assert (c.ev_count, c.probe_interval, c.probe_interval_max, c.single_path) == (16, 1.0, 2.0, True)
    assert TransportConfig.from_options(None) == TransportConfig()


def test_probe_backoff_ceiling_cannot_undercut_the_interval():
    with pytest.raises(ValueError, match="probe_interval_max"):
        TransportConfig.from_options({"probe_interval": 0.2, "probe_interval_max": 0.1})


def test_unknown_option_names_the_key_and_the_allowed_ones():
    with pytest.raises(ValueError, match=r"'ev_cnt'.*allowed:.*ev_count"):
        TransportConfig.from_options({"ev_cnt": 3})


@pytest.mark.parametrize("options", [{"ev_count": "8"}, {"single_path": 1}, {"mss": 1.5}])
def test_wrong_types_are_rejected(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        TransportConfig.from_options(options)


@pytest.mark.parametrize("options", [{"mss": 0}, {"mss": 70000}, {"ev_min_active": 65}, {"probe_successes": 0},
                                     {"cc_md": 1.0}, {"rto_min": 1.0}, {"sack_every": 0}])
def test_out_of_range_values_are_rejected(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        TransportConfig.from_options(options)


def test_defaults_suit_the_jittery_userspace_lab():
    c = TransportConfig()
    assert c.rto_min >= 0.05 and c.rto_initial >= c.rto_min  # above the ~20 ms RTT spikes of userspace OVS
    assert c.reorder_window <= c.reorder_window_max <= 0.025  # a failed path is avoided well inside 50 ms
    assert c.probe_interval >= 0.005 and c.cc_target_delay >= 0.003


def test_reorder_window_max_may_not_undercut_the_window():
    with pytest.raises(ValueError, match="reorder_window_max"):
        TransportConfig(reorder_window=0.01, reorder_window_max=0.005)


def test_link_defaults_scale_the_delay_target_with_packet_serialisation():
    assert TransportConfig.link_defaults(100_000_000, 9000, 4)["cc_target_delay"] == pytest.approx(0.00432)
    assert TransportConfig.link_defaults(25_000_000, 9000, 4)["cc_target_delay"] == pytest.approx(0.01728)
    # never below the fabric's idle delay noise
    assert TransportConfig.link_defaults(10_000_000_000, 1500, 4)["cc_target_delay"] == CC_TARGET_DELAY_FLOOR


def test_link_defaults_pace_at_the_hosts_line_rate_in_payload_bytes():
    d = TransportConfig.link_defaults(25_000_000, 9000, 4)
    # a 9014-byte frame carries 8952 bytes of UDP payload; four 25 Mbit NICs
    assert d["pace_rate"] == pytest.approx(4 * 25e6 / 8 * 8952 / 9014)
    assert d["pace_depth"] == 4 * 2 * 8952
    TransportConfig.from_options(d)  # valid as it stands


def test_pacing_needs_a_bucket_of_at_least_one_packet():
    with pytest.raises(ValueError, match="pace_depth"):
        TransportConfig(pace_rate=1e6, pace_depth=100)
