package keel.sdks;

import dev.restate.sdk.Context;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Service;
import dev.restate.sdk.common.TerminalException;
import java.util.Map;

@Service
public class Failing {
  public record TerminalRequest(String message, Integer code, Map<String, String> metadata) {}

  // metadata is dropped: TerminalException has no metadata before SDK 2.7.0, and Maven
  // Central here serves sdk-java-http up to 2.4.0.
  @Handler
  public void terminal(Context ctx, TerminalRequest req) {
    if (req.code() == null) throw new TerminalException(req.message());
    throw new TerminalException(req.code(), req.message());
  }
}
