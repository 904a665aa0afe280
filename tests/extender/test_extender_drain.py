"""The extender stops gracefully, as the webhook does: on stop /readyz fails for the drain delay
while calls are still answered, then the listener closes (it used to close at once)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
from extender_builders import args, build, node, pod

from migfit.extender import server


async def test_readyz_fails_during_the_drain_while_calls_are_answered() -> None:
    model = build([node("n", {"1g.10gb": 7})])
    settings = server.ExtenderSettings(host="127.0.0.1", port=0, drain_delay=1.5)
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(settings, model, stop=stop,
                                            on_started=started.set_result))
    port = await asyncio.wait_for(started, 10)
    base = f"http://127.0.0.1:{port}"
    body = json.dumps(args(pod("want"), ["n"]))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/readyz") as resp:
            assert resp.status == 200
        stop.set()
        await asyncio.sleep(0.3)
        async with session.get(f"{base}/readyz") as resp:
            assert resp.status == 503
        async with session.post(f"{base}/filter", data=body) as resp:
            assert resp.status == 200 and (await resp.json())["NodeNames"] == ["n"]
        await asyncio.wait_for(task, 10)
        try:
            async with session.get(f"{base}/healthz") as resp:
                raise AssertionError(f"still listening after the drain ({resp.status})")
        except aiohttp.ClientConnectionError:
            pass
