"""The ``vecroute`` command line: check, replay, stat, bench.

User errors (bad config, bad arguments, unreadable captures) print one line on stderr and
exit 2; a damaged capture is processed up to the damage and exits 1. No tracebacks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from vecroute.config_types import ConfigError
from vecroute.control.config import load_config

EXIT_USER = 2


def _fail(msg: str, code: int = EXIT_USER) -> None:
    click.echo(f"vecroute: {msg}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vecroute")
def main() -> None:
    """vecroute: a userspace IPv4/IPv6 vector router and the tools to measure it."""


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
def check(config: str) -> None:
    """Validate CONFIG: print a summary, or one error line and exit 2."""
    from vecroute.fib.fib import RouteError
    from vecroute.graph.dataplane import build_dataplane

    try:
        cfg = load_config(config)
        dp = build_dataplane(cfg)
        fib, fw = dp.fib, dp.firewall
    except (ConfigError, RouteError) as e:
        _fail(str(e))
    n4 = sum(1 for (_, p) in fib.routes if p.version == 4)
    rules = (
        f", firewall: {len(fw.rules)} rules (default {'allow' if fw.default_allow else 'deny'}),"
        f" {len(fw.tables.names())} tables"
        if fw is not None
        else ""
    )
    click.echo(
        f"{config}: ok: {len(cfg.interfaces)} interfaces, {n4} IPv4 and "
        f"{len(fib.routes) - n4} IPv6 routes (connected, local and broadcast included), "
        f"{len(cfg.neighbors)} neighbors{rules}"
    )


def _parse_inputs(values: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            _fail(f"--in {v!r}: expected IFNAME=FILE, e.g. --in eth0=a.pcap")
        out.append((name, path))
    return out


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--in",
    "inputs",
    multiple=True,
    metavar="IFNAME=FILE",
    help="a pcap/pcapng file received on interface IFNAME (repeatable)",
)
@click.option(
    "--out-dir",
    required=True,
    type=click.Path(file_okay=False),
    help="where IFNAME.pcap is written for every transmitting interface",
)
@click.option("--stats-json", type=click.Path(dir_okay=False), help="write the counters as JSON")
@click.option(
    "--vector-size",
    type=click.IntRange(1, 4096),
    default=None,
    help="packets per vector (default: [router] vector_size, 256)",
)
@click.option("--quiet", "-q", is_flag=True, help="print only the summary line")
@click.option("--trace", "trace_n", type=click.IntRange(1, 1000), default=None,
              help="trace the first N packets (or the first N matching --trace-match) and "
              "print what every node did with them")
@click.option("--trace-match", default=None, metavar="FILTER",
              help="trace only packets matching FILTER, e.g. 'udp and dst port 53', "
              "'src net 10.0.0.0/8', 'ip6 and host 2001:db8::1' (N defaults to 10)")
@click.option("--trace-from", default="ethernet-input", show_default=True, metavar="NODE",
              help="select the traced packets as they enter NODE")
@click.option("--trace-json", default=None, type=click.Path(dir_okay=False),
              help="write the trace as JSON to this file")
def replay(
    config: str,
    inputs: tuple[str, ...],
    out_dir: str,
    stats_json: str | None,
    vector_size: int | None,
    quiet: bool,
    trace_n: int | None,
    trace_match: str | None,
    trace_from: str,
    trace_json: str | None,
) -> None:
    """Replay captures through the router built from CONFIG."""
    from vecroute.control.show import (
        RUNTIME_COLUMNS,
        errors_view,
        interfaces_view,
        runtime_view,
        table_of,
    )
    from vecroute.control.trace import (
        TraceError,
        TraceExplainer,
        arm,
        parse_match,
        render_text,
        snapshot,
    )
    from vecroute.fib.fib import RouteError
    from vecroute.io.pcap import CaptureError
    from vecroute.io.replay import Replayer, ReplayError

    pairs = _parse_inputs(inputs)
    tracing = trace_n is not None or trace_match is not None or trace_json is not None
    try:
        cfg = load_config(config)
        rp = Replayer(cfg, vector_size)
        if tracing:
            arm(rp.graph.state, trace_n or 10, trace_from,
                parse_match(trace_match.split()) if trace_match is not None else None)
        res = rp.run(pairs, out_dir)
    except (ConfigError, RouteError, ReplayError, CaptureError, TraceError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{e.filename or ''}: {e.strerror}")
    st = rp.graph.state
    views = {
        "interfaces": interfaces_view(rp.fib, st),
        "errors": errors_view(st),
        "runtime": runtime_view(st),
    }
    summary = {
        "packets_in": res.packets_in,
        "packets_out": res.packets_out,
        "seconds": round(res.seconds, 6),
        "mpps": round(res.packets_in / res.seconds / 1e6, 3) if res.seconds else 0.0,
        "outputs": res.outputs,
        "capture_errors": res.capture_errors,
    }
    con = Console(width=max(Console().width, 110))
    if not quiet:
        con.print(
            table_of(
                "Interfaces",
                views["interfaces"],
                ["name", "rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops", "punts"],
            )
        )
        con.print()
        con.print(
            table_of(
                "Counters (drop reasons and events)",
                views["errors"],
                ["counter", "node", "kind", "count", "description"],
            )
        )
        con.print()
        con.print(table_of("Runtime", views["runtime"], RUNTIME_COLUMNS))
        con.print()
    click.echo(
        f"replayed {res.packets_in} packets in {res.seconds:.3f} s "
        f"({summary['mpps']} Mpps), wrote {res.packets_out} packets to "
        f"{', '.join(res.outputs.values()) or 'no file'}"
    )
    if stats_json:
        Path(stats_json).write_text(json.dumps({"summary": summary, **views}, indent=2) + "\n")
    if tracing:
        packets = TraceExplainer(rp.fib).explain(snapshot(st))
        click.echo(render_text(packets), nl=False)
        if trace_json:
            Path(trace_json).write_text(json.dumps(packets, indent=1) + "\n")
    for err in res.capture_errors:
        click.echo(f"vecroute: {err}", err=True)
    if res.capture_errors:
        sys.exit(1)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def run(config: str, log_level: str) -> None:
    """Run the router on the Linux interfaces named in CONFIG (foreground, as root).

    SIGINT/SIGTERM stop it cleanly, during start-up too (the ports are restored; more
    signals while it stops are ignored); SIGHUP reloads CONFIG and swaps the new forwarding
    state in atomically (learnt neighbours are kept). Exit status: 0 stopped on request, 1
    a worker died, 2 could not start (one line on stderr)."""
    import logging
    import os

    if os.geteuid() != 0:
        _fail("vecroute run: must run as root (AF_PACKET sockets need CAP_NET_RAW)")
    from vecroute.control import ports
    from vecroute.control.router import Interrupted, LiveRouter, StartupError, StopSignals

    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signals = StopSignals.install()  # before anything is changed: no signal kills us mid-way
    error, status = "", 0
    try:
        try:
            cfg = load_config(config)
            router = LiveRouter(cfg)
        except (ConfigError, StartupError) as e:
            error = str(e)
        except OSError as e:
            error = f"cannot start: {e}"
        else:
            router.run()
            status = 1 if router.failed else 0  # a worker died: a supervisor should restart
    except Interrupted:
        logging.getLogger("vecroute.router").info("stopped before it was running")
    finally:
        signals.stopping()
        ports.restore_all()  # an interrupted cleanup resumed (signals are ignored by now)
    if error:
        click.echo(f"vecroute: {error}", err=True)
        status = EXIT_USER
    # everything is given back: end here, without the interpreter's teardown (a full
    # table is millions of objects freed one by one; a signal landing in that teardown,
    # after Python has put the default handlers back, would end us with it)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@main.command()
@click.option("--keep", is_flag=True, help="leave the lab up and print how to enter it")
@click.option("--seconds", default=5, show_default=True, help="length of the iperf3 run")
@click.option("--bgp", is_flag=True,
              help="the routing variant: BIRD speaks eBGP with both hosts over vecroute's "
                   "linux-cp mirrors; learnt routes, pings, a withdrawal")
def lab(keep: bool, seconds: int, bgp: bool) -> None:
    """Build a lab of network namespaces (two hosts, vecroute between them) and show
    ping, traceroute, iperf3 and vecroute's live counters (with --bgp: BIRD sessions
    through vecroute's mirrors, the routes they teach vecroute, pings and a withdrawal).
    Needs root."""
    from vecroute.lab import run_lab, run_lab_bgp

    sys.exit((run_lab_bgp if bgp else run_lab)(keep=keep, seconds=seconds))


DEFAULT_SOCKET = "/run/vecroute/vecroute.sock"


def _socket_path(sock: str | None, config: str | None) -> str:
    """--socket, else the [control] socket of -c CONFIG, else the default."""
    if sock is None and config:
        try:
            sock = load_config(config).control.socket
        except ConfigError as e:
            _fail(str(e))
    return sock or DEFAULT_SOCKET


_socket_option = click.option(
    "--socket",
    "sock",
    default=None,
    metavar="PATH",
    help=f"control socket (default: from -c CONFIG, else {DEFAULT_SOCKET})",
)
_config_option = click.option(
    "-c",
    "--config",
    default=None,
    type=click.Path(dir_okay=False),
    help="read the control socket path from this config",
)


@main.command()
@_socket_option
@_config_option
@click.option("--json", "as_json", is_flag=True, help="print the reply as JSON")
@click.argument("words", nargs=-1, required=True)
def ctl(sock: str | None, config: str | None, as_json: bool, words: tuple[str, ...]) -> None:
    """Control a running router: show interfaces|routes [PREFIX]|neighbors|runtime|errors,
    route add|del PREFIX [via NH]... [dev IF] [table N], neighbor add|del IP [lladdr MAC]
    dev IF, clear counters."""
    from vecroute.control.server import request

    path = _socket_path(sock, config)
    try:
        reply = request(path, list(words))
    except (OSError, ValueError) as e:
        _fail(f"cannot reach the router at {path}: {e}")
    if not reply.get("ok"):
        _fail(reply.get("error", "unknown error"), 1)
    if as_json:
        if reply.get("data_error"):  # a streamed listing too long for JSON
            _fail(reply["data_error"], 1)
        click.echo(json.dumps(reply.get("data"), indent=2))
    else:
        click.echo(reply.get("text", ""), nl=False)


@main.command()
@_socket_option
@_config_option
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    metavar="S",
    help="seconds between refreshes",
)
@click.option(
    "--view",
    default="interfaces",
    show_default=True,
    type=click.Choice(["interfaces", "drops", "runtime", "workers"]),
    help="the view shown first",
)
@click.option("--once", is_flag=True, help="print one frame (two samples INTERVAL apart), exit")
def top(sock: str | None, config: str | None, interval: float, view: str, once: bool) -> None:
    """A live view of a running router: interface, drop, node and worker rates.

    Keys: i d r w (or 1-4) switch view, c clears the counters, q quits. Without a
    terminal on stdout it prints a plain frame every INTERVAL (--once: one frame)."""
    from vecroute.control.top import run as run_top

    sys.exit(run_top(_socket_path(sock, config), interval, view, once))


@main.command()
@click.argument("ifname")
@click.option("--dst", required=True, help="destination IPv4/IPv6 address")
@click.option("--src", required=True, help="source address (same family)")
@click.option("--dst-mac", required=True, help="destination MAC (the router's port)")
@click.option("--src-mac", default=None, help="source MAC (default: the interface's)")
@click.option(
    "--proto", type=click.Choice(["udp", "tcp-syn", "icmp"]), default="udp", show_default=True
)
@click.option("--size", default=64, show_default=True, help="frame size in bytes (no FCS)")
@click.option("--count", default=0, help="frames to send (0: use --duration)")
@click.option("--duration", default=0.0, help="seconds to send")
@click.option("--rate", default=0.0, help="packets per second (0: as fast as possible)")
@click.option("--flows", default=1, show_default=True, help="distinct flows")
@click.option(
    "--vary",
    type=click.Choice(["sport", "src", "dst"]),
    default="sport",
    show_default=True,
    help="what differs between flows",
)
@click.option("--random", "rand", is_flag=True, help="random flow per packet (else round robin)")
@click.option("--sport", default=9, show_default=True)
@click.option("--dport", default=9, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def gen(
    ifname: str,
    dst: str,
    src: str,
    dst_mac: str,
    src_mac: str | None,
    proto: str,
    size: int,
    count: int,
    duration: float,
    rate: float,
    flows: int,
    vary: str,
    rand: bool,
    sport: int,
    dport: int,
    as_json: bool,
) -> None:
    """Send packets on IFNAME through an AF_PACKET TX ring; print pktgen's result lines."""
    from vecroute.config_types import parse_mac
    from vecroute.measure.gen import GenError, GenSpec, result_json, run_gen

    try:
        dmac = parse_mac(dst_mac, "--dst-mac")
        if src_mac:
            smac = parse_mac(src_mac, "--src-mac")
        else:
            from vecroute.control.router import StartupError, read_mac

            try:
                smac = read_mac(ifname)
            except StartupError as e:
                _fail(str(e))
        spec = GenSpec(src, dst, dmac, smac, proto, size, sport, dport, flows, vary, rand)
        from vecroute.io.af_packet import PacketSocket

        with PacketSocket(ifname, rx_blocks=1, block_size=1 << 16) as sock:
            res = run_gen(sock, spec, count=count, duration=duration, rate=rate)
    except (GenError, ConfigError, ValueError) as e:
        _fail(str(e))
    except PermissionError:
        _fail("vecroute gen: must run as root (AF_PACKET)")
    except OSError as e:
        _fail(f"{ifname}: {e.strerror or e}")
    click.echo(result_json(res) if as_json else res.pktgen_text())


@main.group()
def bench() -> None:
    """The seed experiments, side by side (run from a vecroute checkout)."""


@bench.command("list")
def bench_list() -> None:
    """List the experiments."""
    from vecroute.measure.bench import BenchError, experiments

    try:
        for name, exp in experiments().items():
            click.echo(f"{name:12} {exp.title} (seed: {exp.seed})")
    except BenchError as e:
        _fail(str(e))


@bench.command("run")
@click.argument("names", nargs=-1, required=True)
@click.option("--repeat", default=5, show_default=True, help="interleaved rounds (>= 3)")
@click.option(
    "--out",
    "out",
    default="bench-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="report directory",
)
@click.option(
    "--update",
    "update",
    default=None,
    type=click.Path(dir_okay=False),
    help="also replace these experiments' sections in a Markdown file (docs/BENCHMARKS.md)",
)
def bench_run(names: tuple[str, ...], repeat: int, out: str, update: str | None) -> None:
    """Run experiments NAMES; write DIR/NAME.md, .png, .json and print the reports."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from vecroute.measure.bench import BenchError, run_many

    con = Console(stderr=True)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=con,
            transient=True,
        ) as prog:
            task = prog.add_task("starting", total=None)
            reports = run_many(
                list(names), repeat, Path(out), lambda msg: prog.update(task, description=msg)
            )
    except BenchError as e:
        _fail(str(e))
    for r in reports:
        click.echo(r.markdown)
    click.echo(f"reports written to {out}/")
    if update:
        from vecroute.measure.bench import update_markdown

        update_markdown(Path(update), reports)
        click.echo(f"{update} updated")


@main.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    }
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def stat(args: tuple[str, ...]) -> None:
    """A byte-exact ministat: vecroute stat [-An] [-C column] [-c confidence]
    [-d delimiters] [-s] [-w width] [--welch] [--json] [--png FILE] [file ...]"""
    from vecroute.measure.stat import main as stat_main

    sys.exit(stat_main(list(args)))


if __name__ == "__main__":
    main()
