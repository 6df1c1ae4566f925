// The seed's Greeter service, written with the Restate Java SDK.
// Run: ./run.sh (port 9080, or PORT), then register http://localhost:9080 with Keel.
package greeter;

import dev.restate.sdk.Context;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Service;
import dev.restate.sdk.endpoint.Endpoint;
import dev.restate.sdk.http.vertx.RestateHttpServer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;

@Service
public class Greeter {
  public record Greeting(String name) {}

  public record GreetingResponse(String result) {}

  @Handler
  public GreetingResponse greet(Context ctx, Greeting req) {
    // The UUID comes from the context so a replay sees the same one.
    String greetingId = ctx.random().nextUUID().toString();
    ctx.run("Notification", () -> notify("Notification " + greetingId + " " + req.name()));
    ctx.sleep(Duration.ofSeconds(1));
    ctx.run("Reminder", () -> notify("Reminder " + greetingId + " " + req.name()));
    return new GreetingResponse("You said hi to " + req.name() + "!");
  }

  /** Prints the line and appends it to RECORD_FILE when set. */
  private static void notify(String line) {
    System.out.println(line);
    String file = System.getenv("RECORD_FILE");
    if (file == null || file.isEmpty()) return;
    try {
      Files.write(
          Path.of(file),
          (line + "\n").getBytes(StandardCharsets.UTF_8),
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  public static void main(String[] args) {
    // Listens on $PORT, or 9080.
    RestateHttpServer.listen(Endpoint.bind(new Greeter()));
  }
}
