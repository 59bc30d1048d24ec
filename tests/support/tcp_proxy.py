"""A loopback TCP proxy for tests, which can simulate an outage of what it stands in front of.

    with TcpProxy(("127.0.0.1", broker_port)) as proxy:   # listens on 127.0.0.1:<proxy.port>
        ...                                               # clients connect to proxy.address
        proxy.cut()       # abort every open connection, reset every new one
        ...
        proxy.restore()   # forward new connections again

During an outage the listening socket stays open (so nobody else can take the port) but every
connection is reset as soon as it is accepted: a client sees its connection fail at once, as when
the server process is gone. Bytes are forwarded as they come, in both directions, nothing else.

Bounded: it listens on loopback only, serves at most ``max_connections`` connections at a time
(more are reset), and shuts itself down ``lifetime_s`` after it started even if nobody calls
:meth:`stop`. Everything runs on one daemon thread (an asyncio loop).
"""
from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Optional, Set, Tuple

LOOPBACK = "127.0.0.1"


class TcpProxy:
    def __init__(
        self,
        upstream: Tuple[str, int],
        port: int = 0,
        max_connections: int = 128,
        lifetime_s: float = 900.0,
        connect_timeout_s: float = 10.0,
    ):
        host, upstream_port = upstream
        if host not in (LOOPBACK, "localhost"):
            raise ValueError(f"the test proxy only forwards to loopback, not {host!r}")
        self.upstream = (LOOPBACK, int(upstream_port))
        self.port = port
        self.max_connections = max_connections
        self.lifetime_s = lifetime_s
        self.connect_timeout_s = connect_timeout_s
        # Counters, for assertions (only written on the proxy's thread).
        self.accepted = 0  # connections forwarded
        self.cut_connections = 0  # open connections aborted by cut()
        self.refused = 0  # connections reset because of an outage (or too many connections)
        self.unreachable = 0  # connections reset because the upstream did not answer (it is down)
        self._refusing = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server: Optional[asyncio.base_events.Server] = None
        self._links: Set[Tuple[asyncio.Transport, Optional[asyncio.Transport]]] = set()

    # ---- the test's side (any thread) -----------------------------------------------------

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "TcpProxy":
        if self.running:
            return self
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list = []

        def run() -> None:
            loop = self._loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._listen())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            loop.call_later(self.lifetime_s, self._expire)
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"tcp-proxy->{self.upstream[1]}", daemon=True)
        self._thread.start()
        if not ready.wait(30) or failure:
            raise RuntimeError(f"the TCP proxy did not start: {failure[0] if failure else 'timeout'}")
        return self

    def cut(self) -> int:
        """Start an outage: abort every open connection, reset new ones. Returns how many
        connections were cut."""
        return self._call(self._cut())

    def restore(self) -> None:
        """End an outage: forward new connections again."""
        self._call(self._set_refusing(False))

    def stop(self) -> None:
        if self.running:
            try:
                self._call(self._close_all())
                self._loop.call_soon_threadsafe(self._loop.stop)
            except RuntimeError:
                pass  # it stopped by itself meanwhile
            self._thread.join(30)

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro, timeout: float = 30.0):
        if not self.running:
            coro.close()
            raise RuntimeError("the TCP proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # ---- the proxy's thread ----------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, LOOPBACK, self.port, reuse_address=True, limit=1 << 20
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_refusing(self, refusing: bool) -> None:
        self._refusing = refusing

    async def _cut(self) -> int:
        self._refusing = True
        links = list(self._links)
        for client, upstream in links:
            _abort(client)
            _abort(upstream)
        self.cut_connections += len(links)
        return len(links)

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        asyncio.ensure_future(self._close_all()).add_done_callback(lambda _: loop.stop())

    async def _close_all(self) -> None:
        """Close the listener and every connection; the loop is stopped by the caller."""
        await self._cut()
        if self._server is not None:
            self._server.close()
            self._server = None
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._forward(reader, writer)
        except asyncio.CancelledError:
            pass  # shutting down; asyncio's stream callback would log a cancelled handler

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.transport
        if self._refusing or len(self._links) >= self.max_connections:
            self.refused += 1
            _abort(client)
            return
        link = (client, None)
        self._links.add(link)  # counted while connecting upstream, so cut() aborts it too
        try:
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.upstream, limit=1 << 20), self.connect_timeout_s
                )
            except (OSError, asyncio.TimeoutError):
                self.unreachable += 1
                _abort(client)
                return
            self._links.discard(link)
            if self._refusing or client.is_closing():  # cut while connecting upstream
                _abort(client)
                _abort(up_writer.transport)
                return
            link = (client, up_writer.transport)
            self._links.add(link)
            self.accepted += 1
            pumps = [
                asyncio.ensure_future(_pump(reader, up_writer)),
                asyncio.ensure_future(_pump(up_reader, writer)),
            ]
            try:
                # Either side closing ends the connection (Kafka has no half-closed connections).
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                _abort(client)
                _abort(up_writer.transport)
        finally:
            self._links.discard(link)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                return
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        return


def _abort(transport: Optional[asyncio.BaseTransport]) -> None:
    """Close with a reset (SO_LINGER 0), as a dead peer would leave it."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()
