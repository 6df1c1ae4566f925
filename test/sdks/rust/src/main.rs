// Keel's cross-SDK test services (test/sdks/CONTRACT.md) on the Restate Rust SDK.
use bytes::Bytes;
use restate_sdk::context::{DurableFuture, RequestTarget};
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

struct Counter;

#[restate_sdk::object]
impl Counter {
    #[handler]
    async fn add(&self, ctx: ObjectContext<'_>, n: i64) -> HandlerResult<i64> {
        let count = ctx.get::<i64>("count").await?.unwrap_or(0) + n;
        ctx.set("count", count);
        Ok(count)
    }

    #[handler]
    async fn get(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<i64> {
        Ok(ctx.get::<i64>("count").await?.unwrap_or(0))
    }

    #[handler]
    async fn set(&self, ctx: ObjectContext<'_>, kv: Json<SetReq>) -> HandlerResult<()> {
        let SetReq { key, value } = kv.into_inner();
        ctx.set(&key, Json(value));
        Ok(())
    }

    #[handler]
    async fn read(&self, ctx: SharedObjectContext<'_>, key: String) -> HandlerResult<Json<Value>> {
        Ok(Json(
            ctx.get::<Json<Value>>(&key)
                .await?
                .map(Json::into_inner)
                .unwrap_or(Value::Null),
        ))
    }

    #[handler]
    async fn keys(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Vec<String>>> {
        let mut keys = ctx.get_keys().await?;
        keys.sort();
        Ok(Json(keys))
    }

    #[handler]
    async fn clear(&self, ctx: ObjectContext<'_>, key: String) -> HandlerResult<()> {
        ctx.clear(&key);
        Ok(())
    }

    #[handler(name = "clearAll")]
    async fn clear_all(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        ctx.clear_all();
        Ok(())
    }

    #[handler(name = "addThenFail")]
    async fn add_then_fail(&self, ctx: ObjectContext<'_>, n: i64) -> HandlerResult<()> {
        let count = ctx.get::<i64>("count").await?.unwrap_or(0) + n;
        ctx.set("count", count);
        Err(TerminalError::new_with_code(400, format!("failed after add {n}")).into())
    }

    #[handler(name = "failThenAdd")]
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

#[derive(serde::Deserialize)]
struct SetReq {
    key: String,
    value: Value,
}

// ---- ListObject

struct ListObject;

#[restate_sdk::object]
impl ListObject {
    #[handler]
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

    #[handler]
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

struct Proxy;

#[restate_sdk::service]
impl Proxy {
    #[handler]
    async fn call(&self, ctx: Context<'_>, req: Json<ProxyReq>) -> HandlerResult<RawJson> {
        Ok(request(&ctx, req.into_inner()).call().await?)
    }

    #[handler]
    async fn send(&self, ctx: Context<'_>, req: Json<ProxyReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        let delay = req.delay_ms.map(Duration::from_millis);
        let r = request(&ctx, req);
        match delay {
            Some(d) => r.send_after(d),
            None => r.send(),
        };
        Ok(())
    }

    #[handler(name = "manyCalls")]
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

    #[handler]
    async fn cancel(&self, ctx: Context<'_>, id: String) -> HandlerResult<()> {
        ctx.invocation_handle(id).cancel();
        Ok(())
    }
}

// ---- Sleeper

#[derive(serde::Serialize, serde::Deserialize)]
struct SleepReq {
    ms: u64,
    tag: Option<String>,
}

struct Sleeper;

#[restate_sdk::service]
impl Sleeper {
    #[handler]
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

    #[handler(name = "sleepMany")]
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

struct Awaiter;

type StringFuture<'a> =
    std::pin::Pin<Box<dyn DurableFuture<Output = Result<String, TerminalError>> + Send + 'a>>;

#[restate_sdk::service]
impl Awaiter {
    #[handler]
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

    #[handler(name = "callOrTimeout")]
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

    #[handler]
    async fn all(&self, ctx: Context<'_>, req: Json<AllReq>) -> HandlerResult<String> {
        let AllReq { key, sleep_ms } = req.into_inner();
        let (id, awk) = ctx.awakeable::<String>();
        ctx.object_client::<AwakeableHolderClient>(key.clone())
            .hold(id)
            .send();
        let add = ctx.object_client::<CounterClient>(key).add(1).call();
        let sleep = ctx.sleep(Duration::from_millis(sleep_ms));
        // Boxed to one future type, so one collection awaits all three together.
        let all: [StringFuture; 3] = [
            Box::pin(awk),
            Box::pin(add.map_ok(|n| n.to_string())),
            Box::pin(sleep.map_ok(|_| String::new())),
        ];
        let mut all: DurableFuturesUnordered<_> = all.into_iter().collect();
        let mut out = [String::new(), String::new()];
        while let Some((i, res)) = all.next().await? {
            let v = res?;
            if i < 2 {
                out[i] = v;
            }
        }
        Ok(format!("{}|{}", out[0], out[1]))
    }

    #[handler]
    async fn resolve(&self, ctx: Context<'_>, req: Json<ResolveReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        ctx.resolve_awakeable(&req.id, req.value);
        Ok(())
    }

    #[handler]
    async fn reject(&self, ctx: Context<'_>, req: Json<RejectReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        ctx.reject_awakeable(&req.id, TerminalError::new(req.reason));
        Ok(())
    }
}

// ---- AwakeableHolder

struct AwakeableHolder;

#[restate_sdk::object]
impl AwakeableHolder {
    #[handler]
    async fn hold(&self, ctx: ObjectContext<'_>, id: String) -> HandlerResult<()> {
        ctx.set("id", id);
        Ok(())
    }

    #[handler]
    async fn get(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Option<String>>> {
        Ok(Json(ctx.get::<String>("id").await?))
    }
}

// ---- Signals

#[derive(serde::Deserialize)]
struct SignalWaitReq {
    name: String,
}

#[derive(serde::Deserialize)]
struct SignalSendReq {
    id: String,
    name: String,
    value: String,
}

#[derive(serde::Deserialize)]
struct SignalRejectReq {
    id: String,
    name: String,
    reason: String,
}

struct Signals;

#[restate_sdk::service]
impl Signals {
    #[handler]
    async fn wait(&self, ctx: Context<'_>, req: Json<SignalWaitReq>) -> HandlerResult<String> {
        Ok(ctx.signal::<String>(&req.into_inner().name).await?)
    }

    #[handler]
    async fn send(&self, ctx: Context<'_>, req: Json<SignalSendReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        ctx.invocation_handle(req.id)
            .signal(req.name)
            .resolve(req.value);
        Ok(())
    }

    #[handler]
    async fn reject(&self, ctx: Context<'_>, req: Json<SignalRejectReq>) -> HandlerResult<()> {
        let req = req.into_inner();
        ctx.invocation_handle(req.id)
            .signal(req.name)
            .reject(TerminalError::new(req.reason));
        Ok(())
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

struct Failing;

#[restate_sdk::service]
impl Failing {
    #[handler]
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

struct Runner;

#[restate_sdk::service]
impl Runner {
    #[handler]
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

    #[handler]
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

    #[handler]
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

    #[handler(name = "countRuns")]
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

struct NonDeterministic;

impl NonDeterministic {
    // The common tail: sleep, force a replay on the first attempt, then the send that must never happen.
    async fn finish(ctx: &ObjectContext<'_>, k: u64) -> HandlerResult<String> {
        ctx.sleep(Duration::from_millis(20)).await?;
        if k == 1 {
            return Err(retryable("force a replay".to_string()));
        }
        ctx.object_client::<CounterClient>(ctx.key()).add(1).send();
        Ok("never".to_string())
    }
}

#[restate_sdk::object]
impl NonDeterministic {
    #[handler(name = "eitherSleepOrCall")]
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
        Self::finish(&ctx, k).await
    }

    #[handler(name = "callDifferentMethod")]
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
        Self::finish(&ctx, k).await
    }

    #[handler(name = "sendDifferentTarget")]
    async fn send_different_target(&self, ctx: ObjectContext<'_>) -> HandlerResult<String> {
        let k = bump(&format!("sendDifferentTarget:{}", ctx.key()));
        if k == 1 {
            ctx.object_client::<CounterClient>(ctx.key()).get().send();
        } else {
            ctx.object_client::<CounterClient>(ctx.key()).keys().send();
        }
        Self::finish(&ctx, k).await
    }

    #[handler(name = "setDifferentKey")]
    async fn set_different_key(&self, ctx: ObjectContext<'_>) -> HandlerResult<String> {
        let k = bump(&format!("setDifferentKey:{}", ctx.key()));
        ctx.set(if k == 1 { "a" } else { "b" }, 1);
        Self::finish(&ctx, k).await
    }
}

// ---- Echo

struct Echo;

#[restate_sdk::service]
impl Echo {
    #[handler]
    async fn headers(&self, ctx: Context<'_>) -> HandlerResult<Json<BTreeMap<String, String>>> {
        Ok(Json(
            ctx.headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_lowercase(), v.clone()))
                .collect(),
        ))
    }

    #[handler]
    async fn raw(&self, _ctx: Context<'_>, input: Vec<u8>) -> HandlerResult<Vec<u8>> {
        Ok(input)
    }
}

// ---- Signup

struct Signup;

#[restate_sdk::workflow]
impl Signup {
    #[handler]
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

    #[handler]
    async fn approve(&self, ctx: SharedWorkflowContext<'_>, value: String) -> HandlerResult<()> {
        ctx.resolve_promise("approval", value);
        Ok(())
    }

    #[handler]
    async fn status(&self, ctx: SharedWorkflowContext<'_>) -> HandlerResult<Json<Option<String>>> {
        Ok(Json(ctx.get::<String>("status").await?))
    }
}

#[tokio::main]
async fn main() {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9080);
    let mut builder = Endpoint::builder()
        .bind(Counter)
        .bind(ListObject)
        .bind(Proxy)
        .bind(Sleeper)
        .bind(Awaiter)
        .bind(AwakeableHolder)
        .bind(Signals)
        .bind(Failing)
        .bind(Runner)
        .bind(NonDeterministic)
        .bind(Echo)
        .bind(Signup);
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
