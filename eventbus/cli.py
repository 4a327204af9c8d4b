"""``kyma-eventbus``: NATS for kyma-sync with identities, least-privilege permissions and bounded streams.

    kyma-eventbus init DIR --host nats.kcp-system.svc --reconciler-modules kyma-sync,cloud-manager
        a CA and server certificate, the admin, listener and reconciler identities (seeds in
        DIR/seeds), DIR/server.conf for nats-server, DIR/eventbus.yaml (the declaration)
    kyma-eventbus add-team DIR --name team-btp --module btp-operator
        a central team's identity: one durable named like the team, over its module only;
        hand DIR/seeds/team-btp.nk and DIR/tls/ca.crt to the team, then reload nats-server
    kyma-eventbus server-config DIR
        regenerate DIR/server.conf (after editing eventbus.yaml); print the chart's authorization block with --chart
    kyma-eventbus ensure-streams --dir DIR --server tls://HOST:4222
        create or update the streams as declared in DIR (as DIR's admin identity); in a cluster
        job: --nkey ADMIN.nk --ca CA.crt [--max-age-seconds N --max-bytes N] instead of --dir

Connect as an identity with the nats CLI:
    nats --server tls://HOST:4222 --tlsca DIR/tls/ca.crt --nkey DIR/seeds/NAME.nk ...
"""

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pydantic

from clients import bus
from eventbus import layout, setup
from observability import cli as observability_cli
from observability import logs


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-eventbus", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    observability_cli.add_version(parser)
    parser.add_argument("--log-level", default="WARNING")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser("init", help="set up a new bus in DIR")
    init.add_argument("directory", type=Path, metavar="DIR")
    init.add_argument(
        "--host",
        action="append",
        dest="hosts",
        required=True,
        help="name or IP clients use to reach NATS (repeatable; the server certificate covers them)",
    )
    init.add_argument("--listen", default="0.0.0.0:4222", help="client address (default 0.0.0.0:4222)")
    init.add_argument("--monitor", default="127.0.0.1:8222", help="monitoring and /healthz (default 127.0.0.1:8222)")
    init.add_argument("--store-dir", type=Path, help="JetStream store (default DIR/jetstream)")
    init.add_argument(
        "--reconciler-modules",
        default="kyma-sync,cloud-manager",
        help="comma-separated modules whose durables the reconciler may use (default kyma-sync,cloud-manager: "
        "SyncResources and the VpcPeering mirror, as the reconciler chart runs them)",
    )
    init.add_argument(
        "--durable-prefix", default="kyma-reconciler", help="the reconciler's durables: <prefix>-<module>"
    )
    init.add_argument(
        "--reconciler-replicas",
        default="",
        help="comma-separated identities of sharded reconciler replicas (the StatefulSet's pod names, e.g. "
        "kyma-reconciler-0,kyma-reconciler-1,kyma-reconciler-2): each may use durables <prefix>-<module>-<replica>",
    )

    team = commands.add_parser("add-team", help="add a central team's identity")
    team.add_argument("directory", type=Path, metavar="DIR")
    team.add_argument("--name", required=True, help="the team (its durable consumer is named so)")
    team.add_argument("--module", required=True, help="the one module whose events it may read")

    config = commands.add_parser("server-config", help="regenerate DIR/server.conf from DIR/eventbus.yaml")
    config.add_argument("directory", type=Path, metavar="DIR")
    config.add_argument("--chart", action="store_true", help="print the chart's nats.authorization value instead")

    streams = commands.add_parser("ensure-streams", help="create or update the streams (as the admin)")
    streams.add_argument("--server", required=True, help="NATS URL, e.g. tls://127.0.0.1:4222")
    streams.add_argument("--dir", type=Path, dest="directory", help="a bus set up by init: its declaration and admin")
    streams.add_argument("--nkey", type=Path, help="the admin's seed (without --dir)")
    streams.add_argument("--ca", type=Path, help="the CA of the NATS server certificate (without --dir)")
    streams.add_argument("--max-age-seconds", type=float, help="override the event stream's max age")
    streams.add_argument("--max-bytes", type=int, help="override the event stream's size limit")
    return parser


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host, int(port)


async def _ensure_streams(args: argparse.Namespace) -> str:
    if args.directory is not None:
        declared = layout.load(args.directory)
        events, dead_letters = declared.events, declared.dead_letters
        credentials = layout.credentials(args.directory, setup.ADMIN)
    elif args.nkey is not None and args.ca is not None:
        events, dead_letters = bus.EVENTS, bus.DEAD_LETTERS
        credentials = bus.Credentials(nkey_seed_file=args.nkey, ca_file=args.ca)
    else:
        raise ValueError("give --dir, or --nkey and --ca")
    overrides = {
        key: value
        for key, value in (("max_age_seconds", args.max_age_seconds), ("max_bytes", args.max_bytes))
        if value is not None
    }
    events = bus.StreamSettings.model_validate({**events.model_dump(), **overrides})
    connection = await bus.Bus.connect([args.server], name="kyma-eventbus", credentials=credentials)
    try:
        await setup.ensure_streams(connection, (events, dead_letters))
    finally:
        await connection.close()
    return (
        f"streams ready: {events.name} ({events.retention} retention, at most {events.max_bytes} bytes and "
        f"{events.max_age_seconds:g}s), {dead_letters.name}"
    )


def _run(args: argparse.Namespace) -> str:
    if args.command == "ensure-streams":
        return asyncio.run(_ensure_streams(args))
    directory: Path = args.directory
    if args.command == "init":
        host, port = _address(args.listen)
        monitor_host, monitor_port = _address(args.monitor)
        settings = layout.ServerSettings(
            host=host,
            port=port,
            monitor_host=monitor_host,
            monitor_port=monitor_port,
            store_dir=args.store_dir or directory / "jetstream",
        )
        modules = [m.strip() for m in args.reconciler_modules.split(",") if m.strip()]
        setup.init(
            directory,
            server=settings,
            hosts=args.hosts,
            reconciler_modules=modules,
            durable_prefix=args.durable_prefix,
            reconciler_replicas=[r.strip() for r in args.reconciler_replicas.split(",") if r.strip()],
        )
        return (
            f"event bus set up in {directory}: start nats-server -c {directory / layout.SERVER_CONF}, "
            f"then kyma-eventbus ensure-streams --dir {directory} --server tls://{args.hosts[0]}:{port}"
        )
    if args.command == "add-team":
        identity = setup.add_team(directory, name=args.name, module=args.module)
        return (
            f"team {identity.name} may read module {identity.module} through durable {identity.name}: give it "
            f"{layout.seed_file(directory, identity.name)} and {directory / layout.CA_FILE} (inbox prefix "
            f"{identity.inbox_prefix}); reload nats-server (nats-server --signal reload) to admit it"
        )
    config = layout.load(directory)
    if args.chart:
        return json.dumps(layout.authorization(config), indent=2)
    layout.save(config, directory)
    return f"wrote {directory / layout.SERVER_CONF}; reload nats-server to apply it"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.configure(level=args.log_level)
    try:
        print(_run(args))
    except (ValueError, LookupError, FileExistsError, OSError, pydantic.ValidationError) as exc:
        print(f"kyma-eventbus: {exc}", file=sys.stderr)
        return 2
    except bus.BusError as exc:
        print(f"kyma-eventbus: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
