// The seed's Greeter on the Restate Rust SDK: a durable run step, a durable sleep, another run step.
use restate_sdk::prelude::*;
use std::io::Write;
use std::time::Duration;

fn notify(line: String) {
    println!("{line}");
    if let Ok(path) = std::env::var("RECORD_FILE") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

struct Greeter;

#[restate_sdk::service]
impl Greeter {
    #[handler]
    async fn greet(&self, mut ctx: Context<'_>, name: String) -> HandlerResult<String> {
        // Derived from the invocation's seed, so a replay sees the same id.
        let id = ctx.rand_uuid();
        let line = format!("Notification {id} {name}");
        ctx.run(|| async move {
            notify(line);
            Ok(())
        })
        .name("Notification")
        .await?;
        ctx.sleep(Duration::from_secs(1)).await?;
        let line = format!("Reminder {id} {name}");
        ctx.run(|| async move {
            notify(line);
            Ok(())
        })
        .name("Reminder")
        .await?;
        Ok(format!("You said hi to {name}!"))
    }
}

#[tokio::main]
async fn main() {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9080);
    HttpServer::new(Endpoint::builder().bind(Greeter).build())
        .listen_and_serve(([0, 0, 0, 0], port).into())
        .await;
}
