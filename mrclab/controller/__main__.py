"""Controller process entry: ``python -m mrclab.controller --app static_srv6 --port P --layout F --stats F --log F
[--convergence-delay S] [--listen-fd N] [--datapath ovs|linux --netns F [--flood F]]``.

For OVS: os-ken 4.x has no osken-manager, so this sets os_ken's CONF (listening on 127.0.0.1
only) and runs the app in-process; eventlet's monkey-patching stays in this process.
With ``--listen-fd`` the OpenFlow server accepts on a socket the runner bound and
handed over, so no other local process can take the port between choosing and listening.
For Linux routers (``--datapath linux``): `kernel` installs routes through the namespaces
named in ``--netns`` (switch -> pid) and watches them; no OpenFlow, no port.
"""
from __future__ import annotations

import argparse
import logging

from ..routing import APPS, DEFAULT, ROUTINGS


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m mrclab.controller")
    parser.add_argument("--app", choices=sorted(APPS), default=ROUTINGS[DEFAULT].app)
    parser.add_argument("--datapath", choices=("ovs", "linux"), default="ovs")
    parser.add_argument("--port", type=int, help="OpenFlow port on 127.0.0.1 (ovs)")
    parser.add_argument("--netns", help="JSON file: switch -> pid of a process in its network namespace (linux)")
    parser.add_argument("--layout", required=True)
    parser.add_argument("--stats", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--listen-fd", type=int, help="an inherited socket already listening on 127.0.0.1:PORT")
    parser.add_argument("--flood", help="JSON file: {server, address, peers}: link states flooded to other servers "
                        "(linux, a lab over servers)")
    parser.add_argument("--convergence-delay", type=float, default=2.0,
                        help="seconds a reconverging app waits before reprogramming (ecmp_reconverge)")
    args = parser.parse_args()
    logging.basicConfig(filename=args.log, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.datapath == "linux":
        from .kernel import main as kernel_main

        kernel_main(layout_path=args.layout, netns_path=args.netns, app=args.app, stats_path=args.stats,
                    convergence_delay=args.convergence_delay, flood_path=args.flood)
        return

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller  # noqa: F401  registers the ofp_* options

    from .base import OPTIONS
    if args.listen_fd is not None:
        _serve_on(args.listen_fd, args.port)
    cfg.CONF.register_opts(OPTIONS + [cfg.FloatOpt("mrclab_convergence_delay")])
    cfg.CONF(args=[], project="os_ken")
    for key, value in (("ofp_listen_host", "127.0.0.1"), ("ofp_tcp_listen_port", args.port),
                       ("mrclab_layout", args.layout), ("mrclab_stats", args.stats),
                       ("mrclab_convergence_delay", args.convergence_delay)):
        cfg.CONF.set_override(key, value)
    AppManager.run_apps([f"mrclab.controller.{args.app}", "os_ken.controller.ofp_handler"])


def _serve_on(fd: int, port: int) -> None:
    """Make os-ken's StreamServer accept on the inherited socket instead of binding a new one."""
    from eventlet.green import socket
    from os_ken.lib import hub

    inherited = socket.socket(fileno=fd)
    if inherited.getsockname() != ("127.0.0.1", port):
        raise SystemExit(f"--listen-fd {fd} is bound to {inherited.getsockname()}, not 127.0.0.1:{port}")

    def listen(address, **_kwargs):
        if tuple(address) != ("127.0.0.1", port):
            raise OSError(f"only 127.0.0.1:{port} is served, not {address}")
        return inherited
    hub.listen = listen


if __name__ == "__main__":
    main()
