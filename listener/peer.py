"""Where the client certificate of a request comes from: our TLS handshake, or a trusted proxy."""

import functools
import ipaddress

from aiohttp import web

from listener import errors, forwarded, settings


def client_certificate_der(request: web.Request, proxy: settings.ProxySettings) -> bytes:
    """The DER bytes of the request's client certificate, or Unauthenticated/Forbidden."""
    if proxy.enabled:
        return _forwarded_certificate(request, proxy)
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        raise errors.Unauthenticated("a client certificate is required")
    return bytes(der)


def _forwarded_certificate(request: web.Request, proxy: settings.ProxySettings) -> bytes:
    header = request.headers.get(proxy.client_cert_header)
    remote = request.remote
    if not _from_trusted_proxy(remote, proxy.trusted_proxies):
        raise errors.Forbidden(f"requests must come through a trusted proxy, not from {remote}")
    if not header:
        raise errors.Unauthenticated(f"the proxy forwarded no {proxy.client_cert_header} header")
    try:
        return forwarded.certificate_der(header)
    except forwarded.ForwardedCertError as exc:
        raise errors.Forbidden(f"{proxy.client_cert_header}: {exc}") from exc


@functools.lru_cache(maxsize=1024)
def _from_trusted_proxy(remote: str | None, trusted: tuple[settings.IPNetwork, ...]) -> bool:
    """Whether ``remote`` is in one of the ``trusted`` networks. Cached: the ingress's few addresses ask on every
    request, and parsing one was 3 % of a listener's time per event in forward-client-cert mode (py-spy)."""
    try:
        address = ipaddress.ip_address(remote) if remote else None
    except ValueError:
        return False
    return address is not None and any(address in network for network in trusted)
