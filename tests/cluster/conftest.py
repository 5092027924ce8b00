"""The `pods` fixture: the test namespace's pods, for the local cluster's own tests."""

from __future__ import annotations

from typing import Any

import pytest
from support.pods import Pods


@pytest.fixture
def pods(core_v1: Any, namespace: str) -> Pods:
    return Pods(core_v1, namespace)
