"""Serves every contract service on 127.0.0.1:$PORT: HTTP/2 cleartext (prior knowledge) and HTTP/1.1."""

import asyncio
import os
import signal

import hypercorn.asyncio
import hypercorn.config
import restate
from restate.server import install_shutdown_hook

from services import SERVICES


async def main() -> None:
    key = os.environ.get("IDENTITY_KEY")
    app = restate.app(services=SERVICES, identity_keys=[key] if key else None)
    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{os.environ.get('PORT', '9080')}"]
    # On its first request the SDK sets the loop's SIGTERM handler (to its hook list), which would
    # replace hypercorn's: stopping is one more hook in that list, so SIGTERM still stops the server.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    install_shutdown_hook(loop, stop.set, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await hypercorn.asyncio.serve(app, config, shutdown_trigger=stop.wait)


if __name__ == "__main__":
    asyncio.run(main())
