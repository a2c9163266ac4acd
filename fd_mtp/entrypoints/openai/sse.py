"""Server-sent events of `RequestStream`s: the response class that aborts what its client left,
one ``data:`` event, and several streams merged as their events come."""

from __future__ import annotations

import asyncio
import json

from starlette.responses import StreamingResponse

__all__ = ["EventStream", "merge_streams", "sse"]


class EventStream(StreamingResponse):
    """Server-sent events of some `RequestStream`s, which are closed (their requests aborted
    unless finished) however the response ends: also when the client went away before the first
    event was written (the body generator then never started, so its own cleanup cannot run)."""

    def __init__(self, content, streams):
        super().__init__(content, media_type="text/event-stream")
        self._streams = streams

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            for s in self._streams:
                s.close()


def sse(obj) -> str:
    """One server-sent event of a JSON object."""
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def merge_streams(streams):
    """``(index, RequestEvent)`` of several streams as they come (each stream in order)."""
    if len(streams) == 1:
        async for ev in streams[0]:
            yield 0, ev
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i, s):
        try:
            async for ev in s:
                queue.put_nowait((i, ev))
        except Exception as exc:  # EngineDeadError: surfaced to the reader
            queue.put_nowait((i, exc))
        finally:
            queue.put_nowait((i, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        done = 0
        while done < len(streams):
            i, ev = await queue.get()
            if ev is None:
                done += 1
            elif isinstance(ev, Exception):
                raise ev
            else:
                yield i, ev
    finally:
        for t in tasks:
            t.cancel()
        for s in streams:
            s.close()
