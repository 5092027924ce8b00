"""The operator's API client pointed at a local aiohttp test server that plays the API
server, with the bearer token such servers check."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import BaseTestServer

from tfjob_operator.apiserver.aio import ApiServerClient
from tfjob_operator.apiserver.connection import Connection, TokenSource

TOKEN = "secret"


def client_of(test_server: BaseTestServer, **options: Any) -> ApiServerClient:
    """An ApiServerClient of `test_server` (`options`: max_in_flight, metrics)."""
    server = str(test_server.make_url("")).rstrip("/")
    connection = Connection(server=server, ssl_context=False, tokens=TokenSource(token=TOKEN))
    return ApiServerClient(connection, **options)
