package keel.sdks;

import dev.restate.sdk.Awakeable;
import dev.restate.sdk.Context;
import dev.restate.sdk.DurableFuture;
import dev.restate.sdk.Select;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Service;
import java.time.Duration;

@Service
public class Awaiter {
  public record AwakeableRequest(String key, Long timeoutMs) {}

  public record CallOrTimeoutRequest(long sleepMs, long timeoutMs) {}

  public record AllRequest(String key, long sleepMs) {}

  public record ResolveRequest(String id, String value) {}

  public record RejectRequest(String id, String reason) {}

  private static Awakeable<String> held(Context ctx, String key) {
    Awakeable<String> awakeable = ctx.awakeable(String.class);
    AwakeableHolderClient.fromContext(ctx, key).send().hold(awakeable.id());
    return awakeable;
  }

  @Handler
  public String awakeable(Context ctx, AwakeableRequest req) {
    Awakeable<String> awakeable = held(ctx, req.key());
    if (req.timeoutMs() == null) return awakeable.await();
    return Select.<String>select()
        .or(awakeable)
        .when(ctx.timer(Duration.ofMillis(req.timeoutMs())), v -> "timeout")
        .await();
  }

  @Handler
  public String callOrTimeout(Context ctx, CallOrTimeoutRequest req) {
    return Select.<String>select()
        .when(
            SleeperClient.fromContext(ctx).sleep(new Sleeper.SleepRequest(req.sleepMs(), null)),
            v -> "call")
        .when(ctx.timer(Duration.ofMillis(req.timeoutMs())), v -> "timeout")
        .await();
  }

  @Handler
  public String all(Context ctx, AllRequest req) {
    Awakeable<String> awakeable = held(ctx, req.key());
    DurableFuture<Long> add = CounterClient.fromContext(ctx, req.key()).add(1L);
    DurableFuture<Void> sleep = ctx.timer(Duration.ofMillis(req.sleepMs()));
    DurableFuture.all(awakeable, add, sleep).await();
    return awakeable.await() + "|" + add.await();
  }

  @Handler
  public void resolve(Context ctx, ResolveRequest req) {
    ctx.awakeableHandle(req.id()).resolve(String.class, req.value());
  }

  @Handler
  public void reject(Context ctx, RejectRequest req) {
    ctx.awakeableHandle(req.id()).reject(req.reason());
  }
}
