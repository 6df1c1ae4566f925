// Table `limits`: the rule book a partition folds with (one JSON value), as the last LimitRules
// command of its log gave it; admission decides from it, so a rebuild decides the same.
import type { RuleBook } from '../../common/limit-rules.js';
import { EMPTY_RULE_BOOK } from '../../common/limit-rules.js';
import type { Db } from '../store.js';
import { statePrefix } from '../keys.js';

export const limitsTable = {
  key: (partition: number): string => `${statePrefix(partition)}limits`,
  encode: (book: RuleBook): Buffer => Buffer.from(JSON.stringify(book)),

  async read(db: Db, partition: number): Promise<RuleBook> {
    const raw = await db.get(limitsTable.key(partition));
    return raw === undefined ? EMPTY_RULE_BOOK : (JSON.parse(raw.toString('utf8')) as RuleBook);
  },
};
