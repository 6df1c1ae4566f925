"""The seed's Greeter service, written with the Restate Python SDK.

Run: ./run.sh (port 9080, or $PORT), then register http://localhost:9080 with Keel.
"""

import asyncio
import os
import signal
from datetime import timedelta

import hypercorn.asyncio
import hypercorn.config
import restate
from restate.server import install_shutdown_hook

greeter = restate.Service("Greeter")


@greeter.handler()
async def greet(ctx: restate.Context, req: dict) -> dict:
    greeting_id = str(ctx.uuid())
    await ctx.run_typed("Notification", notify, restate.RunOptions(), f"Notification {greeting_id} {req['name']}")
    await ctx.sleep(timedelta(seconds=1))
    await ctx.run_typed("Reminder", notify, restate.RunOptions(), f"Reminder {greeting_id} {req['name']}")
    return {"result": f"You said hi to {req['name']}!"}


def notify(line: str) -> None:
    print(line, flush=True)
    if path := os.environ.get("RECORD_FILE"):
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


app = restate.app(services=[greeter])


async def main() -> None:
    config = hypercorn.config.Config()
    port = os.environ.get("PORT", "9080")
    config.bind = [f"[::]:{port}"]
    # On its first request the SDK sets the loop's SIGTERM handler (to its hook list), which would
    # replace hypercorn's: stopping is one more hook in that list, so SIGTERM still stops the server.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    install_shutdown_hook(loop, stop.set, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await hypercorn.asyncio.serve(app, config, shutdown_trigger=stop.wait)


if __name__ == "__main__":
    asyncio.run(main())
