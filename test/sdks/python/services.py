"""The cross-SDK test services (test/sdks/CONTRACT.md), written with the Restate Python SDK."""

import json
import os
from datetime import timedelta
from typing import Any

import restate
from restate import TerminalError
from restate.exceptions import RetryableError
from restate.serde import BytesSerde, Serde


class Json(Serde):
    """JSON both ways; unlike the SDK's default serde it writes None as `null`, not as an empty
    body, so a nullable output ("state or null") is a JSON null and a stored null stays one."""

    def deserialize(self, buf):
        return json.loads(buf) if buf else None

    def serialize(self, obj):
        return json.dumps(obj).encode()


JSON = Json()
# Handlers whose output may be JSON null: declared as a JSON output (`-> None` would declare none)
# and written with JSON, so null is a `null` body, as the contract's "output null" asks.
Null = Any
RAW = BytesSerde()
attempts: dict[str, int] = {}


def bump(name: str) -> int:
    attempts[name] = attempts.get(name, 0) + 1
    return attempts[name]


def record(line: str) -> None:
    path = os.environ.get("RECORD_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class Flaky(Exception):
    """A retryable error in a run step: the SDK reports repr(e) as the failure, so repr is the text."""

    def __repr__(self):
        return str(self)


def ms(n) -> timedelta:
    return timedelta(milliseconds=n)


# --- Counter -----------------------------------------------------------------

counter = restate.VirtualObject("Counter")


async def do_add(ctx, n):
    count = (await ctx.get("count", serde=JSON) or 0) + n
    ctx.set("count", count, serde=JSON)
    return count


@counter.handler("add")
async def counter_add(ctx: restate.ObjectContext, n) -> int:
    return await do_add(ctx, n)


@counter.handler("get", kind="shared")
async def counter_get(ctx: restate.ObjectSharedContext) -> int:
    return await ctx.get("count", serde=JSON) or 0


@counter.handler("set", output_serde=JSON)
async def counter_set(ctx: restate.ObjectContext, req) -> Null:
    ctx.set(req["key"], req.get("value"), serde=JSON)


@counter.handler("read", kind="shared", output_serde=JSON)
async def counter_read(ctx: restate.ObjectSharedContext, key) -> Null:
    return await ctx.get(key, serde=JSON)


@counter.handler("keys", kind="shared")
async def counter_keys(ctx: restate.ObjectSharedContext) -> list[str]:
    return sorted(await ctx.state_keys())


@counter.handler("clear", output_serde=JSON)
async def counter_clear(ctx: restate.ObjectContext, key) -> Null:
    ctx.clear(key)


@counter.handler("clearAll", output_serde=JSON)
async def counter_clear_all(ctx: restate.ObjectContext) -> Null:
    ctx.clear_all()


@counter.handler("addThenFail")
async def counter_add_then_fail(ctx: restate.ObjectContext, n) -> None:
    await do_add(ctx, n)
    raise TerminalError(f"failed after add {n}", 400)


@counter.handler("failThenAdd")
async def counter_fail_then_add(ctx: restate.ObjectContext, n) -> int:
    k = bump("failThenAdd:" + ctx.key())
    if k < 3:
        raise RetryableError(f"retryable {k}")
    return await do_add(ctx, n)


# --- ListObject --------------------------------------------------------------

list_object = restate.VirtualObject("ListObject")


@list_object.handler("append")
async def list_append(ctx: restate.ObjectContext, value) -> list[str]:
    items = (await ctx.get("list", serde=JSON) or []) + [value]
    ctx.set("list", items, serde=JSON)
    return items


@list_object.handler("get", kind="shared")
async def list_get(ctx: restate.ObjectSharedContext) -> list[str]:
    return await ctx.get("list", serde=JSON) or []


# --- Proxy -------------------------------------------------------------------

proxy = restate.Service("Proxy")


def body_of(req) -> bytes:
    return json.dumps(req["input"]).encode() if "input" in req else b""


def proxy_call_of(ctx: restate.Context, req):
    return ctx.generic_call(req["service"], req["handler"], body_of(req), key=req.get("key"),
                            idempotency_key=req.get("idempotencyKey"))


def proxy_send_of(ctx: restate.Context, req):
    delay = req.get("delayMs")
    return ctx.generic_send(req["service"], req["handler"], body_of(req), key=req.get("key"),
                            send_delay=ms(delay) if delay else None,
                            idempotency_key=req.get("idempotencyKey"))


# The callee's output bytes go back untouched.
@proxy.handler("call", output_serde=RAW)
async def proxy_call(ctx: restate.Context, req) -> Any:
    return await proxy_call_of(ctx, req)


@proxy.handler("send", output_serde=JSON)
async def proxy_send(ctx: restate.Context, req) -> Null:
    proxy_send_of(ctx, req)


@proxy.handler("manyCalls", output_serde=JSON)
async def proxy_many_calls(ctx: restate.Context, reqs) -> Null:
    calls = []
    for r in reqs:
        if r.get("oneWay"):
            proxy_send_of(ctx, r["req"])
        else:
            calls.append(proxy_call_of(ctx, r["req"]))
    await restate.gather(*calls)
    for c in calls:
        await c  # a failed call's terminal error propagates


@proxy.handler("cancel", output_serde=JSON)
async def proxy_cancel(ctx: restate.Context, invocation_id) -> Null:
    ctx.cancel_invocation(invocation_id)


# --- Sleeper -----------------------------------------------------------------

sleeper = restate.Service("Sleeper")


@sleeper.handler("sleep", output_serde=JSON)
async def sleeper_sleep(ctx: restate.Context, req) -> Null:
    tag = req.get("tag")
    if tag:
        await ctx.run_typed("before", record, restate.RunOptions(), tag + ":before")
    await ctx.sleep(ms(req["ms"]))
    if tag:
        await ctx.run_typed("after", record, restate.RunOptions(), tag + ":after")


@sleeper.handler("sleepMany", output_serde=JSON)
async def sleeper_sleep_many(ctx: restate.Context, durations) -> Null:
    await restate.gather(*[ctx.sleep(ms(d)) for d in durations])


# --- AwakeableHolder ---------------------------------------------------------

holder = restate.VirtualObject("AwakeableHolder")


@holder.handler("hold", output_serde=JSON)
async def holder_hold(ctx: restate.ObjectContext, awakeable_id) -> Null:
    ctx.set("id", awakeable_id, serde=JSON)


@holder.handler("get", kind="shared", output_serde=JSON)
async def holder_get(ctx: restate.ObjectSharedContext) -> Null:
    return await ctx.get("id", serde=JSON)


# --- Awaiter -----------------------------------------------------------------

awaiter = restate.Service("Awaiter")


def held_awakeable(ctx: restate.Context, key):
    awakeable_id, value = ctx.awakeable(serde=JSON)
    ctx.object_send(holder_hold, key, awakeable_id)
    return value


@awaiter.handler("awakeable")
async def awaiter_awakeable(ctx: restate.Context, req) -> str:
    value = held_awakeable(ctx, req["key"])
    if req.get("timeoutMs") is None:
        return await value
    match await restate.select(value=value, timeout=ctx.sleep(ms(req["timeoutMs"]))):
        case ["value", v]:
            return v
        case _:
            return "timeout"


@awaiter.handler("callOrTimeout")
async def awaiter_call_or_timeout(ctx: restate.Context, req) -> str:
    call = ctx.service_call(sleeper_sleep, {"ms": req["sleepMs"]})
    winner, _ = await restate.select(call=call, timeout=ctx.sleep(ms(req["timeoutMs"])))
    return winner


@awaiter.handler("all")
async def awaiter_all(ctx: restate.Context, req) -> str:
    value = held_awakeable(ctx, req["key"])
    count = ctx.object_call(counter_add, req["key"], 1)
    await restate.gather(value, count, ctx.sleep(ms(req["sleepMs"])))
    return f"{await value}|{await count}"


@awaiter.handler("resolve", output_serde=JSON)
async def awaiter_resolve(ctx: restate.Context, req) -> Null:
    ctx.resolve_awakeable(req["id"], req["value"], serde=JSON)


@awaiter.handler("reject", output_serde=JSON)
async def awaiter_reject(ctx: restate.Context, req) -> Null:
    ctx.reject_awakeable(req["id"], req["reason"])


# --- Signals -----------------------------------------------------------------

signals = restate.Service("Signals")


@signals.handler("wait")
async def signals_wait(ctx: restate.Context, req) -> str:
    return await ctx.signal(req["name"], serde=JSON)


@signals.handler("send", output_serde=JSON)
async def signals_send(ctx: restate.Context, req) -> Null:
    ctx.resolve_signal(req["id"], req["name"], req["value"], serde=JSON)


@signals.handler("reject", output_serde=JSON)
async def signals_reject(ctx: restate.Context, req) -> Null:
    ctx.reject_signal(req["id"], req["name"], req["reason"])


# --- Failing -----------------------------------------------------------------

failing = restate.Service("Failing")


@failing.handler("terminal")
async def failing_terminal(ctx: restate.Context, req) -> None:
    raise TerminalError(req["message"], req.get("code") or 500, req.get("metadata"))


# --- Runner ------------------------------------------------------------------

runner = restate.Service("Runner")


@runner.handler("retry")
async def runner_retry(ctx: restate.Context, req) -> int:
    tag, failures = req["tag"], req["failures"]

    def flaky():
        record(tag + ":run")
        k = bump("run:" + tag)
        if k <= failures:
            raise Flaky(f"flaky {k}")
        return k

    options = restate.RunOptions(max_attempts=failures + 3, initial_retry_interval=ms(10))
    result = await ctx.run_typed("flaky", flaky, options)
    if bump("handler:" + tag) == 1:
        raise RetryableError("replay after the run")
    return result


@runner.handler("exhausted")
async def runner_exhausted(ctx: restate.Context, req) -> None:
    tag = req["tag"]

    def always():
        record(tag + ":run")
        raise Flaky("always fails")

    options = restate.RunOptions(max_attempts=req["maxAttempts"], initial_retry_interval=ms(10))
    await ctx.run_typed("always", always, options)


@runner.handler("terminal")
async def runner_terminal(ctx: restate.Context, req) -> None:
    tag = req["tag"]

    def terminal():
        record(tag + ":run")
        raise TerminalError("terminal in run", 409)

    await ctx.run_typed("terminal", terminal)


@runner.handler("countRuns")
async def runner_count_runs(ctx: restate.Context, n) -> int:
    count = 0

    def inc():
        nonlocal count
        count += 1

    for i in range(n):
        await ctx.run_typed(f"inc {i}", inc)
    return count


# --- NonDeterministic --------------------------------------------------------

non_deterministic = restate.VirtualObject("NonDeterministic")


def non_deterministic_handler(name, first, then):
    async def fn(ctx: restate.ObjectContext) -> str:
        k = bump(name + ":" + ctx.key())
        await (first if k == 1 else then)(ctx)
        await ctx.sleep(ms(20))
        if k == 1:
            raise RetryableError("force a replay")
        ctx.object_send(counter_add, ctx.key(), 1)
        return "never"

    fn.__name__ = name
    non_deterministic.handler(name)(fn)


async def nd_sleep(ctx):
    await ctx.sleep(ms(10))


async def nd_call_get(ctx):
    await ctx.object_call(counter_get, ctx.key(), None)


async def nd_call_keys(ctx):
    await ctx.object_call(counter_keys, ctx.key(), None)


async def nd_send_get(ctx):
    ctx.object_send(counter_get, ctx.key(), None)


async def nd_send_keys(ctx):
    ctx.object_send(counter_keys, ctx.key(), None)


async def nd_set_a(ctx):
    ctx.set("a", 1, serde=JSON)


async def nd_set_b(ctx):
    ctx.set("b", 1, serde=JSON)


non_deterministic_handler("eitherSleepOrCall", nd_sleep, nd_call_get)
non_deterministic_handler("callDifferentMethod", nd_call_get, nd_call_keys)
non_deterministic_handler("sendDifferentTarget", nd_send_get, nd_send_keys)
non_deterministic_handler("setDifferentKey", nd_set_a, nd_set_b)


# --- Echo --------------------------------------------------------------------

echo = restate.Service("Echo")


@echo.handler("headers")
async def echo_headers(ctx: restate.Context) -> dict[str, str]:
    return {k.lower(): v for k, v in ctx.request().headers.items()}


@echo.handler("raw", accept="application/octet-stream", content_type="application/octet-stream",
         input_serde=RAW, output_serde=RAW)
async def echo_raw(ctx: restate.Context, data: bytes) -> bytes:
    return data


# --- Signup ------------------------------------------------------------------

signup = restate.Workflow("Signup")


@signup.main("run")
async def run(ctx: restate.WorkflowContext, name) -> str:
    wf_id = ctx.key()
    await ctx.run_typed("create", record, restate.RunOptions(), wf_id + ":create")
    ctx.set("status", "waiting", serde=JSON)
    approval = await ctx.promise("approval", serde=JSON).value()
    ctx.set("status", "approved", serde=JSON)
    return f"{name}:{approval}"


@signup.handler("approve", output_serde=JSON)
async def signup_approve(ctx: restate.WorkflowSharedContext, value) -> Null:
    await ctx.promise("approval", serde=JSON).resolve(value)


@signup.handler("status", output_serde=JSON)
async def signup_status(ctx: restate.WorkflowSharedContext) -> Null:
    return await ctx.get("status", serde=JSON)


SERVICES = [counter, list_object, proxy, sleeper, holder, awaiter, signals, failing, runner,
            non_deterministic, echo, signup]
