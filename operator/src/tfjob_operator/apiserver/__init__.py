"""The one way the project reaches an API server.

- connection.py: where the server is and who the caller is (a kubeconfig or the pod's
  service account, tokens read again when they may have changed);
- errors.py: ApiError, the one error of a refusal, and a watch's events and end
  (WatchExpired) decoded once for both fronts;
- aio.py: the async front, on aiohttp (the operator, with its write slots and fence; the
  harness, without);
- sync.py: the sync front, on the standard library (the client, which a notebook installs
  without aiohttp; the local cluster; the chaos run; the tests' helpers).

This module imports neither front: the client must not import aiohttp.
"""

from typing import Final

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
