package keel.sdks;

import dev.restate.sdk.Context;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Service;
import dev.restate.sdk.common.RetryPolicy;
import dev.restate.sdk.common.TerminalException;
import java.time.Duration;

@Service
public class Runner {
  public record RetryRequest(String tag, int failures) {}

  public record ExhaustedRequest(String tag, int maxAttempts) {}

  public record TerminalRequest(String tag) {}

  private static RetryPolicy policy(int maxAttempts) {
    return RetryPolicy.exponential(Duration.ofMillis(10), 2).setMaxAttempts(maxAttempts);
  }

  @Handler
  public int retry(Context ctx, RetryRequest req) {
    String tag = req.tag();
    int result =
        ctx.run(
            "flaky",
            Integer.class,
            policy(req.failures() + 3),
            () -> {
              Util.record(tag + ":run");
              int k = Util.bump("run:" + tag);
              if (k <= req.failures()) throw new IllegalStateException("flaky " + k);
              return k;
            });
    if (Util.bump("handler:" + tag) == 1) {
      throw new IllegalStateException("retry after the run: the replay must not rerun its body");
    }
    return result;
  }

  @Handler
  public void exhausted(Context ctx, ExhaustedRequest req) {
    ctx.run(
        "always",
        policy(req.maxAttempts()),
        () -> {
          Util.record(req.tag() + ":run");
          throw new IllegalStateException("always fails");
        });
  }

  @Handler
  public void terminal(Context ctx, TerminalRequest req) {
    ctx.run(
        "terminal",
        () -> {
          Util.record(req.tag() + ":run");
          throw new TerminalException(409, "terminal in run");
        });
  }

  @Handler
  public int countRuns(Context ctx, int n) {
    int[] count = {0};
    for (int i = 0; i < n; i++) ctx.run("inc " + i, () -> count[0]++);
    return count[0];
  }
}
