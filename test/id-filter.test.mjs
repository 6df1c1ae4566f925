// The query engine's filter of the ids its copy's older rows may hold: never a false "no" (a status
// would then be in the copy twice), and about 1% false "maybe" at its capacity.
import t from 'tap';
import { IdFilter } from '../dist/admin/query/id-filter.js';
import { InvocationId, randomPartitionKey } from '../dist/common/ids.js';

const ids = (n) => Array.from({ length: n }, () => InvocationId.random(randomPartitionKey()).text);

t.test('every id added is "maybe"; about 1% of others are', async (t) => {
  for (const capacity of [1, 1024, 50_000]) {
    const filter = new IdFilter(capacity);
    const added = ids(Math.max(1024, capacity));
    for (const id of added) filter.add(id);
    t.equal(added.filter((id) => !filter.mayHave(id)).length, 0, `no false "no" (capacity ${capacity})`);
    t.equal(filter.added, added.length);
    const others = ids(20_000);
    const maybe = others.filter((id) => filter.mayHave(id)).length;
    t.ok(maybe < 20_000 * 0.02, `${maybe} of 20,000 other ids "maybe" (capacity ${capacity})`);
  }
});

t.test('an empty filter says "no" to everything; a bad capacity is refused', async (t) => {
  const filter = new IdFilter(10);
  t.equal(ids(1000).filter((id) => filter.mayHave(id)).length, 0);
  t.throws(() => new IdFilter(0));
  t.throws(() => new IdFilter(1.5));
});
