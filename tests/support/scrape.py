"""A GET of the operator's /metrics as a scraper sends it: over TLS, trusting the
operator's self-signed certificate as the chart's ServiceMonitor does, with a bearer token."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request


def scrape(url: str, token: str | None) -> tuple[int, str]:
    """The status and body `url` answers, whatever the status."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=unverified) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
