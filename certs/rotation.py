"""Keeping every runtime's credentials fresh: the client certificate and module kubeconfigs.

A runtime certificate is renewed when 2/3 of its lifetime has passed, when it was issued by a
CA that is no longer current (CA rotation), or when the trust bundle beside it changed. It is
written into the runtime as the Secret the watcher mounts; kubelet updates the files and the
watcher picks them up without a restart. Failures are per runtime: one unreachable runtime
never stops the others.
"""

import asyncio
import base64
import dataclasses
import datetime
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable

from cryptography import x509
from prometheus_client import CollectorRegistry, Counter, Gauge

from certs import access, runtimes, stores
from clients import kube
from contract import wire
from kit import aio
from pki import authority, pki
from pki import identity as pki_identity

log = logging.getLogger(__name__)

_RUNTIME_ERRORS: tuple[type[BaseException], ...] = (kube.KubeError, ValueError)
"""A runtime failing in any of these ways is reported and skipped; the others go on."""

RUNTIME_SECRET_NAMESPACE = "kyma-system"
RUNTIME_SECRET_NAME = "kyma-watcher-certificate"


@dataclasses.dataclass(frozen=True)
class RotationSettings:
    certificate_lifetime: datetime.timedelta = pki.DEFAULT_CERT_LIFETIME
    renew_fraction: float = 2 / 3
    module_access: access.AccessConfig | None = None
    trust_secret: tuple[str, str] | None = None
    """(namespace, name) of the Secret the listener mounts: trust bundle and CRLs, republished when they change and
    well before the CRLs expire (their nextUpdate is a week out)."""
    listener_tls: tuple[str, str, tuple[str, ...]] | None = None
    """(namespace, name, hosts) of the listener's serving certificate Secret, renewed like a runtime's."""
    listener_tls_lifetime: datetime.timedelta = datetime.timedelta(days=90)
    concurrency: int = 16
    """Runtimes rotated at once: 10,000 runtimes at ~50 ms each take under a minute, well within a token's life."""
    runtime_timeout_seconds: float = 60.0
    """One runtime's whole rotation (certificate and kubeconfigs); a hanging apiserver costs one slot this long."""
    identity: runtimes.Identity = runtimes.Identity.KYMA_NAME
    """What the certificate's CN is: the Kyma name, or the runtime id (as upstream lifecycle-manager issues them)."""


@dataclasses.dataclass
class Report:
    certificates: list[str] = dataclasses.field(default_factory=list)
    kubeconfigs: list[str] = dataclasses.field(default_factory=list)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    checked: int = 0
    """Runtimes looked at so far in this pass."""
    total: int = 0
    """Runtimes in this pass."""
    trust_published: bool = False
    """The listener's trust bundle and CRLs were (re)written in this pass."""
    listener_certificate: bool = False
    """The listener's serving certificate was renewed in this pass."""
    earliest_certificate_expiry: datetime.datetime | None = None
    """When the first of the runtime certificates seen in this pass expires."""

    def certificate_expires(self, at: datetime.datetime | None) -> None:
        if at is not None and (self.earliest_certificate_expiry is None or at < self.earliest_certificate_expiry):
            self.earliest_certificate_expiry = at

    def progress(self) -> str:
        return (
            f"{self.checked}/{self.total} runtimes checked: {len(self.certificates)} certificate(s) and "
            f"{len(self.kubeconfigs)} kubeconfig(s) renewed, {len(self.failures)} failed"
        )


Progress = Callable[[Report], None]
"""Told about the pass as it goes (at most every ``_PROGRESS_SECONDS``, and at the end)."""
_PROGRESS_SECONDS = 5.0


class RotationMetrics:
    """What ``kyma-certs rotate`` reports on /metrics (the rotation-failing and rotation-late alerts)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.passes = Counter(
            "kyma_certs_rotation_passes", "Rotation passes by outcome (ok, error)", ["outcome"], registry=registry
        )
        self.last_success = Gauge(
            "kyma_certs_rotation_last_success_timestamp_seconds",
            "When a pass last finished with every runtime handled",
            registry=registry,
        )
        self.runtime_failures = Counter(
            "kyma_certs_rotation_runtime_failures", "Runtimes whose rotation failed in a pass", registry=registry
        )
        self.renewed = Counter(
            "kyma_certs_renewed", "Credentials renewed, by kind (certificate, kubeconfig)", ["kind"], registry=registry
        )
        self.runtimes = Gauge("kyma_certs_rotation_runtimes", "Runtimes in the last pass", registry=registry)
        self.last_pass = Gauge(
            "kyma_certs_rotation_last_pass_timestamp_seconds",
            "When a pass last finished, failures or not (the rotation-late alert)",
            registry=registry,
        )
        self.earliest_expiry = Gauge(
            "kyma_certs_certificate_earliest_expiry_timestamp_seconds",
            "When the first runtime certificate seen in the last pass expires (the expiring-soon alert)",
            registry=registry,
        )

    def record(self, report: Report) -> None:
        self.passes.labels("error" if report.failures else "ok").inc()
        if not report.failures:
            self.last_success.set_to_current_time()
        self.runtime_failures.inc(len(report.failures))
        self.renewed.labels("certificate").inc(len(report.certificates))
        self.renewed.labels("kubeconfig").inc(len(report.kubeconfigs))
        self.runtimes.set(report.total)
        self.last_pass.set_to_current_time()
        if report.earliest_certificate_expiry is not None:
            self.earliest_expiry.set(report.earliest_certificate_expiry.timestamp())


async def _current_certificate(api: kube.ApiClient) -> tuple[x509.Certificate, bytes] | None:
    secret = await kube.get_or_none(api, kube.SECRETS.object_path(RUNTIME_SECRET_NAMESPACE, RUNTIME_SECRET_NAME))
    if secret is None:
        return None
    data = secret.get("data") or {}
    if "tls.crt" not in data:
        return None
    return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])), base64.b64decode(data.get("ca.crt", ""))


async def deliver_certificate(
    runtime_api: kube.ApiClient,
    ca: authority.Authority,
    identity: str,
    *,
    runtime: str,
    lifetime: datetime.timedelta,
) -> pki.KeyPair:
    """Issue a client certificate with CN ``identity`` and write it into ``runtime``'s watcher Secret."""
    await kube.ensure_namespace(runtime_api, RUNTIME_SECRET_NAMESPACE)
    pair = ca.issue_runtime(identity, lifetime=lifetime)
    await stores.write_secret(
        runtime_api,
        namespace=RUNTIME_SECRET_NAMESPACE,
        name=RUNTIME_SECRET_NAME,
        data={"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca.trust_bundle()},
        labels={wire.RUNTIME_LABEL: runtime},
        secret_type="kubernetes.io/tls",
    )
    return pair


async def certificate_due(
    runtime_api: kube.ApiClient, ca: authority.Authority, *, fraction: float, identity: str
) -> tuple[str | None, datetime.datetime | None]:
    """Why the runtime's certificate needs renewing (None if it is fine), and when the current one expires."""
    current = await _current_certificate(runtime_api)
    if current is None:
        return "missing", None
    certificate, bundle = current
    try:
        issued_to = pki_identity.runtime_of(certificate)
    except pki_identity.NotARuntimeCertificateError:
        issued_to = None
    if issued_to != identity:
        return f"issued to {issued_to!r}, the identity is now {identity!r}", certificate.not_valid_after_utc
    return _renewal_reason(certificate, bundle, ca, fraction=fraction), certificate.not_valid_after_utc


def _renewal_reason(
    certificate: x509.Certificate, bundle: bytes, ca: authority.Authority, *, fraction: float
) -> str | None:
    """Why a certificate of this CA store (a runtime's, the listener's) needs renewing, whoever it is for."""
    if ca.is_revoked(certificate):
        return "revoked (a new certificate; the old one stays in the CRL)"
    if not ca.is_current_issuer(certificate):
        return "issued by a CA that is no longer current"
    if bundle != ca.trust_bundle():
        return "trust bundle changed"
    if authority.is_due(certificate, fraction=fraction):
        return "past its renewal point"
    return None


async def _rotate_runtime(
    *,
    kcp: kube.ApiClient,
    runtime: runtimes.Runtime,
    ca: authority.Authority,
    settings: RotationSettings,
    report: Report,
) -> None:
    identity = runtime.certificate_identity(settings.identity)
    async with await kube.api_client(runtime.kubeconfig) as runtime_api:
        reason, expires = await certificate_due(runtime_api, ca, fraction=settings.renew_fraction, identity=identity)
        if reason is not None:
            pair = await deliver_certificate(
                runtime_api, ca, identity, runtime=runtime.name, lifetime=settings.certificate_lifetime
            )
            log.info("renewed runtime certificate", extra={"runtime": runtime.name, "reason": reason})
            report.certificates.append(runtime.name)
            expires = pair.not_after
        report.certificate_expires(expires)
    if settings.module_access is None:
        return
    for module, module_access in settings.module_access.modules.items():
        if await access.kubeconfig_due(kcp, runtime=runtime.name, module=module, fraction=settings.renew_fraction):
            await access.issue_kubeconfig(kcp=kcp, runtime=runtime, module=module, access=module_access)
            log.info("renewed module kubeconfig", extra={"runtime": runtime.name, "kyma_module": module})
            report.kubeconfigs.append(f"{module}/{runtime.name}")


_TRUST_REVOKED = "kyma-sync.kyma-project.io/revoked"
_TRUST_REFRESH_AFTER = "kyma-sync.kyma-project.io/refresh-after"
_CRL_REFRESH = datetime.timedelta(days=3)
"""Republished this long after the last time: the CRLs' nextUpdate (7 days) is never reached."""


async def publish_trust(kcp: kube.ApiClient, ca: authority.Authority, *, namespace: str, name: str) -> bool:
    """The listener's trust Secret brought up to date (bundle, CRLs); True if it was written."""
    files = ca.to_files()
    revoked = hashlib.sha256(json.dumps(ca.revoked, sort_keys=True).encode()).hexdigest()[:16]
    now = datetime.datetime.now(datetime.UTC)
    current = await kube.get_or_none(kcp, kube.SECRETS.object_path(namespace, name))
    if current is not None:
        annotations = current["metadata"].get("annotations") or {}
        same_bundle = base64.b64decode((current.get("data") or {}).get(authority.BUNDLE, "")) == files[authority.BUNDLE]
        if same_bundle and annotations.get(_TRUST_REVOKED) == revoked and _refresh_after(annotations) > now:
            return False
    await stores.write_secret(
        kcp,
        namespace=namespace,
        name=name,
        data={authority.BUNDLE: files[authority.BUNDLE], authority.CRL: files[authority.CRL]},
        annotations={_TRUST_REVOKED: revoked, _TRUST_REFRESH_AFTER: (now + _CRL_REFRESH).isoformat()},
    )
    return True


def _refresh_after(annotations: dict[str, str]) -> datetime.datetime:
    """When the trust Secret is due again; a missing or hand-edited value means: now."""
    try:
        moment = datetime.datetime.fromisoformat(annotations.get(_TRUST_REFRESH_AFTER, ""))
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


async def renew_listener_certificate(
    kcp: kube.ApiClient,
    ca: authority.Authority,
    *,
    namespace: str,
    name: str,
    hosts: tuple[str, ...],
    lifetime: datetime.timedelta,
    fraction: float,
) -> bool:
    """The listener's serving certificate renewed when missing, of an old CA, for other hosts or due; True if so."""
    current = await kube.get_or_none(kcp, kube.SECRETS.object_path(namespace, name))
    data = (current or {}).get("data") or {}
    if "tls.crt" in data:
        certificate = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
        try:
            names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            served = {str(n) for n in names.get_values_for_type(x509.DNSName)} | {
                str(n) for n in names.get_values_for_type(x509.IPAddress)
            }
        except x509.ExtensionNotFound:
            served = set()  # no names at all: re-issued below
        bundle = base64.b64decode(data.get("ca.crt", ""))
        if served == set(hosts) and _renewal_reason(certificate, bundle, ca, fraction=fraction) is None:
            return False
    pair = ca.issue_server(hosts, lifetime=lifetime)
    await stores.write_secret(
        kcp,
        namespace=namespace,
        name=name,
        data={"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": ca.trust_bundle()},
        secret_type="kubernetes.io/tls",
    )
    return True


async def rotate_once(
    *, kcp: kube.ApiClient, store: stores.Store, settings: RotationSettings, progress: Progress | None = None
) -> Report:
    stored = await store.read()
    ca = authority.Authority.from_files(stored)
    refreshed = ca.to_files()
    if any(stored.get(name) != refreshed[name] for name in (authority.BUNDLE, authority.STATE)):
        await store.write(refreshed)  # e.g. the overlap of a CA rotation ended
    known = await runtimes.list_runtimes(kcp, identity=settings.identity)
    report = Report(total=len(known.runtimes) + len(known.unusable))
    # Each a failure of its own: a listener Secret out of reach must not stop every runtime's renewal.
    if settings.trust_secret is not None:
        namespace, name = settings.trust_secret
        try:
            report.trust_published = await publish_trust(kcp, ca, namespace=namespace, name=name)
        except (kube.KubeError, ValueError) as exc:
            log.error("listener trust not published", extra={"secret": f"{namespace}/{name}", "error": str(exc)})
            report.failures[f"trust:{namespace}/{name}"] = str(exc)
    if settings.listener_tls is not None:
        namespace, name, hosts = settings.listener_tls
        try:
            report.listener_certificate = await renew_listener_certificate(
                kcp,
                ca,
                namespace=namespace,
                name=name,
                hosts=hosts,
                lifetime=settings.listener_tls_lifetime,
                fraction=settings.renew_fraction,
            )
        except (kube.KubeError, ValueError) as exc:
            log.error("listener certificate not renewed", extra={"secret": f"{namespace}/{name}", "error": str(exc)})
            report.failures[f"listener-certificate:{namespace}/{name}"] = str(exc)
    for name, why in known.unusable.items():
        log.error("rotation failed for runtime", extra={"runtime": name, "error": why})
        report.failures[name] = why
        report.checked += 1
    told = time.monotonic()
    slots = asyncio.Semaphore(settings.concurrency)

    async def one(runtime: runtimes.Runtime) -> None:
        nonlocal told
        async with slots:
            try:
                async with asyncio.timeout(settings.runtime_timeout_seconds):
                    await _rotate_runtime(kcp=kcp, runtime=runtime, ca=ca, settings=settings, report=report)
            except TimeoutError:
                why = f"not done within {settings.runtime_timeout_seconds:g}s (its apiserver or KCP too slow)"
                log.error("rotation failed for runtime", extra={"runtime": runtime.name, "error": why})
                report.failures[runtime.name] = why
            except _RUNTIME_ERRORS as exc:
                log.error("rotation failed for runtime", extra={"runtime": runtime.name, "error": str(exc)})
                report.failures[runtime.name] = str(exc)
        report.checked += 1
        if progress is not None and time.monotonic() - told >= _PROGRESS_SECONDS:
            progress(report)
            told = time.monotonic()

    await aio.all_of(one(runtime) for runtime in known.runtimes)
    if progress is not None:
        progress(report)
    return report


def _log_progress(report: Report) -> None:
    log.info("rotation progress: " + report.progress(), extra={"checked": report.checked, "total": report.total})


async def run(
    *,
    kcp: kube.ApiClient,
    store: stores.Store,
    settings: RotationSettings,
    interval: float,
    stop: asyncio.Event,
    metrics: RotationMetrics,
) -> None:
    """Rotate every ``interval`` (±10 % jitter, so many replicas never align) until ``stop``."""
    while True:
        try:
            report = await rotate_once(kcp=kcp, store=store, settings=settings, progress=_log_progress)
            metrics.record(report)
        except (kube.KubeError, authority.AuthorityError) as exc:
            log.error("rotation pass failed", extra={"error": str(exc)})
            metrics.passes.labels("error").inc()
        if await aio.sleep_unless(stop, interval * random.uniform(0.9, 1.1)):
            return
