"""``kyma-certs``: the runtime PKI and least-privilege kubeconfigs.

Every command works on a CA store: a directory (``--store DIR``, for local use) or a Secret in
a protected KCP namespace (``--store-secret NAMESPACE/NAME`` with ``--kcp-kubeconfig``).
"""

import argparse
import asyncio
import dataclasses
import datetime
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web
from cryptography import x509

from certs import access, rotation, runtimes, stores
from clients import kube
from contract import wire
from kit import aio
from observability import cli as observability_cli
from observability import endpoints, logs
from observability import metrics as observability_metrics
from pki import authority, pki

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str) -> datetime.timedelta:
    match = _DURATION.fullmatch(text.strip())
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 30m, 12h or 30d")
    return datetime.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kyma-certs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", type=Path, help="CA store directory (local use)")
    where.add_argument("--store-secret", type=namespaced, metavar="NAMESPACE/NAME", help="CA store Secret in KCP")
    parser.add_argument("--kcp-kubeconfig", type=Path, help="kubeconfig of the KCP cluster")
    observability_cli.add_version(parser)
    parser.add_argument("--log-level", default="WARNING")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser("init-ca", help="create the root CA (refuses to replace one)")
    init.add_argument("--common-name", default="kyma-sync-runtime-ca")
    init.add_argument("--lifetime", type=duration, default=duration("1825d"), help="default 1825d")
    init.add_argument("--force", action="store_true", help="replace an existing CA (all certificates die)")

    issue = commands.add_parser("issue", help="issue a runtime's client certificate")
    issue.add_argument(
        "runtime",
        metavar="RUNTIME",
        help="the runtime's Kyma name (with --out: the certificate's CN as given; with --to-runtime: see --identity)",
    )
    issue.add_argument("--lifetime", type=duration, default=duration("30d"), help="default 30d")
    target = issue.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="write tls.crt, tls.key, ca.crt into this directory")
    target.add_argument(
        "--to-runtime",
        action="store_true",
        help="write the watcher's Secret into the runtime (master kubeconfig from KCP)",
    )

    _add_identity(issue)

    server = commands.add_parser("issue-server", help="issue the listener's serving certificate")
    server.add_argument("hosts", nargs="+", metavar="HOST", help="DNS names and IPs it answers to")
    server.add_argument("--lifetime", type=duration, default=duration("90d"), help="default 90d")
    server.add_argument("--out", type=Path, required=True, help="write tls.crt, tls.key, ca.crt here")

    revoke = commands.add_parser("revoke", help="revoke certificates (the listener honours the CRL)")
    revoke.add_argument("certificates", nargs="+", type=Path, metavar="CERT_FILE", help="PEM certificates to revoke")

    rotate_ca = commands.add_parser("rotate-ca", help="start a CA rotation: new CA, old one trusted during the overlap")
    rotate_ca.add_argument("--overlap", type=duration, default=duration("7d"), help="default 7d")

    rotate = commands.add_parser("rotate", help="renew runtime certificates and module kubeconfigs that are due")
    rotate.add_argument("--once", action="store_true", help="one pass, then exit (default: loop)")
    rotate.add_argument("--interval", type=duration, default=duration("5m"), help="between passes (default 5m)")
    rotate.add_argument("--lifetime", type=duration, default=duration("30d"), help="certificate lifetime (default 30d)")
    rotate.add_argument("--concurrency", type=int, default=16, help="runtimes rotated at once (default 16)")
    rotate.add_argument(
        "--trust-secret",
        type=namespaced,
        metavar="NAMESPACE/NAME",
        help="keep the listener's trust Secret (trust-bundle.crt, crl.pem) up to date, CRLs republished before expiry",
    )
    rotate.add_argument(
        "--listener-tls-secret",
        type=namespaced,
        metavar="NAMESPACE/NAME",
        help="renew the listener's serving certificate",
    )
    rotate.add_argument(
        "--listener-hosts",
        default="",
        help="comma-separated DNS names and IPs of the listener (with --listener-tls-secret)",
    )
    rotate.add_argument(
        "--runtime-timeout",
        type=duration,
        default=duration("60s"),
        help="one runtime's rotation may take this long before it counts as failed (default 60s)",
    )
    rotate.add_argument("--access", type=Path, help="module access definitions; without it only certificates rotate")
    _add_identity(rotate)
    rotate.add_argument(
        "--management-port",
        type=int,
        default=9090,
        help="looping: serve /metrics, /healthz, /readyz here (default 9090; 0 picks a free port)",
    )

    kubeconfig = commands.add_parser("kubeconfig", help="mint a module's least-privilege kubeconfig for a runtime")
    kubeconfig.add_argument("module", metavar="MODULE")
    kubeconfig.add_argument("runtime", metavar="RUNTIME")
    kubeconfig.add_argument("--access", type=Path, required=True, help="module access definitions (YAML)")

    commands.add_parser("show", help="describe the CA store (no secrets printed)")
    return parser


def _add_identity(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--identity",
        type=runtimes.Identity,
        choices=list(runtimes.Identity),
        default=runtimes.Identity.KYMA_NAME,
        help="the certificate's CN: the runtime's Kyma name (default), or the kyma-project.io/runtime-id label of its "
        "master kubeconfig Secret, as upstream lifecycle-manager issues them (the listener then maps it back)",
    )


def namespaced(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME")
    return namespace, name


class UsageError(Exception):
    """A combination of options that cannot work."""


async def _kcp(args: argparse.Namespace) -> kube.ApiClient:
    if args.kcp_kubeconfig is None:
        raise UsageError(f"`{args.command}` needs --kcp-kubeconfig")
    return await kube.api_client(kube.read_kubeconfig(args.kcp_kubeconfig))


def _write_pair(directory: Path, pair: pki.KeyPair, bundle: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    (directory / "tls.key").chmod(0o600)
    (directory / "ca.crt").write_bytes(bundle)


def _summary(ca: authority.Authority) -> dict[str, object]:
    return {
        "current": {
            "subject": ca.current.certificate.subject.rfc4514_string(),
            "not_after": ca.current.not_after.isoformat(),
        },
        "previous": ca.previous.certificate.subject.rfc4514_string() if ca.previous else None,
        "overlap_until": ca.overlap_until.isoformat() if ca.overlap_until else None,
        "trusted": len(ca.trusted()),
        "revoked": sum(len(serials) for serials in ca.revoked.values()),
    }


async def _execute(args: argparse.Namespace, store: stores.Store, kcp: kube.ApiClient | None) -> None:
    files = await store.read()
    if args.command == "init-ca":
        if files and not args.force:
            raise authority.AuthorityError(f"{store.describe()} already holds a CA; --force replaces it")
        ca = authority.Authority.create(args.common_name, lifetime=args.lifetime)
        await store.write(ca.to_files())
        print(json.dumps({"created": store.describe(), **_summary(ca)}, indent=2))
        return
    ca = authority.Authority.from_files(files)
    if args.command == "show":
        print(json.dumps({"store": store.describe(), **_summary(ca)}, indent=2))
    elif args.command == "issue" and args.out and args.identity != runtimes.Identity.KYMA_NAME:
        raise UsageError("--identity needs --to-runtime (with --out the CN is RUNTIME as given)")
    elif args.command == "issue" and args.out:
        pair = ca.issue_runtime(args.runtime, lifetime=args.lifetime)
        _write_pair(args.out, pair, ca.trust_bundle())
        print(
            f"issued {args.runtime} (serial {pair.certificate.serial_number:x}, until {pair.not_after:%Y-%m-%d %H:%M}Z) into {args.out}"
        )
    elif args.command == "issue":
        assert kcp is not None
        runtime = await runtimes.get_runtime(kcp, args.runtime, identity=args.identity)
        identity = runtime.certificate_identity(args.identity)
        async with await kube.api_client(runtime.kubeconfig) as runtime_api:
            pair = await rotation.deliver_certificate(
                runtime_api, ca, identity, runtime=runtime.name, lifetime=args.lifetime
            )
        print(
            f"issued {identity} into Secret {rotation.RUNTIME_SECRET_NAMESPACE}/{rotation.RUNTIME_SECRET_NAME} of the runtime (until {pair.not_after:%Y-%m-%d %H:%M}Z)"
        )
    elif args.command == "issue-server":
        pair = ca.issue_server(args.hosts, lifetime=args.lifetime)
        _write_pair(args.out, pair, ca.trust_bundle())
        print(f"issued server certificate for {', '.join(args.hosts)} into {args.out}")
    elif args.command == "revoke":
        for path in args.certificates:
            try:
                ca.revoke(x509.load_pem_x509_certificate(path.read_bytes()))
            except (OSError, ValueError) as exc:
                raise authority.AuthorityError(f"{path}: {exc}") from exc
        await store.write(ca.to_files())
        print(f"revoked {len(args.certificates)} certificate(s); CRL updated in {store.describe()}")
    elif args.command == "rotate-ca":
        ca.rotate(overlap=args.overlap)
        await store.write(ca.to_files())
        print(json.dumps({"rotated": store.describe(), **_summary(ca)}, indent=2))
    elif args.command == "kubeconfig":
        assert kcp is not None
        module_access = access.load_access(args.access).module(args.module)
        runtime = await runtimes.get_runtime(kcp, args.runtime)
        token = await access.issue_kubeconfig(kcp=kcp, runtime=runtime, module=args.module, access=module_access)
        print(
            f"kubeconfig for {args.module} in {args.runtime} written to Secret "
            f"{wire.KUBECONFIG_NAMESPACE}/{wire.module_kubeconfig_secret(args.module, args.runtime)} (token until {token.expires_at:%Y-%m-%d %H:%M}Z)"
        )
    elif args.command == "rotate":
        assert kcp is not None
        if args.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        hosts = tuple(h.strip() for h in args.listener_hosts.split(",") if h.strip())
        if bool(args.listener_tls_secret) != bool(hosts):
            raise UsageError("--listener-tls-secret and --listener-hosts go together")
        settings = rotation.RotationSettings(
            certificate_lifetime=args.lifetime,
            concurrency=args.concurrency,
            trust_secret=args.trust_secret,
            listener_tls=(*args.listener_tls_secret, hosts) if args.listener_tls_secret else None,
            runtime_timeout_seconds=args.runtime_timeout.total_seconds(),
            identity=args.identity,
            module_access=access.load_access(args.access) if args.access else None,
        )
        if args.once:
            report = await rotation.rotate_once(
                kcp=kcp, store=store, settings=settings, progress=lambda r: print(r.progress(), file=sys.stderr)
            )
            print(json.dumps(dataclasses.asdict(report), indent=2, default=str))
            if report.failures:
                raise authority.AuthorityError(f"{len(report.failures)} runtime(s) failed")
            return
        metrics = rotation.RotationMetrics(observability_metrics.component_registry())
        management = web.AppRunner(endpoints.management_app(metrics.registry, lambda: None), access_log=None)
        await management.setup()
        try:
            await web.TCPSite(management, "0.0.0.0", args.management_port).start()
            host, port = management.addresses[0][:2]
            print(f"kyma-certs: /metrics, /healthz, /readyz at http://{host}:{port}", file=sys.stderr)
            await rotation.run(
                kcp=kcp,
                store=store,
                settings=settings,
                interval=args.interval.total_seconds(),
                stop=aio.stop_on_signals(),
                metrics=metrics,
            )
        finally:
            await management.cleanup()


_NEEDS_KCP = {"kubeconfig", "rotate"}


async def _main(args: argparse.Namespace) -> None:
    needs_kcp = args.command in _NEEDS_KCP or args.store_secret or (args.command == "issue" and args.to_runtime)
    kcp = await _kcp(args) if needs_kcp else None
    try:
        if args.store_secret:
            namespace, name = args.store_secret
            assert kcp is not None
            store: stores.Store = stores.SecretStore(kcp, namespace=namespace, name=name)
        else:
            store = stores.DirectoryStore(args.store)
        await _execute(args, store, kcp)
    finally:
        if kcp is not None:
            await kcp.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.configure(level=args.log_level)
    try:
        asyncio.run(_main(args))
    except UsageError as exc:
        print(f"kyma-certs: {exc}", file=sys.stderr)
        return 2
    except (authority.AuthorityError, LookupError, kube.KubeError, ValueError, OSError) as exc:
        print(f"kyma-certs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
