"""Runs the harness's watches for the length of a phase."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping

from harness.apiclient import ApiClient, EventHandler


@contextlib.asynccontextmanager
async def watching(
    client: ApiClient, handlers: Mapping[str, EventHandler], within: float = 60
) -> AsyncIterator[Callable[[], None]]:
    """Watches each path with its handler; yields once every listing has been delivered.

    What it yields raises the error of a watch that stopped, so that a phase waiting on
    its events fails with that error instead of timing out.
    """
    synced = {path: asyncio.Event() for path in handlers}
    tasks = [
        asyncio.create_task(client.watch(path, handler, synced[path]), name=f"watch {path}")
        for path, handler in handlers.items()
    ]

    def check() -> None:
        for task in tasks:
            if task.done() and not task.cancelled():
                error = task.exception()
                raise RuntimeError(f"{task.get_name()} stopped: {error!r}") from error

    try:
        async with asyncio.timeout(within):
            for event in synced.values():
                while not event.is_set():
                    check()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), 0.5)
        yield check
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
