package keel.sdks;

import com.fasterxml.jackson.databind.JsonNode;
import dev.restate.common.Request;
import dev.restate.common.RequestBuilder;
import dev.restate.common.Target;
import dev.restate.sdk.Context;
import dev.restate.sdk.DurableFuture;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Raw;
import dev.restate.sdk.annotation.Service;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

@Service
public class Proxy {
  public record ProxyRequest(
      String service,
      String key,
      String handler,
      JsonNode input,
      Long delayMs,
      String idempotencyKey) {

    RequestBuilder<byte[], byte[]> toRequest() {
      Target target =
          key == null
              ? Target.service(service, handler)
              : Target.virtualObject(service, key, handler);
      byte[] body = input == null ? new byte[0] : Util.json(input);
      RequestBuilder<byte[], byte[]> req = Request.of(target, body);
      if (idempotencyKey != null) req.idempotencyKey(idempotencyKey);
      return req;
    }
  }

  public record ManyCall(ProxyRequest req, boolean oneWay) {}

  @Handler
  @Raw(contentType = "application/json")
  public byte[] call(Context ctx, ProxyRequest req) {
    return ctx.call(req.toRequest()).await();
  }

  @Handler
  public void send(Context ctx, ProxyRequest req) {
    ctx.send(req.toRequest(), req.delayMs() == null ? null : Duration.ofMillis(req.delayMs()));
  }

  @Handler
  public void manyCalls(Context ctx, List<ManyCall> calls) {
    List<DurableFuture<?>> pending = new ArrayList<>();
    for (ManyCall c : calls) {
      if (c.oneWay()) ctx.send(c.req().toRequest());
      else pending.add(ctx.call(c.req().toRequest()));
    }
    if (!pending.isEmpty()) DurableFuture.all(pending).await();
  }

  @Handler
  public void cancel(Context ctx, String invocationId) {
    ctx.invocationHandle(invocationId).cancel();
  }
}
