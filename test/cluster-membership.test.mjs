// Which member of the cluster's group leads which partitions (src/log/kafka-membership.ts).
import t from 'tap';
import { assignMembers, assignPartitions, laterTwins } from '../dist/log/kafka-membership.js';

/** A member: its id, node name and the partitions it claims (partition → epoch held). */
const m = (memberId, node, claims = {}) => ({ memberId, data: { node, ingress: '', admin: '', claims } });
const all = (n) => Array.from({ length: n }, (_, p) => p);
const shares = (assigned) => Object.fromEntries([...assigned].map(([id, ps]) => [id, ps]));

t.test('one node leads every partition: the one leading or taking over, then the highest epoch, then the first name', async (t) => {
  const one = (members) => [...assignPartitions(members, 4, false)].filter(([, ps]) => ps.length > 0).map(([id, ps]) => [id, ps]);
  t.same(one([m('1', 'a'), m('2', 'b')]), [['1', all(4)]], 'nobody leads yet: the first name');
  t.same(one([m('1', 'a'), m('2', 'b', { 0: 3, 1: 3, 2: 3, 3: 3 })]), [['2', all(4)]], 'a node joining does not move the work');
  t.same(one([m('1', 'a'), m('2', 'b', { 0: 0, 1: 0 })]), [['2', all(4)]], 'a node restarting does not take it from one still taking over');
  t.same(one([m('1', 'a', { 0: 2 }), m('2', 'b', { 0: 3 })]), [['2', all(4)]], 'a deposed node coming back (older epoch) does not win it back');
  t.same(one([m('1', 'b'), m('2', 'a')]), [['2', all(4)]], 'ties go to the first name, not the first member id');
  t.same(assignPartitions([], 4, false), new Map());
});

t.test('spread: the partitions are shared out evenly, and stay where they are led', async (t) => {
  const three = assignPartitions([m('1', 'a'), m('2', 'b'), m('3', 'c')], 8, true);
  t.same(shares(three), { 1: [0, 1, 2], 2: [3, 4, 5], 3: [6, 7] }, 'a fresh cluster: in order, the first names get one more');
  t.same([...three.values()].flat().sort((a, b) => a - b), all(8), 'every partition once');

  // b leads 3-5 and c 6-7; a restarts (claims nothing): it gets back an even share, from the pool of unled ones.
  const back = assignPartitions([m('1', 'a'), m('2', 'b', { 3: 1, 4: 1, 5: 1 }), m('3', 'c', { 6: 1, 7: 1, 0: 2, 1: 2, 2: 2 })], 8, true);
  t.same(back.get('2'), [3, 4, 5], 'b keeps what it leads');
  t.same(back.get('1'), [6, 7], 'a gets an even share, from the member that had more than its share (c)');
  t.same(back.get('3'), [0, 1, 2], 'c keeps three of the five it led');

  const joined = assignPartitions([m('1', 'a', { 0: 1, 1: 1, 2: 1, 3: 1 }), m('2', 'b', { 4: 1, 5: 1, 6: 1, 7: 1 }), m('3', 'c')], 8, true);
  const moved = [...joined.get('3')];
  t.equal(moved.length, 2, 'a node joining takes only what evens the load out');
  t.equal(joined.get('1').length + joined.get('2').length, 6);
  t.ok(joined.get('1').every((p) => p <= 3) && joined.get('2').every((p) => p >= 4), 'nothing else moves');

  const left = assignPartitions([m('1', 'a', { 0: 1, 1: 1, 2: 1 }), m('3', 'c', { 6: 1, 7: 1 })], 8, true);
  t.same(left.get('1').slice(0, 3), [0, 1, 2], 'a node leaving: the others keep theirs');
  t.same([...left.values()].flat().sort((a, b) => a - b), all(8), 'and share out its partitions');
  t.ok(Math.abs(left.get('1').length - left.get('3').length) <= 1, 'evenly');

  const contested = assignPartitions([m('1', 'a', { 0: 4 }), m('2', 'b', { 0: 5 })], 2, true);
  t.same(shares(contested), { 1: [1], 2: [0] }, 'two claims of one partition: the later epoch keeps it');
  t.same(shares(assignPartitions([m('1', 'a'), m('2', 'b'), m('3', 'c')], 2, true)), { 1: [0], 2: [1], 3: [] }, 'more nodes than partitions: some stand by');
});

t.test('two nodes under one name: the one that started later is told apart, by every member alike', async (t) => {
  const at = (memberId, node, ingress, started_at_ms) => ({ memberId, data: { node, ingress, admin: `${ingress}-admin`, claims: {}, started_at_ms } });
  t.same([...laterTwins([at('m1', 'a', 'x', 200), at('m2', 'a', 'y', 100), at('m3', 'b', 'z', 50)])], ['m1'], 'the later start of the name');
  t.same([...laterTwins([at('m2', 'a', 'y', 100), at('m1', 'a', 'x', 100)])], ['m2'], 'started in the same ms: the larger member id, in any order of the members');
  t.same([...laterTwins([at('m1', 'a', 'x', 100), at('m2', 'a', 'x', 200)])], [], 'at the same addresses it is a killed run of the same node, not a twin');
  t.same([...laterTwins([at('m1', 'a', 'x', 100), at('m2', 'a', 'y', 200), at('m3', 'a', 'z', 300)])], ['m2', 'm3'], 'three under one name: all but the first');
  t.same([...laterTwins([at('m1', 'a', 'x', undefined), at('m2', 'a', 'y', 5)])], ['m2'], 'a node of before the start time was sent counts as started first');
  // The later twin leads nothing, though it claims every partition with the highest epoch.
  const claiming = { ...at('m2', 'a', 'y', 200), data: { ...at('m2', 'a', 'y', 200).data, claims: { 0: 9, 1: 9 } } };
  for (const spread of [false, true]) {
    const assigned = assignMembers([at('m1', 'a', 'x', 100), claiming], 2, spread);
    t.same([assigned.get('m1'), assigned.get('m2')], [[0, 1], undefined], `the later twin gets no partitions (spread: ${spread})`);
  }
});
