package keel.sdks;

import dev.restate.sdk.ObjectContext;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.VirtualObject;
import dev.restate.sdk.common.StateKey;
import java.time.Duration;

/** Each handler takes another path on its replay; Keel must report the journal mismatch. */
@VirtualObject
public class NonDeterministic {
  private static int attempt(ObjectContext ctx, String handler) {
    return Util.bump(handler + ":" + ctx.key());
  }

  private static String finish(ObjectContext ctx, int k) {
    ctx.sleep(Duration.ofMillis(20));
    if (k == 1) throw new IllegalStateException("force a replay");
    CounterClient.fromContext(ctx, ctx.key()).send().add(1L);
    return "never";
  }

  @Handler
  public String eitherSleepOrCall(ObjectContext ctx) {
    int k = attempt(ctx, "eitherSleepOrCall");
    if (k == 1) ctx.sleep(Duration.ofMillis(10));
    else CounterClient.fromContext(ctx, ctx.key()).get().await();
    return finish(ctx, k);
  }

  @Handler
  public String callDifferentMethod(ObjectContext ctx) {
    int k = attempt(ctx, "callDifferentMethod");
    if (k == 1) CounterClient.fromContext(ctx, ctx.key()).get().await();
    else CounterClient.fromContext(ctx, ctx.key()).keys().await();
    return finish(ctx, k);
  }

  @Handler
  public String sendDifferentTarget(ObjectContext ctx) {
    int k = attempt(ctx, "sendDifferentTarget");
    if (k == 1) CounterClient.fromContext(ctx, ctx.key()).send().get();
    else CounterClient.fromContext(ctx, ctx.key()).send().keys();
    return finish(ctx, k);
  }

  @Handler
  public String setDifferentKey(ObjectContext ctx) {
    int k = attempt(ctx, "setDifferentKey");
    ctx.set(StateKey.of(k == 1 ? "a" : "b", Integer.class), 1);
    return finish(ctx, k);
  }
}
