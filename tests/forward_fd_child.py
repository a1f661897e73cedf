"""Child process for tests/test_forward_limits.py: the forward server and an HTTP API on one
event loop (as ``vllm-sentinel serve`` runs them), under a low descriptor limit.

Prints one JSON line with the ports, then answers commands read from stdin, one JSON line
each: ``exhaust`` (open /dev/null until EMFILE and hold them), ``release``, ``stats``
(open connections, ERROR log records so far by logger, accept errors), ``quit``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sys

import uvicorn

from service.ratelog import loop_exception_handler
from service.sources.forward.server import ACCEPT_ERRORS, ForwardServer

FD_LIMIT = 256


class Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.by_logger: dict[str, int] = {}
        self.longest = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.by_logger[record.name] = self.by_logger.get(record.name, 0) + 1
        self.longest = max(self.longest, len(record.getMessage()))


async def api(scope: dict, receive: object, send: object) -> None:  # a minimal ASGI app
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,  # type: ignore[operator]
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


def accept_errors() -> float:
    return sum(
        s.value for m in ACCEPT_ERRORS.collect() for s in m.samples if s.name.endswith("_total")
    )


async def main() -> None:
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (FD_LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    count = Count()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger().addHandler(count)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_exception_handler)

    async def sink(records: list) -> None:
        return None

    forward = ForwardServer(sink, port=0, self_hostname="fd-child")  # default cap 512
    await forward.start()
    server = uvicorn.Server(
        uvicorn.Config(api, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    api_port = server.servers[0].sockets[0].getsockname()[1]
    print(
        json.dumps({"forward": forward.port, "api": api_port, "cap": forward.max_connections}),
        flush=True,
    )
    held: list[int] = []
    while True:
        command = (await asyncio.to_thread(sys.stdin.readline)).strip()
        if command == "exhaust":
            while True:
                try:
                    held.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:
                    break
            answer: dict = {"held": len(held)}
        elif command == "release":
            for fd in held:
                os.close(fd)
            answer = {"released": len(held)}
            held = []
        elif command == "stats":
            answer = {
                "open": forward.open_connections,
                "errors": count.by_logger,
                "longest": count.longest,
                "accept_errors": accept_errors(),
            }
        else:
            break
        print(json.dumps(answer), flush=True)
    server.should_exit = True
    await serving
    await forward.stop()


if __name__ == "__main__":
    asyncio.run(main())
