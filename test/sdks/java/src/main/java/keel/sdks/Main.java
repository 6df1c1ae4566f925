package keel.sdks;

import dev.restate.sdk.auth.signing.RestateRequestIdentityVerifier;
import dev.restate.sdk.endpoint.Endpoint;
import dev.restate.sdk.http.vertx.RestateHttpServer;

/**
 * One endpoint serving every service of test/sdks/CONTRACT.md but Signals: sdk-java 2.4.0 has no
 * named-signal API.
 */
public class Main {
  public static void main(String[] args) {
    Endpoint.Builder endpoint =
        Endpoint.builder()
            .bind(new Counter())
            .bind(new ListObject())
            .bind(new Proxy())
            .bind(new Sleeper())
            .bind(new Awaiter())
            .bind(new AwakeableHolder())
            .bind(new Failing())
            .bind(new Runner())
            .bind(new NonDeterministic())
            .bind(new Echo())
            .bind(new Signup());
    String identityKey = System.getenv("IDENTITY_KEY");
    if (identityKey != null && !identityKey.isEmpty()) {
      endpoint.withRequestIdentityVerifier(RestateRequestIdentityVerifier.fromKey(identityKey));
    }
    int port = Integer.parseInt(System.getenv().getOrDefault("PORT", "9080"));
    // The SDK's listen(port) binds every interface; the contract wants loopback only.
    RestateHttpServer.fromEndpoint(endpoint.build())
        .listen(port, "127.0.0.1")
        .toCompletionStage()
        .toCompletableFuture()
        .join();
    System.out.println("listening on 127.0.0.1:" + port);
  }
}
