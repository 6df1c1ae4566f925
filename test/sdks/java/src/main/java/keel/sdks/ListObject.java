package keel.sdks;

import dev.restate.sdk.ObjectContext;
import dev.restate.sdk.SharedObjectContext;
import dev.restate.sdk.annotation.Handler;
import dev.restate.sdk.annotation.Shared;
import dev.restate.sdk.annotation.VirtualObject;
import dev.restate.sdk.common.StateKey;
import dev.restate.serde.TypeRef;
import java.util.ArrayList;
import java.util.List;

@VirtualObject
public class ListObject {
  private static final StateKey<List<String>> LIST =
      StateKey.of("list", new TypeRef<List<String>>() {});

  @Handler
  public List<String> append(ObjectContext ctx, String value) {
    List<String> list = new ArrayList<>(ctx.get(LIST).orElse(List.of()));
    list.add(value);
    ctx.set(LIST, list);
    return list;
  }

  @Shared
  public List<String> get(SharedObjectContext ctx) {
    return ctx.get(LIST).orElse(List.of());
  }
}
