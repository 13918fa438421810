#!/usr/bin/env python3
"""A TCP proxy that delays every byte by a fixed time each way, in order.

    delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_MS

Listens on 127.0.0.1:LISTEN_PORT and forwards each connection to
127.0.0.1:TARGET_PORT. What one side sends reaches the other DELAY_MS later
(so a request and its answer take twice that), and bytes keep their order.
`cluster_ab.sh -l MS` puts one in front of each follower's Raft listener as the
leader dials it, to model nodes on separate hosts; `tc netem` is not available
on these machines. The event loop's timers have a granularity of about 1 ms,
and the proxy's own scheduling adds a little: read the delay as "at least".
"""
import asyncio
import socket
import sys
import time


async def forward(reader, writer, delay):
    """Copies reader to writer, each chunk `delay` seconds after it was read."""
    chunks = asyncio.Queue()

    async def read():
        while True:
            data = await reader.read(1 << 16)
            await chunks.put((time.monotonic() + delay, data))
            if not data:
                return

    async def write():
        while True:
            due, data = await chunks.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    await asyncio.gather(read(), write(), return_exceptions=True)


async def serve(listen, target, delay):
    async def connection(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        for writer in (client_writer, server_writer):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            forward(client_reader, server_writer, delay),
            forward(server_reader, client_writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connection, "127.0.0.1", listen)
    await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000))
