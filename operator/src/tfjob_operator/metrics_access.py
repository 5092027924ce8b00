"""Who may read /metrics: callers the API server authenticates and authorizes, over TLS.

In a shared cluster the operator's metrics say what runs in every namespace. With
`--metrics-secure` (the chart's default) /metrics is served over HTTPS, and each request
must carry a bearer token that the API server accepts (a TokenReview) for a user it
allows to `get` the non-resource URL /metrics (a SubjectAccessReview): a Prometheus whose
service account is bound to the chart's `<release>-metrics-reader` role, as Kueue's and
kube-rbac-proxy's metrics are guarded. The operator needs `system:auth-delegator` for the
reviews. Answers are remembered for a minute (a refusal for 10 s), keyed by the token's
digest, in a bounded table: a scrape every 15 s costs the API server two requests a minute,
and no caller can make the operator hold more than `MAX_REMEMBERED` answers.

Without a certificate of its own (`--metrics-cert-dir` holding tls.crt and tls.key, a
cert-manager Secret for one), the operator makes a self-signed one at start, as
controller-runtime does: scrapers then skip verification (the chart's ServiceMonitor does).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import socket
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

logger = logging.getLogger(__name__)

TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
METRICS_PATH: Final = "/metrics"
ALLOWED_TTL_SECONDS: Final = 60.0
DENIED_TTL_SECONDS: Final = 10.0
MAX_REMEMBERED: Final = 256
CERTIFICATE_DAYS: Final = 365

#: Sends a JSON body to the API server, answers (status, raw body): ApiServerClient.request
#: without a write slot or the leader's fence, since a standby serves metrics too.
Post = Callable[[str, bytes], Awaitable[tuple[int, bytes]]]


@dataclass(frozen=True)
class Verdict:
    """An HTTP status for the request (200 to serve it) and why, for the caller."""

    status: int
    why: str = ""


class MetricsGuard:
    """Decides each /metrics request from its Authorization header."""

    def __init__(self, post: Post, clock: Callable[[], float] = time.monotonic) -> None:
        self._post = post
        self._clock = clock
        self._remembered: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()

    async def check(self, authorization: str | None) -> Verdict:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Verdict(401, "a bearer token is required")
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        now = self._clock()
        remembered = self._remembered.get(key)
        if remembered is not None and remembered[0] > now:
            return remembered[1]
        verdict = await self._review(token.strip())
        if verdict.status >= 500:
            return verdict  # the API server's trouble, not the caller's: not remembered
        ttl = ALLOWED_TTL_SECONDS if verdict.status == 200 else DENIED_TTL_SECONDS
        self._remembered[key] = (now + ttl, verdict)
        self._remembered.move_to_end(key)
        while len(self._remembered) > MAX_REMEMBERED:
            self._remembered.popitem(last=False)
        return verdict

    async def _review(self, token: str) -> Verdict:
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        answer = await self._ask(TOKEN_REVIEWS, review)
        if answer is None:
            return Verdict(503, "the API server could not review the token")
        status = answer.get("status") or {}
        if not status.get("authenticated"):
            return Verdict(401, "the API server does not accept the token")
        user = status.get("user") or {}
        access = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.get("username", ""),
                "uid": user.get("uid", ""),
                "groups": user.get("groups") or [],
                "extra": user.get("extra") or {},
                "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
            },
        }
        answer = await self._ask(ACCESS_REVIEWS, access)
        if answer is None:
            return Verdict(503, "the API server could not review the access")
        if not (answer.get("status") or {}).get("allowed"):
            return Verdict(403, f"{user.get('username', 'the caller')} may not get /metrics")
        return Verdict(200)

    async def _ask(self, path: str, review: dict[str, Any]) -> dict[str, Any] | None:
        try:
            status, payload = await self._post(path, orjson.dumps(review))
        except (OSError, TimeoutError) as error:
            logger.warning("metrics access review failed: %s", error)
            return None
        if status != 201 and status != 200:
            logger.warning("metrics access review: HTTP %d: %s", status, payload[:200])
            return None
        answer: dict[str, Any] = orjson.loads(payload)
        return answer


def serving_context(cert_dir: str | None) -> ssl.SSLContext:
    """TLS for /metrics: `cert_dir`'s tls.crt and tls.key, else a self-signed certificate
    made now for this host's name."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        directory = Path(cert_dir)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        return context
    cert, key = self_signed(socket.gethostname())
    # ssl loads a chain only from files: a private temporary directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="tfjob-metrics-") as scratch:
        cert_file, key_file = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        context.load_cert_chain(cert_file, key_file)
    return context


def self_signed(host: str) -> tuple[bytes, bytes]:
    """A self-signed serving certificate (PEM) and its key (PEM) for `host` and loopback."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    alternative = x509.SubjectAlternativeName(
        [
            x509.DNSName(host),
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERTIFICATE_DAYS))
        .add_extension(alternative, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
