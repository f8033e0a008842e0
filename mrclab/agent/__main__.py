"""``python -m mrclab.agent``: one emulated host's agent, started inside that host's network namespace.

    python -m mrclab.agent --host N --planes P --leaves L --spines S --hosts-per-leaf H
        --mtu M --control PATH --log PATH [--transport mrc|single-path|roce|tcp] [--options JSON] [--seed SEED]
        [--routing static-srv6|ecmp-reconverge]

``--routing`` says what the fabric forwards: uSID paths the sender writes (``static-srv6``)
or host addresses the switches hash onto a path (``ecmp-reconverge``; see ``mrc`` and ``tcp``).

Exit status: 0 after ``quit``, SIGTERM/SIGINT or the runner closing the control
connection; 1 when the agent could not start or serve (one line on stderr saying why);
2 on bad arguments (one line on stderr naming the argument).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import NoReturn

from ..addressing import Plan
from ..routing import DEFAULT as ROUTING_DEFAULT
from ..routing import ROUTINGS
from ..transports import DEFAULT as TRANSPORT_DEFAULT
from ..transports import TRANSPORTS
from .control import ControlChannel
from .eventlog import EventLog
from .host import Agent
from .loop import Reactor
from .nics import NicWatch
from .payload import Payloads

PROG = "mrclab.agent"


class BadArguments(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage block
        raise BadArguments(message)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog=PROG, description="The agent of one emulated host.")
    for name in ("--host", "--planes", "--leaves", "--spines", "--hosts-per-leaf"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--mtu", type=int, default=9000)
    parser.add_argument("--control", required=True, help="Unix socket path to serve the runner on")
    parser.add_argument("--log", required=True, help="JSON-lines event log to append to")
    parser.add_argument("--transport", choices=tuple(TRANSPORTS), default=TRANSPORT_DEFAULT)
    parser.add_argument("--routing", choices=tuple(ROUTINGS), default=ROUTING_DEFAULT)
    parser.add_argument("--options", default="{}", help="transport options as a JSON object")
    parser.add_argument("--qp-options", default="[]",
                        help="JSON list of [first QP, QP past the last, options]: connections of those QPs use them")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        args.plan = Plan(args.planes, args.leaves, args.spines, args.hosts_per_leaf)
    except ValueError as err:
        raise BadArguments(str(err)) from None
    if not 0 <= args.host < args.plan.hosts:
        raise BadArguments(f"--host {args.host} out of range 0..{args.plan.hosts - 1}")
    if not 1280 <= args.mtu <= 65535:
        raise BadArguments(f"--mtu {args.mtu} out of range 1280..65535")
    try:
        args.options = json.loads(args.options)
    except ValueError as err:
        raise BadArguments(f"--options is not JSON: {err}") from None
    if not isinstance(args.options, dict):
        raise BadArguments("--options must be a JSON object")
    try:
        args.qp_options = json.loads(args.qp_options)
    except ValueError as err:
        raise BadArguments(f"--qp-options is not JSON: {err}") from None
    if not isinstance(args.qp_options, list) or not all(
            isinstance(r, list) and len(r) == 3 and type(r[0]) is int and type(r[1]) is int and isinstance(r[2], dict)
            for r in args.qp_options):
        raise BadArguments("--qp-options must be a JSON list of [first QP, QP past the last, {options}]")
    return args


def build_datapath(args: argparse.Namespace, payloads: Payloads, emit):
    """The datapath of ``--transport`` over ``--routing``; ValueError for options it does not take."""
    ecmp = not ROUTINGS[args.routing].source_routed
    transport = TRANSPORTS[args.transport]
    if not transport.mrc:
        from .tcp import TcpDatapath, check_options
        check_options(args.options)
        return TcpDatapath.open(args.plan, args.host, payloads, emit, seg6_routes=not ecmp)
    from .endpoint import configure
    from .mrc import MrcDatapath, open_entropy_sockets, open_sockets
    config = configure(args.options, args.mtu, single_path=transport.single_path)
    qp_configs = [(first, end, configure(options, args.mtu, single_path=False)) for first, end, options in
                  args.qp_options]
    planes, wildcard = open_sockets(args.plan, args.host, transport.port)
    entropy = open_entropy_sockets(args.plan, args.host) if ecmp else None
    return MrcDatapath(planes, wildcard, args.plan, args.host, config, payloads, emit, entropy, port=transport.port,
                       qp_configs=qp_configs)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        log = EventLog(args.log)
    except BadArguments as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{PROG}: cannot open --log {args.log}: {err.strerror}", file=sys.stderr)
        return 2
    log.write("start", host=args.host, transport=args.transport, routing=args.routing, options=args.options,
              seed=args.seed,
              plan=[args.planes, args.leaves, args.spines, args.hosts_per_leaf], mtu=args.mtu)
    reactor = Reactor()
    reactor.stop_on_signals(signal.SIGTERM, signal.SIGINT)
    control = datapath = nics = None
    try:
        agent = Agent(args.host, reactor, log)
        datapath = build_datapath(args, Payloads(args.seed), agent.emit)
        nics = NicWatch(args.plan, args.host)
        control = ControlChannel(args.control)
        reason = agent.run(datapath, control, nics)
        status = 1 if reason.startswith(("no runner", "control protocol")) else 0
        if status:
            print(f"{PROG}: {reason}", file=sys.stderr)
    except ValueError as err:
        log.write("error", error=str(err))
        print(f"{PROG}: {err}", file=sys.stderr)
        status = 2
    except OSError as err:
        log.write("error", error=str(err))
        print(f"{PROG}: {err}", file=sys.stderr)
        status = 1
    finally:
        if nics is not None:
            nics.close()
        if datapath is not None:
            datapath.close()
        if control is not None:
            control.close()
        reactor.close()
    log.write("exit", status=status)
    log.close()
    return status


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # everything is closed: skip interpreter teardown, where a late SIGTERM would kill us
