// What every reader of a shared partition log keeps (src/log/epochs.ts): the same rules for the
// leader's catch-up, a follower and a rebuild, so they all fold the same commands.
import t from 'tap';
import { judge, CorruptLogError } from '../dist/log/epochs.js';

const announce = (epoch, node = 'n') => ({ kind: 'announce', epoch, node });
const command = (epoch, position) => ({ kind: 'command', epoch, position });

t.test('commands of the epoch announced last are kept in position order; older epochs are dropped', async (t) => {
  const state = { epoch: 0, position: 0 };
  const verdicts = [announce(1), command(1, 1), command(1, 2), announce(2), command(1, 3), command(2, 3), command(2, 3), command(2, 2), announce(2, 'late'), announce(1), command(2, 4)].map((e) => judge(state, e));
  t.same(verdicts, ['announced', 'keep', 'keep', 'announced', 'deposed', 'keep', 'duplicate', 'duplicate', 'stale_announcement', 'stale_announcement', 'keep']);
  t.same(state, { epoch: 2, position: 4 });
});

t.test('a deposed leader wrote before the announcement: its commands are history the next epoch continues', async (t) => {
  const state = { epoch: 0, position: 0 };
  for (const e of [announce(1), command(1, 1), command(1, 2), announce(2)]) judge(state, e);
  t.equal(judge(state, command(2, 3)), 'keep', 'epoch 2 goes on at 3');
});

t.test('what no writer following the rules produces is a corrupt log, said so', async (t) => {
  t.throws(() => judge({ epoch: 1, position: 5 }, command(2, 6)), CorruptLogError, 'a command of an epoch never announced');
  t.throws(() => judge({ epoch: 1, position: 5 }, command(1, 7)), CorruptLogError, 'a gap in the positions');
  t.throws(() => judge({ epoch: 1, position: 5 }, command(Number.NaN, 6)), /epoch/, 'a record without an epoch');
});
