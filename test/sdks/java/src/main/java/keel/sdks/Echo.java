package keel.sdks;

import dev.restate.sdk.Context;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Raw;
import dev.restate.sdk.annotation.Service;
import java.util.Map;
import java.util.TreeMap;

@Service
public class Echo {
  @Handler
  public Map<String, String> headers(Context ctx) {
    Map<String, String> out = new TreeMap<>();
    ctx.request().headers().forEach((k, v) -> out.put(k.toLowerCase(), v));
    return out;
  }

  @Handler
  @Raw
  public byte[] raw(Context ctx, @Raw byte[] input) {
    return input;
  }
}
