package keel.sdks;

import dev.restate.sdk.SharedWorkflowContext;
import dev.restate.sdk.WorkflowContext;
import dev.restate.sdk.annotation.Shared;
import dev.restate.sdk.annotation.Workflow;
import dev.restate.sdk.common.DurablePromiseKey;
import dev.restate.sdk.common.StateKey;

@Workflow
public class Signup {
  private static final StateKey<String> STATUS = StateKey.of("status", String.class);
  private static final DurablePromiseKey<String> APPROVAL =
      DurablePromiseKey.of("approval", String.class);

  @Workflow
  public String run(WorkflowContext ctx, String name) {
    String id = ctx.key();
    ctx.run("create", () -> Util.record(id + ":create"));
    ctx.set(STATUS, "waiting");
    String approval = ctx.promise(APPROVAL).future().await();
    ctx.set(STATUS, "approved");
    return name + ":" + approval;
  }

  @Shared
  public void approve(SharedWorkflowContext ctx, String value) {
    ctx.promiseHandle(APPROVAL).resolve(value);
  }

  @Shared
  public String status(SharedWorkflowContext ctx) {
    return ctx.get(STATUS).orElse(null);
  }
}
