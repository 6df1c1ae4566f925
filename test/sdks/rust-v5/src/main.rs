// Keel's cross-SDK test services (test/sdks/CONTRACT.md) on restate-sdk 0.10, the newest Rust
// SDK that speaks service protocol v5 only: the whole suite runs over Keel's v5 path.
use bytes::Bytes;
use restate_sdk::context::RequestTarget;
use restate_sdk::prelude::*;
use restate_sdk::serde::{Deserialize, PayloadMetadata, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

fn record(line: &str) {
    if let Ok(path) = std::env::var("RECORD_FILE") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

fn bump(name: &str) -> u64 {
    static COUNTS: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    let mut m = COUNTS.get_or_init(Default::default).lock().unwrap();
    let c = m.entry(name.to_string()).or_insert(0);
    *c += 1;
    *c
}

fn retryable(msg: String) -> HandlerError {
    msg.into()
}

/// JSON bytes passed through untouched, so a proxied output (or an empty one) comes back as the callee wrote it.
struct RawJson(Bytes);

impl Serialize for RawJson {
    type Error = Infallible;
    fn serialize(&self) -> Result<Bytes, Infallible> {
        Ok(self.0.clone())
    }
}
impl Deserialize for RawJson {
    type Error = Infallible;
    fn deserialize(b: &mut Bytes) -> Result<Self, Infallible> {
        Ok(RawJson(b.clone()))
    }
}
impl PayloadMetadata for RawJson {}

// ---- Counter

#[restate_sdk::object]
trait Counter {
    async fn add(n: i64) -> HandlerResult<i64>;
    #[shared]
    async fn get() -> HandlerResult<i64>;
    async fn set(kv: Json<SetReq>) -> HandlerResult<()>;
    #[shared]
    async fn read(key: String) -> HandlerResult<Json<Value>>;
    #[shared]
    async fn keys() -> HandlerResult<Json<Vec<String>>>;
    async fn clear(key: String) -> HandlerResult<()>;
    #[name = "clearAll"]
    async fn clear_all() -> HandlerResult<()>;
    #[name = "addThenFail"]
    async fn add_then_fail(n: i64) -> HandlerResult<()>;
    #[name = "failThenAdd"]
    async fn fail_then_add(n: i64) -> HandlerResult<i64>;
}

#[derive(serde::Deserialize)]
struct SetReq {
    key: String,
    value: Value,
}

struct CounterImpl;

impl Counter for CounterImpl {
    async fn add(&self, ctx: ObjectContext<'_>, n: i64) -> HandlerResult<i64> {
        let count = ctx.get::<i64>("count").await?.unwrap_or(0) + n;
        ctx.set("count", count);
        Ok(count)
    }

    async fn get(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<i64> {
        Ok(ctx.get::<i64>("count").await?.unwrap_or(0))
    }

    async fn set(&self, ctx: ObjectContext<'_>, kv: Json<SetReq>) -> HandlerResult<()> {
        let SetReq { key, value } = kv.into_inner();
        ctx.set(&key, Json(value));
        Ok(())
    }

    async fn read(&self, ctx: SharedObjectContext<'_>, key: String) -> HandlerResult<Json<Value>> {
        let v = ctx.get::<Json<Value>>(&key).await?;
        Ok(Json(v.map(Json::into_inner).unwrap_or(Value::Null)))
    }

    async fn keys(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Vec<String>>> {
        let mut keys = ctx.get_keys().await?;
        keys.sort();
        Ok(Json(keys))
    }

    async fn clear(&self, ctx: ObjectContext<'_>, key: String) -> HandlerResult<()> {
        ctx.clear(&key);
        Ok(())
    }

    async fn clear_all(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        ctx.clear_all();
        Ok(())
    }

    async fn add_then_fail(&self, ctx: ObjectContext<'_>, n: i64) -> HandlerResult<()> {
        let count = ctx.get::<i64>("count").await?.unwrap_or(0) + n;
        ctx.set("count", count);
        Err(TerminalError::new_with_code(400, format!("failed after add {n}")).into())
    }

    async fn fail_then_add(&self, ctx: ObjectContext<'_>, n: i64) -> HandlerResult<i64> {
        let k = bump(&format!("failThenAdd:{}", ctx.key()));
        if k < 3 {
            return Err(retryable(format!("retryable {k}")));
        }
        let count = ctx.get::<i64>("count").await?.unwrap_or(0) + n;
        ctx.set("count", count);
        Ok(count)
    }
}

// ---- ListObject

#[restate_sdk::object]
trait ListObject {
    async fn append(v: String) -> HandlerResult<Json<Vec<String>>>;
    #[shared]
    async fn get() -> HandlerResult<Json<Vec<String>>>;
}

struct ListObjectImpl;

impl ListObject for ListObjectImpl {
    async fn append(&self, ctx: ObjectContext<'_>, v: String) -> HandlerResult<Json<Vec<String>>> {
        let mut list = ctx
            .get::<Json<Vec<String>>>("list")
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        list.push(v);
        ctx.set("list", Json(list.clone()));
        Ok(Json(list))
    }

    async fn get(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Vec<String>>> {
        Ok(ctx
            .get::<Json<Vec<String>>>("list")
            .await?
            .unwrap_or_default())
    }
}

// ---- Proxy

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProxyReq {
    service: String,
    key: Option<String>,
    handler: String,
    input: Value,
    delay_ms: Option<u64>,
    idempotency_key: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManyReq {
    req: ProxyReq,
    one_way: bool,
}

// Keyed or not is all the protocol needs: a workflow target is sent like an object's.
fn request<'ctx>(ctx: &Context<'ctx>, req: ProxyReq) -> Request<'ctx, RawJson, RawJson> {
    let target = match req.key {
        Some(key) => RequestTarget::object(req.service, key, req.handler),
        None => RequestTarget::service(req.service, req.handler),
    };
    let input = RawJson(serde_json::to_vec(&req.input).unwrap().into());
    let r = ctx.request(target, input);
    match req.idempotency_key {
        Some(k) => r.idempotency_key(k),
        None => r,
    }
}

#[restate_sdk::service]
trait Proxy {
    async fn call(req: Json<ProxyReq>) -> HandlerResult<RawJson>;
    async fn send(req: Json<ProxyReq>) -> HandlerResult<()>;
    #[name = "manyCalls"]
    async fn many_calls(reqs: Json<Vec<ManyReq>>) -> HandlerResult<()>;
    async fn cancel(id: String) -> HandlerResult<()>;
}

struct ProxyImpl;

impl Proxy for ProxyImpl {
    async fn call(&self, ctx: Context<'_>, req: Json<ProxyReq>) -> HandlerResult<RawJson> {
        Ok(request(&ctx, req.into_inner()).call().await?)
    }

    async fn send(&self, ctx: Context<'_>, req: Json<ProxyReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        let delay = req.delay_ms.map(Duration::from_millis);
        let r = request(&ctx, req);
        match delay {
            Some(d) => {
                r.send_after(d);
            }
            None => {
                r.send();
            }
        }
        Ok(())
    }

    async fn many_calls(&self, ctx: Context<'_>, reqs: Json<Vec<ManyReq>>) -> HandlerResult<()> {
        let mut calls = DurableFuturesUnordered::new();
        for r in reqs.into_inner() {
            if r.one_way {
                request(&ctx, r.req).send();
            } else {
                calls.push(request(&ctx, r.req).call());
            }
        }
        while let Some((_, res)) = calls.next().await? {
            res?;
        }
        Ok(())
    }

    async fn cancel(&self, ctx: Context<'_>, id: String) -> HandlerResult<()> {
        ctx.invocation_handle(id).cancel().await?;
        Ok(())
    }
}

// ---- Sleeper

#[derive(serde::Serialize, serde::Deserialize)]
struct SleepReq {
    ms: u64,
    tag: Option<String>,
}

#[restate_sdk::service]
trait Sleeper {
    async fn sleep(req: Json<SleepReq>) -> HandlerResult<()>;
    #[name = "sleepMany"]
    async fn sleep_many(ms: Json<Vec<u64>>) -> HandlerResult<()>;
}

struct SleeperImpl;

impl Sleeper for SleeperImpl {
    async fn sleep(&self, ctx: Context<'_>, req: Json<SleepReq>) -> HandlerResult<()> {
        let SleepReq { ms, tag } = req.into_inner();
        if let Some(tag) = &tag {
            let line = format!("{tag}:before");
            ctx.run(|| async move {
                record(&line);
                Ok(())
            })
            .name("before")
            .await?;
        }
        ctx.sleep(Duration::from_millis(ms)).await?;
        if let Some(tag) = &tag {
            let line = format!("{tag}:after");
            ctx.run(|| async move {
                record(&line);
                Ok(())
            })
            .name("after")
            .await?;
        }
        Ok(())
    }

    async fn sleep_many(&self, ctx: Context<'_>, ms: Json<Vec<u64>>) -> HandlerResult<()> {
        let mut sleeps: DurableFuturesUnordered<_> = ms
            .into_inner()
            .into_iter()
            .map(|ms| ctx.sleep(Duration::from_millis(ms)))
            .collect();
        while let Some((_, res)) = sleeps.next().await? {
            res?;
        }
        Ok(())
    }
}

// ---- Awaiter

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AwakeableReq {
    key: String,
    timeout_ms: Option<u64>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallOrTimeoutReq {
    sleep_ms: u64,
    timeout_ms: u64,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AllReq {
    key: String,
    sleep_ms: u64,
}

#[derive(serde::Deserialize)]
struct ResolveReq {
    id: String,
    value: String,
}

#[derive(serde::Deserialize)]
struct RejectReq {
    id: String,
    reason: String,
}

#[restate_sdk::service]
trait Awaiter {
    async fn awakeable(req: Json<AwakeableReq>) -> HandlerResult<String>;
    #[name = "callOrTimeout"]
    async fn call_or_timeout(req: Json<CallOrTimeoutReq>) -> HandlerResult<String>;
    async fn all(req: Json<AllReq>) -> HandlerResult<String>;
    async fn resolve(req: Json<ResolveReq>) -> HandlerResult<()>;
    async fn reject(req: Json<RejectReq>) -> HandlerResult<()>;
}

struct AwaiterImpl;

impl Awaiter for AwaiterImpl {
    async fn awakeable(&self, ctx: Context<'_>, req: Json<AwakeableReq>) -> HandlerResult<String> {
        let AwakeableReq { key, timeout_ms } = req.into_inner();
        let (id, awk) = ctx.awakeable::<String>();
        ctx.object_client::<AwakeableHolderClient>(key)
            .hold(id)
            .send();
        let Some(ms) = timeout_ms else {
            return Ok(awk.await?);
        };
        restate_sdk::select! {
            v = awk => Ok(v?),
            _ = ctx.sleep(Duration::from_millis(ms)) => Ok("timeout".to_string()),
        }
    }

    async fn call_or_timeout(
        &self,
        ctx: Context<'_>,
        req: Json<CallOrTimeoutReq>,
    ) -> HandlerResult<String> {
        let req = req.into_inner();
        let call = ctx
            .service_client::<SleeperClient>()
            .sleep(Json(SleepReq {
                ms: req.sleep_ms,
                tag: None,
            }))
            .call();
        restate_sdk::select! {
            r = call => { r?; Ok("call".to_string()) },
            _ = ctx.sleep(Duration::from_millis(req.timeout_ms)) => Ok("timeout".to_string()),
        }
    }

    async fn all(&self, ctx: Context<'_>, req: Json<AllReq>) -> HandlerResult<String> {
        let AllReq { key, sleep_ms } = req.into_inner();
        let (id, awk) = ctx.awakeable::<String>();
        ctx.object_client::<AwakeableHolderClient>(key.clone())
            .hold(id)
            .send();
        let add = ctx.object_client::<CounterClient>(key).add(1).call();
        let sleep = ctx.sleep(Duration::from_millis(sleep_ms));
        // 0.10 cannot put three future types in one collection (no map_ok, no boxed durable
        // futures), so they are awaited in turn: all three were started first, the result is the same.
        let v = awk.await?;
        let n = add.await?;
        sleep.await?;
        Ok(format!("{v}|{n}"))
    }

    async fn resolve(&self, ctx: Context<'_>, req: Json<ResolveReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        ctx.resolve_awakeable(&req.id, req.value);
        Ok(())
    }

    async fn reject(&self, ctx: Context<'_>, req: Json<RejectReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        ctx.reject_awakeable(&req.id, TerminalError::new(req.reason));
        Ok(())
    }
}

// ---- AwakeableHolder

#[restate_sdk::object]
trait AwakeableHolder {
    async fn hold(id: String) -> HandlerResult<()>;
    #[shared]
    async fn get() -> HandlerResult<Json<Option<String>>>;
}

struct AwakeableHolderImpl;

impl AwakeableHolder for AwakeableHolderImpl {
    async fn hold(&self, ctx: ObjectContext<'_>, id: String) -> HandlerResult<()> {
        ctx.set("id", id);
        Ok(())
    }

    async fn get(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Option<String>>> {
        Ok(Json(ctx.get::<String>("id").await?))
    }
}

// ---- Failing

#[derive(serde::Deserialize)]
struct FailReq {
    message: String,
    code: Option<u16>,
    // The SDK's TerminalError has no metadata (it sends an empty list), so this is read and dropped.
    #[allow(dead_code)]
    metadata: Option<BTreeMap<String, String>>,
}

#[restate_sdk::service]
trait Failing {
    async fn terminal(req: Json<FailReq>) -> HandlerResult<()>;
}

struct FailingImpl;

impl Failing for FailingImpl {
    async fn terminal(&self, _ctx: Context<'_>, req: Json<FailReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        Err(TerminalError::new_with_code(req.code.unwrap_or(500), req.message).into())
    }
}

// ---- Runner

#[derive(serde::Deserialize)]
struct RetryReq {
    tag: String,
    failures: u64,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExhaustedReq {
    tag: String,
    max_attempts: u32,
}

#[derive(serde::Deserialize)]
struct TagReq {
    tag: String,
}

#[restate_sdk::service]
trait Runner {
    async fn retry(req: Json<RetryReq>) -> HandlerResult<u64>;
    async fn exhausted(req: Json<ExhaustedReq>) -> HandlerResult<()>;
    async fn terminal(req: Json<TagReq>) -> HandlerResult<()>;
    #[name = "countRuns"]
    async fn count_runs(n: u64) -> HandlerResult<u64>;
}

struct RunnerImpl;

impl Runner for RunnerImpl {
    async fn retry(&self, ctx: Context<'_>, req: Json<RetryReq>) -> HandlerResult<u64> {
        let RetryReq { tag, failures } = req.into_inner();
        let t = tag.clone();
        let k = ctx
            .run(|| async move {
                record(&format!("{t}:run"));
                let k = bump(&format!("run:{t}"));
                if k <= failures {
                    return Err(retryable(format!("flaky {k}")));
                }
                Ok(k)
            })
            .name("flaky")
            .retry_policy(
                RunRetryPolicy::new()
                    .initial_delay(Duration::from_millis(10))
                    .max_attempts(failures as u32 + 3),
            )
            .await?;
        if bump(&format!("handler:{tag}")) == 1 {
            return Err(retryable("replay after the run".to_string()));
        }
        Ok(k)
    }

    async fn exhausted(&self, ctx: Context<'_>, req: Json<ExhaustedReq>) -> HandlerResult<()> {
        let ExhaustedReq { tag, max_attempts } = req.into_inner();
        ctx.run(|| async move {
            record(&format!("{tag}:run"));
            Err::<(), _>(retryable("always fails".to_string()))
        })
        .name("always")
        .retry_policy(
            RunRetryPolicy::new()
                .initial_delay(Duration::from_millis(10))
                .max_attempts(max_attempts),
        )
        .await?;
        Ok(())
    }

    async fn terminal(&self, ctx: Context<'_>, req: Json<TagReq>) -> HandlerResult<()> {
        let tag = req.into_inner().tag;
        ctx.run(|| async move {
            record(&format!("{tag}:run"));
            Err::<(), _>(TerminalError::new_with_code(409, "terminal in run").into())
        })
        .name("terminal")
        .await?;
        Ok(())
    }

    async fn count_runs(&self, ctx: Context<'_>, n: u64) -> HandlerResult<u64> {
        let count = Arc::new(AtomicU64::new(0));
        for i in 0..n {
            let c = count.clone();
            ctx.run(|| async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .name(format!("inc {i}"))
            .await?;
        }
        Ok(count.load(Ordering::SeqCst))
    }
}

// ---- NonDeterministic

#[restate_sdk::object]
trait NonDeterministic {
    #[name = "eitherSleepOrCall"]
    async fn either_sleep_or_call() -> HandlerResult<String>;
    #[name = "callDifferentMethod"]
    async fn call_different_method() -> HandlerResult<String>;
    #[name = "sendDifferentTarget"]
    async fn send_different_target() -> HandlerResult<String>;
    #[name = "setDifferentKey"]
    async fn set_different_key() -> HandlerResult<String>;
}

struct NonDeterministicImpl;

// The common tail: sleep, force a replay on the first attempt, then the send that must never happen.
async fn finish(ctx: &ObjectContext<'_>, k: u64) -> HandlerResult<String> {
    ctx.sleep(Duration::from_millis(20)).await?;
    if k == 1 {
        return Err(retryable("force a replay".to_string()));
    }
    ctx.object_client::<CounterClient>(ctx.key()).add(1).send();
    Ok("never".to_string())
}

impl NonDeterministic for NonDeterministicImpl {
    async fn either_sleep_or_call(&self, ctx: ObjectContext<'_>) -> HandlerResult<String> {
        let k = bump(&format!("eitherSleepOrCall:{}", ctx.key()));
        if k == 1 {
            ctx.sleep(Duration::from_millis(10)).await?;
        } else {
            ctx.object_client::<CounterClient>(ctx.key())
                .get()
                .call()
                .await?;
        }
        finish(&ctx, k).await
    }

    async fn call_different_method(&self, ctx: ObjectContext<'_>) -> HandlerResult<String> {
        let k = bump(&format!("callDifferentMethod:{}", ctx.key()));
        if k == 1 {
            ctx.object_client::<CounterClient>(ctx.key())
                .get()
                .call()
                .await?;
        } else {
            ctx.object_client::<CounterClient>(ctx.key())
                .keys()
                .call()
                .await?;
        }
        finish(&ctx, k).await
    }

    async fn send_different_target(&self, ctx: ObjectContext<'_>) -> HandlerResult<String> {
        let k = bump(&format!("sendDifferentTarget:{}", ctx.key()));
        if k == 1 {
            ctx.object_client::<CounterClient>(ctx.key()).get().send();
        } else {
            ctx.object_client::<CounterClient>(ctx.key()).keys().send();
        }
        finish(&ctx, k).await
    }

    async fn set_different_key(&self, ctx: ObjectContext<'_>) -> HandlerResult<String> {
        let k = bump(&format!("setDifferentKey:{}", ctx.key()));
        ctx.set(if k == 1 { "a" } else { "b" }, 1);
        finish(&ctx, k).await
    }
}

// ---- Echo

#[restate_sdk::service]
trait Echo {
    async fn headers() -> HandlerResult<Json<BTreeMap<String, String>>>;
    async fn raw(input: Vec<u8>) -> HandlerResult<Vec<u8>>;
}

struct EchoImpl;

impl Echo for EchoImpl {
    async fn headers(&self, ctx: Context<'_>) -> HandlerResult<Json<BTreeMap<String, String>>> {
        Ok(Json(
            ctx.headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_lowercase(), v.clone()))
                .collect(),
        ))
    }

    async fn raw(&self, _ctx: Context<'_>, input: Vec<u8>) -> HandlerResult<Vec<u8>> {
        Ok(input)
    }
}

// ---- Signup

#[restate_sdk::workflow]
trait Signup {
    async fn run(name: String) -> HandlerResult<String>;
    #[shared]
    async fn approve(value: String) -> HandlerResult<()>;
    #[shared]
    async fn status() -> HandlerResult<Json<Option<String>>>;
}

struct SignupImpl;

impl Signup for SignupImpl {
    async fn run(&self, ctx: WorkflowContext<'_>, name: String) -> HandlerResult<String> {
        let line = format!("{}:create", ctx.key());
        ctx.run(|| async move {
            record(&line);
            Ok(())
        })
        .name("create")
        .await?;
        ctx.set("status", "waiting".to_string());
        let approval = ctx.promise::<String>("approval").await?;
        ctx.set("status", "approved".to_string());
        Ok(format!("{name}:{approval}"))
    }

    async fn approve(&self, ctx: SharedWorkflowContext<'_>, value: String) -> HandlerResult<()> {
        ctx.resolve_promise("approval", value);
        Ok(())
    }

    async fn status(&self, ctx: SharedWorkflowContext<'_>) -> HandlerResult<Json<Option<String>>> {
        Ok(Json(ctx.get::<String>("status").await?))
    }
}

// No Signals service (CONTRACT.md): restate-sdk 0.10 has no named-signal API.
#[tokio::main]
async fn main() {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9080);
    let mut builder = Endpoint::builder()
        .bind(CounterImpl.serve())
        .bind(ListObjectImpl.serve())
        .bind(ProxyImpl.serve())
        .bind(SleeperImpl.serve())
        .bind(AwaiterImpl.serve())
        .bind(AwakeableHolderImpl.serve())
        .bind(FailingImpl.serve())
        .bind(RunnerImpl.serve())
        .bind(NonDeterministicImpl.serve())
        .bind(EchoImpl.serve())
        .bind(SignupImpl.serve());
    if let Ok(key) = std::env::var("IDENTITY_KEY") {
        if !key.is_empty() {
            builder = builder
                .identity_key(&key)
                .expect("IDENTITY_KEY is not a valid publickeyv1_ key");
        }
    }
    HttpServer::new(builder.build())
        .listen_and_serve(([127, 0, 0, 1], port).into())
        .await;
}
