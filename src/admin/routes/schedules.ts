// Schedules (Keel's own): `PUT /schedules/{name}` creates or replaces one, `GET /schedules[/{name}]`
// lists or shows them, `DELETE /schedules/{name}` removes one, and `POST /schedules/{name}/pause`,
// `/resume` and `/trigger` pause, resume and fire one at once. A schedule lives in a partition
// (its log decides every firing); each change is durable before the answer.
import type { FastifyInstance } from 'fastify';
import { KeelError, keelError } from '../../errors/index.js';
import { ScheduleAction, type Schedule } from '../../log/commands.js';
import { scheduleTarget, type ScheduleRecord } from '../../storage/tables/schedules.js';
import type { AdminContext } from '../context.js';
import type { IntrospectionSource } from '../introspection.js';
import { checkScheduleName, scheduleSpec, scheduleView } from '../schedules.js';

/** The most schedules a server keeps: GET /schedules answers all of them at once. */
const MAX_SCHEDULES = 10_000;

async function count(source: Pick<IntrospectionSource, 'schedules'>): Promise<number> {
  let n = 0;
  for await (const _ of source.schedules!()) n++;
  return n;
}

function schedulesOf(ctx: AdminContext): Required<Pick<IntrospectionSource, 'schedules' | 'schedule' | 'applySchedule'>> {
  const source = ctx.source();
  if (source.schedules === undefined || source.schedule === undefined || source.applySchedule === undefined) {
    throw new KeelError('KEEL0803', 'this node has no partitions: send schedules to the active node');
  }
  return source as Required<Pick<IntrospectionSource, 'schedules' | 'schedule' | 'applySchedule'>>;
}

export function scheduleRoutes(ctx: AdminContext) {
  const existing = async (name: string): Promise<ScheduleRecord> => {
    checkScheduleName(name);
    const s = await schedulesOf(ctx).schedule(name);
    if (s === undefined) throw keelError('KEEL0004', { what: 'schedule', name });
    return s;
  };
  const apply = async (command: Schedule): Promise<ScheduleRecord | undefined> => {
    const source = schedulesOf(ctx);
    await source.applySchedule(command);
    return source.schedule(command.name ?? '');
  };
  return async (r: FastifyInstance) => {
    r.get('/schedules', async () => {
      const all: ScheduleRecord[] = [];
      for await (const s of schedulesOf(ctx).schedules()) all.push(s);
      all.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      return { schedules: all.map(scheduleView) };
    });
    r.get<{ Params: { name: string } }>('/schedules/:name', async (req) => scheduleView(await existing(req.params.name)));
    r.put<{ Params: { name: string } }>('/schedules/:name', async (req, reply) => {
      const { name } = req.params;
      checkScheduleName(name);
      const spec = scheduleSpec(ctx, req.body);
      const created = (await schedulesOf(ctx).schedule(name)) === undefined;
      if (created && (await count(schedulesOf(ctx))) >= MAX_SCHEDULES) {
        throw new KeelError('KEEL1001', `there are ${MAX_SCHEDULES} schedules already, the most a server keeps: delete one first`);
      }
      const s = await apply({ action: ScheduleAction.SET, name, spec });
      ctx.logger.info({ schedule: name, target: scheduleTarget(s!), created }, created ? 'schedule created' : 'schedule replaced');
      return reply.code(created ? 201 : 200).send(scheduleView(s!));
    });
    r.delete<{ Params: { name: string } }>('/schedules/:name', async (req, reply) => {
      const { name } = await existing(req.params.name);
      await apply({ action: ScheduleAction.DELETE, name });
      ctx.logger.info({ schedule: name }, 'schedule deleted');
      return reply.code(200).send({ name, deleted: true });
    });
    r.post<{ Params: { name: string; action: string } }>('/schedules/:name/:action', async (req) => {
      const action = { pause: ScheduleAction.PAUSE, resume: ScheduleAction.RESUME, trigger: ScheduleAction.TRIGGER }[req.params.action];
      if (action === undefined) throw new KeelError('KEEL0004', `no route for /schedules/${req.params.name}/${req.params.action}: use pause, resume or trigger`);
      const before = await existing(req.params.name);
      const s = (await apply({ action, name: before.name }))!;
      ctx.logger.info({ schedule: before.name }, `schedule ${req.params.action === 'trigger' ? 'triggered' : `${req.params.action}d`}`);
      // A trigger while a firing runs may be skipped or buffered by the overlap policy: say which.
      return action === ScheduleAction.TRIGGER ? { ...scheduleView(s), triggered: s.fired > before.fired } : scheduleView(s);
    });
  };
}
