"""A bounded queue that coalesces changes of the same object: latest wins.

Keys are (watch, uid). A key is handed to at most one sender at a time, so one object's
changes are delivered in order; a newer change for a key that is in flight waits behind it,
and one that is pending replaces the older pending change in place (keeping its turn). The
bound counts distinct objects: when full, ``put`` waits (the watch stream pauses), so nothing is
dropped for distinct objects.
"""

import asyncio
import collections
import dataclasses

from contract import events

Key = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class Item:
    watch_key: str
    event: events.ChangeEvent
    payload: bytes
    """The event, encoded once (its size already checked)."""

    @property
    def key(self) -> Key:
        return (self.watch_key, self.event.target.uid)


class CoalescingQueue:
    """No lock: the operations never await in between, so none can interleave (one event loop); waits are
    on Events that every change sets, and each waiter looks again."""

    def __init__(self, *, maxsize: int) -> None:
        self._maxsize = maxsize
        self._pending: collections.OrderedDict[Key, Item] = collections.OrderedDict()
        self._in_flight: set[Key] = set()
        self._changed = asyncio.Event()
        """Set whenever something may be handed out or may fit; waiters clear it and look again."""
        self._idle = asyncio.Event()
        self._idle.set()
        self.coalesced = 0

    @property
    def depth(self) -> int:
        return len(self._pending) + len(self._in_flight)

    def holds(self, key: Key) -> bool:
        """Whether a change of ``key`` is pending or being delivered."""
        return key in self._pending or key in self._in_flight

    def superseded(self, item: Item) -> bool:
        """Whether a newer change of the same object is waiting behind ``item``."""
        return item.key in self._pending

    async def put(self, item: Item) -> None:
        if item.key in self._pending:
            self._pending[item.key] = item
            self.coalesced += 1
            return
        while len(self._pending) >= self._maxsize:
            self._changed.clear()
            await self._changed.wait()
            if item.key in self._pending:  # an older change of it arrived meanwhile: replace it
                self._pending[item.key] = item
                self.coalesced += 1
                return
        self._pending[item.key] = item
        self._moved()

    async def get(self) -> Item:
        """The oldest pending change whose object is not already in flight."""
        while True:
            key = next((k for k in self._pending if k not in self._in_flight), None)
            if key is not None:
                self._in_flight.add(key)
                item = self._pending.pop(key)
                self._moved()
                return item
            self._changed.clear()
            await self._changed.wait()

    async def empty(self) -> None:
        """Until nothing is pending or in flight."""
        await self._idle.wait()

    async def done(self, item: Item) -> None:
        """``item`` is delivered or given up; its object may be handed out again."""
        self._in_flight.discard(item.key)
        self._moved()

    def _moved(self) -> None:
        self._changed.set()
        if self.depth:
            self._idle.clear()
        else:
            self._idle.set()
