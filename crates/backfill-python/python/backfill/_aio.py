"""How an ``async def`` fetch runs: on an event loop of its own, on the
thread the engine gives that day's fetch, so days in flight overlap their
awaits as sync fetches overlap their I/O. Internal."""

import asyncio
import inspect
from typing import Any, List, Tuple


def is_awaitable(obj: Any) -> bool:
    return inspect.isawaitable(obj)


def is_async_iterable(obj: Any) -> bool:
    return hasattr(obj, "__aiter__")


class Pump:
    """One fetch's event loop: awaits its coroutine, then reads its async
    iterable (if it returned or is one) a chunk at a time."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._it: Any = None

    def run(self, awaitable: Any) -> Any:
        return self._loop.run_until_complete(awaitable)

    def start(self, aiterable: Any) -> None:
        self._it = aiterable.__aiter__()

    def take(self, n: int) -> Tuple[List[Any], bool]:
        """Up to ``n`` items, and whether the iterable is exhausted."""
        return self._loop.run_until_complete(self._take(n))

    async def _take(self, n: int) -> Tuple[List[Any], bool]:
        out: List[Any] = []
        for _ in range(n):
            try:
                out.append(await self._it.__anext__())
            except StopAsyncIteration:
                return out, True
        return out, False

    def close(self) -> None:
        try:
            aclose = getattr(self._it, "aclose", None)
            if aclose is not None:
                self._loop.run_until_complete(aclose())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()
