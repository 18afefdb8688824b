"""The middleware chain of HandlerRunner without a database (mixed plain and async
middleware and handlers, on the thread front's path and the asyncio front's), and the one
clear error for each kind of bad middleware or hook."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.handler import HandlerRunner
from portq.job import Job

tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="-")


def job() -> Job:
    return Job(id=1, queue="q", payload={"task": "t.add"}, attempt=1, max_attempts=3,
               key=None)


def chain_of(log: list[str]) -> list[Any]:
    def plain(j: Job, call_next: Callable[[], Any]) -> Any:
        log.append(f"plain-in:{tag.get()}")
        token = tag.set("set-by-plain")
        try:
            result = call_next()
        finally:
            tag.reset(token)
        log.append(f"plain-out:{result}")
        return result

    async def coro(j: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        log.append(f"async-in:{tag.get()}")
        result = await call_next()
        log.append(f"async-out:{result}")
        return result + 1

    class Both:
        def __call__(self, j: Job, call_next: Callable[[], Any]) -> Any:
            log.append("both-plain")
            return call_next()

        async def acall(self, j: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
            log.append("both-async")
            return await call_next()

    return [plain, coro, Both(), plain]


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_thread_front_runs_a_mixed_chain_in_order(kind: str) -> None:
    log: list[str] = []

    def sync_handler(j: Job) -> int:
        log.append(f"handler:{tag.get()}")
        return 41

    async def async_handler(j: Job) -> int:
        log.append(f"handler:{tag.get()}")
        return 41

    runner = HandlerRunner(sync_handler if kind == "def" else async_handler,
                           chain_of(log))
    try:
        assert runner.run(job()) == 42
    finally:
        runner.close_thread()
    # after the async middleware the chain runs on the thread's loop: the object with both
    # forms is called through acall there; context variables flow down the chain
    assert log == ["plain-in:-", "async-in:set-by-plain", "both-async", "plain-in:set-by-plain",
                   "handler:set-by-plain", "plain-out:41", "async-out:41", "plain-out:42"]


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_asyncio_front_runs_a_mixed_chain_in_order(kind: str) -> None:
    log: list[str] = []
    loop_thread: list[threading.Thread] = []

    def sync_handler(j: Job) -> int:
        log.append(f"handler:{tag.get()}")
        return 41

    async def async_handler(j: Job) -> int:
        loop_thread.append(threading.current_thread())
        log.append(f"handler:{tag.get()}")
        return 41

    runner = HandlerRunner(sync_handler if kind == "def" else async_handler,
                           chain_of(log))

    async def go() -> Any:
        return await runner.run_async(job()), threading.current_thread()
    result, main = asyncio.run(go())
    assert result == 42
    assert log == ["plain-in:-", "async-in:set-by-plain", "both-async", "plain-in:set-by-plain",
                   "handler:set-by-plain", "plain-out:41", "async-out:41", "plain-out:42"]
    if kind == "async def":
        assert loop_thread == [main]  # an async handler still runs on the loop


def test_a_middleware_sees_the_exception_and_may_replace_it() -> None:
    seen: list[BaseException] = []

    def translate(j: Job, call_next: Callable[[], Any]) -> Any:
        try:
            return call_next()
        except KeyError as exc:
            seen.append(exc)
            raise portq.Permanent("no such row") from exc

    def handler(j: Job) -> None:
        raise KeyError("row")

    runner = HandlerRunner(handler, [translate])
    with pytest.raises(portq.Permanent, match="no such row"):
        runner.run(job())
    assert [type(e) for e in seen] == [KeyError]


@pytest.mark.parametrize(("middleware", "message"), [
    (lambda j, n: n(), "must be a list of middleware"),
    ([1], "is not callable"),
    ([lambda j: None], "must take two arguments"),
    (["mw"], "is not callable"),
])
def test_bad_worker_middleware_is_one_clear_error(tmp_path: Path, middleware: Any,
                                                  message: str) -> None:
    with portq.connect(f"sqlite:///{tmp_path}/q.db") as q:
        q.migrate()
        with pytest.raises(portq.ConfigurationError, match=message):
            portq.Worker(q, "q", lambda j: None, middleware=middleware)
        if isinstance(middleware, list):  # one middleware at a time: the same check
            with pytest.raises(portq.ConfigurationError, match=message):
                q.add_middleware(middleware[0])


def test_bad_task_middleware_and_hooks_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(portq.ConfigurationError, match=r"@portq\.task middleware"):
        portq.task(queue="q", middleware=[42])
    with portq.connect(f"sqlite:///{tmp_path}/q.db") as q:
        with pytest.raises(portq.ConfigurationError, match="needs before= or after="):
            q.add_enqueue_hook()
        with pytest.raises(portq.ConfigurationError, match="before=1 is not callable"):
            q.add_enqueue_hook(before=1)  # type: ignore[arg-type]

    class HalfAsync:
        def __call__(self, j: Job, call_next: Callable[[], Any]) -> Any:
            return call_next()

        def acall(self, j: Job, call_next: Callable[[], Any]) -> Any:
            return call_next()
    with pytest.raises(portq.ConfigurationError, match="acall must be async def"):
        HandlerRunner(lambda j: None, [HalfAsync()])
