package keel.sdks;

import dev.restate.sdk.ObjectContext;
import dev.restate.sdk.SharedObjectContext;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Shared;
import dev.restate.sdk.annotation.VirtualObject;
import dev.restate.sdk.common.StateKey;

@VirtualObject
public class AwakeableHolder {
  private static final StateKey<String> ID = StateKey.of("id", String.class);

  @Handler
  public void hold(ObjectContext ctx, String id) {
    ctx.set(ID, id);
  }

  @Shared
  public String get(SharedObjectContext ctx) {
    return ctx.get(ID).orElse(null);
  }
}
