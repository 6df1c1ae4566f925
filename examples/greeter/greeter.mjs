// The seed's reference Greeter service, written with the real Restate TypeScript SDK.
// Run: `make example` (port 9080, or PORT), then register http://localhost:9080 with Keel.
import * as restate from '@restatedev/restate-sdk';

export const greeter = restate.service({
  name: 'Greeter',
  handlers: {
    greet: async (ctx, req) => {
      const greetingId = ctx.rand.uuidv4();
      await ctx.run('Notification', () => sendNotification(greetingId, req.name));
      await ctx.sleep({ seconds: 1 });
      await ctx.run('Reminder', () => sendReminder(greetingId, req.name));
      return { result: `You said hi to ${req.name}!` };
    },
  },
});

function sendNotification(greetingId, name) {
  console.log(`Notification ${greetingId} sent to ${name}`);
}

function sendReminder(greetingId, name) {
  console.log(`Reminder ${greetingId} sent to ${name}`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.PORT ?? 9080);
  await restate.serve({ services: [greeter], port });
}
