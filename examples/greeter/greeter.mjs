// The seed's reference Greeter service, written with the real Restate TypeScript SDK.
// Run: `make example` (port 9080, or PORT), then register http://localhost:9080 with Keel.
import fs from 'node:fs';
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
  say(`Notification ${greetingId} ${name}`);
}

function sendReminder(greetingId, name) {
  say(`Reminder ${greetingId} ${name}`);
}

// RECORD_FILE: the tests count the steps that ran.
function say(line) {
  console.log(line);
  if (process.env.RECORD_FILE) fs.appendFileSync(process.env.RECORD_FILE, `${line}\n`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.PORT ?? 9080);
  await restate.serve({ services: [greeter], port });
}
