"""Relay TCP connections from the cluster's internal network to the vendor
emulator, which by design listens on loopback only (it must never serve any
other address).  Used by the emulator container of containers/: stdlib only,
no logging of payloads (they carry request signatures).

    python relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import asyncio
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main(listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        for _ in range(100):  # the emulator may still be starting
            try:
                target_r, target_w = await asyncio.open_connection(target_host, target_port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, target_w), _pipe(target_r, client_w))

    server = await asyncio.start_server(handle, listen_host, listen_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    host, port, target, target_port = sys.argv[1:5]
    asyncio.run(main(host, int(port), target, int(target_port)))
