// The part of sql.js (SQLite compiled to WebAssembly) that the /query engine uses.
declare module 'sql.js' {
  export type SqlValue = number | string | Uint8Array | null;
  export interface Statement {
    bind(values?: SqlValue[]): boolean;
    step(): boolean;
    get(): SqlValue[];
    getColumnNames(): string[];
    run(values?: SqlValue[]): void;
    reset(): void;
    free(): boolean;
  }
  export interface Database {
    run(sql: string, params?: SqlValue[]): Database;
    exec(sql: string): Array<{ columns: string[]; values: SqlValue[][] }>;
    prepare(sql: string): Statement;
    create_function(name: string, fn: (...args: SqlValue[]) => SqlValue): Database;
    create_aggregate(
      name: string,
      fns: { init?: () => unknown; step: (state: any, ...args: SqlValue[]) => unknown; finalize: (state: any) => SqlValue },
    ): Database;
    close(): void;
  }
  export interface SqlJsStatic {
    Database: new (data?: Uint8Array) => Database;
  }
  export default function initSqlJs(config?: { locateFile?: (file: string) => string }): Promise<SqlJsStatic>;
}
