// Which member of the cluster's group is chosen active (src/log/kafka-membership.ts).
import t from 'tap';
import { chooseActive } from '../dist/log/kafka-membership.js';

const m = (memberId, node, epoch, active) => ({ memberId, data: { node, ingress: '', admin: '', epoch, active } });

t.test('the active node, or the one taking over, keeps the work; then the highest epoch; then the first name', async (t) => {
  t.equal(chooseActive([m('1', 'a', 0, false), m('2', 'b', 0, false)]), '1', 'nobody leads yet: the first name');
  t.equal(chooseActive([m('1', 'a', 0, false), m('2', 'b', 3, true)]), '2', 'a node joining does not move the work');
  t.equal(chooseActive([m('1', 'a', 0, false), m('2', 'b', 0, true)]), '2', 'a node restarting does not take it from one still taking over');
  t.equal(chooseActive([m('1', 'a', 2, true), m('2', 'b', 3, true)]), '2', 'a deposed node coming back (older epoch) does not win it back');
  t.equal(chooseActive([]), undefined);
});
