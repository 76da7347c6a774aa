import type { HandlerExecutionContext } from '@smithy/types';
import type { AwsClients } from '../../shared/aws/clients.js';
import type { FilterPattern } from '../../shared/base/topology.js';
import {
  type InitializeArgs,
  type InitializeNext,
  type InitializeOutput,
  initializeStackOf,
} from '../cloud/client-middleware.js';
import { type Input, type KeyAttribute, keyAttribute, list, record } from '../cloud/command-input.js';
import { matchesPattern } from './event-filter.js';

/**
 * The local runtime noticing its own DynamoDB writes, so its stream triggers read a shard when a
 * record can be there instead of at their next idle poll (Lambda's pollers read about four times a
 * second; docs/architecture.md#the-wake-up-path). A middleware on every client the handlers get tells
 * `TableWrites` which items a write command named once DynamoDB Local has answered it, whether it
 * succeeded or not (a failed condition writes nothing, a timed-out write may have landed: a spare
 * read costs one GetRecords). Writes through other clients (tests' own, another process) are seen
 * at the idle poll, as before.
 *
 * A trigger is woken only by a write that could make a record its filters let through, judged from
 * what the command says (its kind: a delete makes REMOVE, a put or update INSERT or MODIFY; and the
 * item's key when the input names it): the scheduler's registry trigger wants only the REMOVE of the
 * drain record, and the registry's other writes (API key use, quotas, poll slots, the tick lock)
 * would each cost it a read that delivers nothing. A write skipped here is still read, at the idle
 * poll or with the next woken read, and then filtered as before: only the wake is saved.
 */
export class TableWrites {
  readonly #listeners = new Map<string, Set<Listener>>();

  /**
   * Calls `listener` after each write to `table` that could make a record matching `filters` (any
   * write, with none); answers the function that stops it.
   */
  onWrite(table: string, listener: () => void, filters: readonly FilterPattern[] = []): () => void {
    const listeners = this.#listeners.get(table) ?? new Set();
    const entry: Listener = { wake: listener, filters };
    listeners.add(entry);
    this.#listeners.set(table, listeners);
    return () => void listeners.delete(entry);
  }

  /** Wakes each listener once whose table one of `items` is on and whose filters it could pass. */
  wrote(items: readonly ItemWrite[]): void {
    for (const [table, listeners] of this.#listeners) {
      const onTable = items.filter((item) => item.table === table);
      if (onTable.length === 0) continue;
      for (const listener of listeners) {
        if (onTable.some((item) => mayMatch(item, listener.filters))) listener.wake();
      }
    }
  }
}

interface Listener {
  readonly wake: () => void;
  readonly filters: readonly FilterPattern[];
}

type StreamEventName = 'INSERT' | 'MODIFY' | 'REMOVE';

/** One item a write command names. */
export interface ItemWrite {
  readonly table: string;
  /** The stream events the write can make. */
  readonly events: readonly StreamEventName[];
  /** The item's key as its stream record's `Keys` carry it; undefined when the input does not say plainly. */
  readonly keys: Readonly<Record<string, KeyAttribute>> | undefined;
  /**
   * What the write leaves of the item's top-level attributes, as far as the input says: a put leaves
   * exactly its item's; an update removes those its expression's REMOVE clause names and assigns
   * those its SET and ADD clauses name, and leaves the rest as they were; undefined for a delete
   * or an update whose expression is not read.
   */
  readonly attributes: WrittenAttributes | undefined;
}

/** Attributes by name, with their DynamoDB type (`S`, `N`, ...) when the input shows it. */
type Typed = Readonly<Record<string, string | undefined>>;

export type WrittenAttributes =
  | { readonly kind: 'replaced'; readonly present: Typed }
  | { readonly kind: 'updated'; readonly removed: readonly string[]; readonly assigned: Typed };

const PUT: readonly StreamEventName[] = ['INSERT', 'MODIFY'];
const DELETE: readonly StreamEventName[] = ['REMOVE'];

/** The key attributes of `item` (a `Key`, or a put's whole `Item`), when every one reads plainly. */
function keysOf(item: unknown, keyNames: (table: string) => readonly string[] | undefined, table: string) {
  const names = keyNames(table);
  if (names === undefined) return undefined;
  const keys: Record<string, KeyAttribute> = {};
  for (const name of names) {
    const value = keyAttribute(record(item)[name]);
    if (value === undefined) return undefined;
    keys[name] = value;
  }
  return keys;
}

/**
 * The items a DynamoDB write command names (none for reads, nor for a transaction's ConditionCheck,
 * which writes nothing). `keyNames` answers a table's key attribute names (undefined: not known,
 * so no key is read).
 */
export function itemsWritten(
  operation: string,
  input: Input,
  keyNames: (table: string) => readonly string[] | undefined = () => undefined,
): ItemWrite[] {
  const item = (
    table: unknown,
    events: readonly StreamEventName[],
    key: unknown,
    attributes: WrittenAttributes | undefined,
  ): ItemWrite[] =>
    typeof table === 'string' ? [{ table, events, keys: keysOf(key, keyNames, table), attributes }] : [];
  const put = (body: Input) => item(body.TableName, PUT, body.Item, replaced(body.Item));
  const update = (body: Input) => item(body.TableName, PUT, body.Key, updated(body));
  const remove = (body: Input) => item(body.TableName, DELETE, body.Key, undefined);
  switch (operation) {
    case 'PutItem':
      return put(input);
    case 'UpdateItem':
      return update(input);
    case 'DeleteItem':
      return remove(input);
    case 'BatchWriteItem':
      return Object.entries(record(input.RequestItems)).flatMap(([table, requests]) =>
        list(requests).flatMap((request) => {
          const { PutRequest, DeleteRequest } = record(request);
          if (PutRequest !== undefined) return put({ ...record(PutRequest), TableName: table });
          if (DeleteRequest !== undefined) return remove({ ...record(DeleteRequest), TableName: table });
          return [];
        }),
      );
    case 'TransactWriteItems':
      return list(input.TransactItems).flatMap((entry) => {
        const { Put, Update, Delete } = record(entry);
        if (Put !== undefined) return put(record(Put));
        if (Update !== undefined) return update(record(Update));
        if (Delete !== undefined) return remove(record(Delete));
        return [];
      });
    default:
      return [];
  }
}

/** The DynamoDB type a value is stored as: the low-level client's tag, or the document client's. */
function typeOf(value: unknown): string | undefined {
  if (typeof value === 'string') return 'S';
  if (typeof value === 'number' || typeof value === 'bigint') return 'N';
  if (typeof value === 'boolean') return 'BOOL';
  const tags = Object.keys(record(value));
  return tags.length === 1 && /^(S|N|B|BOOL|NULL|M|L|SS|NS|BS)$/.test(tags[0] ?? '') ? tags[0] : undefined;
}

/** A put's attributes (the document client drops undefined ones when it marshals). */
function replaced(item: unknown): WrittenAttributes {
  const present: Record<string, string | undefined> = {};
  for (const [name, value] of Object.entries(record(item))) {
    if (value !== undefined) present[name] = typeOf(value);
  }
  return { kind: 'replaced', present };
}

// A clause keyword; never a name or a value, which reserved words can only be through # and :.
const CLAUSE = /(?<![#:\w])(SET|REMOVE|ADD|DELETE)(?!\w)/gi;

/** An update expression's top-level attributes, removed and assigned; undefined when not read. */
function updated(body: Input): WrittenAttributes | undefined {
  const expression = body.UpdateExpression;
  if (typeof expression !== 'string') return undefined;
  const names = record(body.ExpressionAttributeNames);
  const values = record(body.ExpressionAttributeValues);
  const resolve = (name: string): string => {
    const resolved = names[name];
    return typeof resolved === 'string' ? resolved : name;
  };
  const removed: string[] = [];
  const assigned: Record<string, string | undefined> = {};
  const parts = expression.split(CLAUSE);
  for (let index = 1; index + 1 < parts.length; index += 2) {
    const clause = (parts[index] ?? '').toUpperCase();
    // Each entry's path: for SET the left side of `path = value`, for the others its first word.
    for (const entry of (parts[index + 1] ?? '').split(',')) {
      const [left = '', right] = clause === 'SET' ? entry.split('=') : [entry];
      const path = left.trim().split(/\s+/)[0] ?? '';
      if (path === '' || path.includes('(')) continue;
      const top = resolve(path.split(/[.[]/)[0] ?? '');
      const nested = !/^[#\w]+$/.test(path);
      // Removing a nested path leaves the attribute; deleting from a set may empty and remove it.
      if (clause === 'REMOVE') {
        if (!nested) removed.push(top);
      } else {
        // `SET a = :v` stores :v's type; anything else (a nested path, a function, ADD, DELETE) is not known.
        const value = right?.trim() ?? '';
        const known = clause === 'SET' && !nested && /^:\w+$/.test(value);
        assigned[top] = known ? typeOf(values[value]) : undefined;
      }
    }
  }
  return { kind: 'updated', removed, assigned };
}

/**
 * Whether the write leaves `attribute` present as `type` (true), not so (false: absent, or of
 * another type), as it was ('unchanged'), or cannot say (undefined).
 */
function presentAfter(item: ItemWrite, attribute: string, type: string): boolean | 'unchanged' | undefined {
  const { attributes } = item;
  if (attributes === undefined) return undefined;
  const stored = (typed: Typed): boolean | undefined => {
    const found = typed[attribute];
    return found === undefined ? undefined : found === type;
  };
  if (attributes.kind === 'replaced')
    return attribute in attributes.present ? stored(attributes.present) : false;
  if (attribute in attributes.assigned) return stored(attributes.assigned);
  return attributes.removed.includes(attribute) ? false : 'unchanged';
}

/** `[{ exists: b }]`: b; anything else: undefined. */
function existsOnly(value: unknown): boolean | undefined {
  if (!Array.isArray(value) || value.length !== 1) return undefined;
  const exists = record(value[0]).exists;
  return typeof exists === 'boolean' ? exists : undefined;
}

/**
 * Whether a record of `item` could pass one of `filters`. Judged: the pattern's `eventName`, its
 * `dynamodb.Keys`, and its images' `exists` tests on top-level attributes the write decides (a
 * claim's `SET inflight = :token` cannot clear inflight, a commit's `REMOVE live` cannot leave a
 * live row); anything else may match. A write misjudged here would wait for the idle poll, no more.
 */
export function mayMatch(item: ItemWrite, filters: readonly FilterPattern[]): boolean {
  if (filters.length === 0) return true;
  return filters.some((pattern) => {
    const names = pattern.eventName;
    if (Array.isArray(names) && !item.events.some((event) => names.includes(event))) return false;
    const dynamodb = record(pattern.dynamodb);
    const keys = dynamodb.Keys;
    if (keys !== undefined && item.keys !== undefined && !Array.isArray(keys)) {
      if (!matchesPattern(item.keys, keys as FilterPattern)) return false;
    }
    if (item.events.includes('REMOVE')) return true;
    const oldImage = record(dynamodb.OldImage);
    // Image tests read `{ attribute: { TYPE: [{ exists: b }] } }`.
    for (const [attribute, typed] of Object.entries(record(dynamodb.NewImage))) {
      for (const [type, test] of Object.entries(record(typed))) {
        const wanted = existsOnly(test);
        if (wanted === undefined) continue;
        const after = presentAfter(item, attribute, type);
        if (typeof after === 'boolean' && after !== wanted) return false;
        // Left as it was, it cannot go from present to absent, nor the other way.
        if (after === 'unchanged' && existsOnly(record(oldImage[attribute])[type]) === !wanted) return false;
      }
    }
    return true;
  });
}

const MIDDLEWARE_NAME = 'localWriteWakes';

/**
 * Adds the write watch to a set of clients (the document client shares the DynamoDB client's stack).
 * `keyNames` answers a table's key attribute names, so that a write's key can be judged.
 */
export function watchWritesOn(
  clients: AwsClients,
  writes: TableWrites,
  keyNames: (table: string) => readonly string[] | undefined,
): void {
  const middleware =
    (next: InitializeNext, context: HandlerExecutionContext): InitializeNext =>
    async (args: InitializeArgs): Promise<InitializeOutput> => {
      const operation = context.commandName?.replace(/Command$/, '') ?? '';
      const items = itemsWritten(operation, args.input as Input, keyNames);
      if (items.length === 0) return next(args);
      try {
        return await next(args);
      } finally {
        writes.wrote(items);
      }
    };
  initializeStackOf(clients.dynamo).add(middleware, {
    step: 'initialize',
    priority: 'high',
    name: MIDDLEWARE_NAME,
    override: true,
  });
}
