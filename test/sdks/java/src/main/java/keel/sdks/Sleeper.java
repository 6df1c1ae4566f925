package keel.sdks;

import com.fasterxml.jackson.annotation.JsonInclude;
import dev.restate.sdk.Context;
import dev.restate.sdk.DurableFuture;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Service;
import java.time.Duration;
import java.util.List;

@Service
public class Sleeper {
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record SleepRequest(long ms, String tag) {}

  @Handler
  public void sleep(Context ctx, SleepRequest req) {
    String tag = req.tag();
    if (tag != null) ctx.run("before", () -> Util.record(tag + ":before"));
    ctx.sleep(Duration.ofMillis(req.ms()));
    if (tag != null) ctx.run("after", () -> Util.record(tag + ":after"));
  }

  @Handler
  public void sleepMany(Context ctx, List<Long> durations) {
    List<DurableFuture<?>> timers =
        durations.stream().<DurableFuture<?>>map(ms -> ctx.timer(Duration.ofMillis(ms))).toList();
    // all() rejects an empty list.
    if (!timers.isEmpty()) DurableFuture.all(timers).await();
  }
}
