package keel.sdks;

import com.fasterxml.jackson.databind.JsonNode;
import dev.restate.sdk.ObjectContext;
import dev.restate.sdk.SharedObjectContext;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Raw;
import dev.restate.sdk.annotation.Shared;
import dev.restate.sdk.annotation.VirtualObject;
import dev.restate.sdk.common.StateKey;
import dev.restate.sdk.common.TerminalException;
import java.util.List;

@VirtualObject
public class Counter {
  private static final StateKey<Long> COUNT = StateKey.of("count", Long.class);

  public record SetRequest(String key, JsonNode value) {}

  static long doAdd(ObjectContext ctx, long n) {
    long count = ctx.get(COUNT).orElse(0L) + n;
    ctx.set(COUNT, count);
    return count;
  }

  @Handler
  public long add(ObjectContext ctx, long n) {
    return doAdd(ctx, n);
  }

  @Shared
  public long get(SharedObjectContext ctx) {
    return ctx.get(COUNT).orElse(0L);
  }

  // Values are kept as their JSON bytes, so any JSON round-trips unchanged.
  @Handler
  public void set(ObjectContext ctx, SetRequest req) {
    ctx.set(StateKey.bytes(req.key()), Util.json(req.value()));
  }

  @Shared
  @Raw(contentType = "application/json")
  public byte[] read(SharedObjectContext ctx, String key) {
    return ctx.get(StateKey.bytes(key)).orElse(Util.JSON_NULL);
  }

  @Shared
  public List<String> keys(SharedObjectContext ctx) {
    return ctx.stateKeys().stream().sorted().toList();
  }

  @Handler
  public void clear(ObjectContext ctx, String key) {
    ctx.clear(StateKey.bytes(key));
  }

  @Handler
  public void clearAll(ObjectContext ctx) {
    ctx.clearAll();
  }

  @Handler
  public void addThenFail(ObjectContext ctx, long n) {
    doAdd(ctx, n);
    throw new TerminalException(400, "failed after add " + n);
  }

  @Handler
  public long failThenAdd(ObjectContext ctx, long n) {
    int k = Util.bump("failThenAdd:" + ctx.key());
    if (k < 3) throw new IllegalStateException("retryable " + k);
    return doAdd(ctx, n);
  }
}
