"""What the listener's libraries reach with none of the listener's work: the floor of its per-event cost.

Run by ``listener_throughput.py --floor``, which drives it with the same clients and events as the listener.
An aiohttp server run as the listener is (uvloop, its garbage collection settings) with the listener's TLS
settings (client certificates required, no session tickets) answers every POST with a small JSON body, as the
listener does; with ``--publish`` it also publishes
the body to JetStream through nats-py and waits for the ack, with as many headers as the listener sends
(its CloudEvents attributes, the trace context, a unique message id). Nothing is checked: no identity, no
validation, no metrics, no spans. The difference between this and the listener is what our own code costs.
Its header values are fixed and it publishes on one subject, which if anything makes it cheaper.

    python bench/listener_floor.py --port P --cert C --key K --client-ca CA
        [--publish --nats URL --nkey F --nats-ca F --inbox-prefix P]
"""

import argparse
import asyncio
import itertools
import ssl

import listener_throughput
import nats
from aiohttp import web

from contract import cloudevents, events
from kit import loops
from listener import server, settings

_RESPONSE = b'{"event_id":"00000000000000000000000000000000","duplicate":false,"sequence":1}'
_HEADERS = {
    **cloudevents.headers(events.decode(listener_throughput.event("bench-0", 0))),
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
}
"""What the listener sends with an event of the benchmark's (the message id and ce-id are made per event)."""


def _tls(args: argparse.Namespace) -> ssl.SSLContext:
    """The listener's own TLS context for these files."""
    return server.server_ssl_context(
        settings.ServerTlsSettings(cert_file=args.cert, key_file=args.key),
        settings.TrustSettings(client_ca_file=args.client_ca),
    )


async def _serve(args: argparse.Namespace) -> None:
    ids = itertools.count()
    js = None
    if args.publish:
        connection = await nats.connect(
            args.nats,
            nkeys_seed=args.nkey,
            tls=ssl.create_default_context(cafile=args.nats_ca),
            inbox_prefix=args.inbox_prefix,
            name="floor",
        )
        js = connection.jetstream()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if js is not None:
            message_id = f"floor-{next(ids)}"
            await js.publish(args.subject, body, headers={**_HEADERS, "ce-id": message_id, "Nats-Msg-Id": message_id})
        return web.Response(status=202, body=_RESPONSE, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/events", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=_tls(args)).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True, help="the server's certificate (PEM)")
    parser.add_argument("--key", required=True, help="the server's key (PEM)")
    parser.add_argument("--client-ca", required=True, help="the CA client certificates must chain to")
    parser.add_argument("--publish", action="store_true", help="also publish each body to JetStream, awaiting the ack")
    parser.add_argument("--nats", help="the NATS URL (with --publish)")
    parser.add_argument("--nkey", help="an nkey seed file of an identity that may publish on --subject")
    parser.add_argument("--nats-ca", help="the CA of the NATS server's certificate")
    parser.add_argument("--inbox-prefix", default="_INBOX", help="where the identity may take JetStream's acks")
    parser.add_argument("--subject", default="kyma.events.bench.bench-0", help="where to publish")
    args = parser.parse_args()
    if args.publish and not (args.nats and args.nkey and args.nats_ca):
        parser.error("--publish needs --nats, --nkey and --nats-ca")
    loops.run(_serve(args), loop="uvloop")  # as the listener runs: uvloop, its garbage collection settings


if __name__ == "__main__":
    main()
