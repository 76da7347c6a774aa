import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { HttpRequest, HttpResponse } from '@smithy/types';
import type { AwsClients } from '../../../shared/aws/clients.js';

/**
 * A tiny in-memory DynamoDB, S3 and SQS behind the SDK's HTTP handler, for unit tests of the fault
 * library without a local cloud: the real SDK clients (serialization, document marshalling, error
 * parsing) talk to it, and every request that reached "the service" is recorded. Only what those
 * tests need is served: item puts/gets/batches/transactions (puts and deletes), Query by an equality
 * key condition with Limit and paging, and single-object S3 and SQS sends.
 */

export type AttributeMap = Record<string, Record<string, unknown>>;
type Json = Record<string, unknown>;

export interface WireCall {
  readonly service: 'dynamodb' | 's3' | 'sqs';
  readonly operation: string;
  readonly input: Json;
}

const ENDPOINT = 'http://fake-wire.local';
const CREDENTIALS = { accessKeyId: 'fake', secretAccessKey: 'fake' };

export class FakeWire {
  readonly calls: WireCall[] = [];
  /** Items per table, keyed by the JSON of their key attribute. */
  readonly tables = new Map<string, Map<string, AttributeMap>>();
  readonly objects = new Map<string, string>();
  readonly messages: string[] = [];

  /** `keys`: table name -> its partition key attribute (tables not named use `pk`). */
  constructor(private readonly keys: Readonly<Record<string, string>> = {}) {}

  /** Calls of one operation that reached the service. */
  reached(operation: string): WireCall[] {
    return this.calls.filter((call) => call.operation === operation);
  }

  table(name: string): Map<string, AttributeMap> {
    let table = this.tables.get(name);
    if (table === undefined) {
      table = new Map();
      this.tables.set(name, table);
    }
    return table;
  }

  /** Clients bound to this wire; each call makes new ones, so middleware never leaks between tests. */
  clients(): AwsClients {
    const common = { region: 'us-east-1', credentials: CREDENTIALS, endpoint: ENDPOINT, maxAttempts: 1 };
    const dynamo = new DynamoDBClient({ ...common, requestHandler: this.handler('dynamodb') });
    return {
      dynamo,
      doc: DynamoDBDocumentClient.from(dynamo, { marshallOptions: { removeUndefinedValues: true } }),
      s3: new S3Client({ ...common, forcePathStyle: true, requestHandler: this.handler('s3') }),
      sqs: new SQSClient({ ...common, requestHandler: this.handler('sqs') }),
    };
  }

  private handler(service: WireCall['service']) {
    return {
      handle: async (request: HttpRequest): Promise<{ response: HttpResponse }> => {
        const body = await readBody(request.body);
        const answer =
          service === 's3' ? this.serveS3(request, body) : this.serveJson(service, request, JSON.parse(body));
        return {
          response: {
            statusCode: answer.status,
            headers: answer.headers,
            body: Readable.from([Buffer.from(answer.body)]),
          },
        };
      },
    };
  }

  private serveJson(
    service: 'dynamodb' | 'sqs',
    request: HttpRequest,
    input: Json,
  ): { status: number; headers: Record<string, string>; body: string } {
    const target = String(request.headers['x-amz-target'] ?? '');
    const operation = target.slice(target.indexOf('.') + 1);
    this.calls.push({ service, operation, input });
    const output = service === 'dynamodb' ? this.dynamo(operation, input) : this.sqs(operation, input);
    return {
      status: 200,
      headers: { 'content-type': 'application/x-amz-json-1.0' },
      body: JSON.stringify(output),
    };
  }

  private keyOf(tableName: string, item: AttributeMap): string {
    const attribute = this.keys[tableName] ?? 'pk';
    return JSON.stringify(item[attribute]);
  }

  private dynamo(operation: string, input: Json): Json {
    const tableName = String(input.TableName ?? '');
    switch (operation) {
      case 'PutItem': {
        const item = input.Item as AttributeMap;
        this.table(tableName).set(this.keyOf(tableName, item), item);
        return {};
      }
      case 'GetItem': {
        const item = this.table(tableName).get(this.keyOf(tableName, input.Key as AttributeMap));
        return item === undefined ? {} : { Item: item };
      }
      case 'DeleteItem':
        this.table(tableName).delete(this.keyOf(tableName, input.Key as AttributeMap));
        return {};
      case 'BatchWriteItem': {
        const requests = input.RequestItems as Record<string, Json[]>;
        for (const [table, writes] of Object.entries(requests)) {
          for (const write of writes) this.write(table, write);
        }
        return { UnprocessedItems: {} };
      }
      case 'BatchGetItem': {
        const requests = input.RequestItems as Record<string, { Keys: AttributeMap[] }>;
        const responses: Record<string, AttributeMap[]> = {};
        for (const [table, { Keys }] of Object.entries(requests)) {
          responses[table] = Keys.flatMap((key) => {
            const item = this.table(table).get(this.keyOf(table, key));
            return item === undefined ? [] : [item];
          });
        }
        return { Responses: responses, UnprocessedKeys: {} };
      }
      case 'TransactWriteItems': {
        for (const action of input.TransactItems as Json[]) {
          const put = action.Put as Json | undefined;
          if (put) this.write(String(put.TableName), { PutRequest: { Item: put.Item } });
          const remove = action.Delete as Json | undefined;
          if (remove) this.write(String(remove.TableName), { DeleteRequest: { Key: remove.Key } });
        }
        return {};
      }
      case 'Query':
        return this.query(tableName, input);
      default:
        throw new Error(`the fake wire does not serve DynamoDB ${operation}`);
    }
  }

  private write(tableName: string, write: Json): void {
    const put = write.PutRequest as { Item: AttributeMap } | undefined;
    if (put) this.table(tableName).set(this.keyOf(tableName, put.Item), put.Item);
    const remove = write.DeleteRequest as { Key: AttributeMap } | undefined;
    if (remove) this.table(tableName).delete(this.keyOf(tableName, remove.Key));
  }

  /** `#name = :value` (or `name = :value`), items sorted by the table key, Limit and ExclusiveStartKey. */
  private query(tableName: string, input: Json): Json {
    const match = /^\s*(#?\w+)\s*=\s*(:\w+)\s*$/.exec(String(input.KeyConditionExpression));
    if (!match) throw new Error(`the fake wire cannot evaluate ${String(input.KeyConditionExpression)}`);
    const names = (input.ExpressionAttributeNames ?? {}) as Record<string, string>;
    const attribute = match[1]!.startsWith('#') ? names[match[1]!]! : match[1]!;
    const wanted = JSON.stringify((input.ExpressionAttributeValues as AttributeMap)[match[2]!]);
    const sortKey = this.keys[tableName] ?? 'pk';
    const sortValue = (item: AttributeMap) => String(item[sortKey]?.S ?? '');
    const after = input.ExclusiveStartKey ? sortValue(input.ExclusiveStartKey as AttributeMap) : undefined;
    const all = [...this.table(tableName).values()]
      .filter((item) => JSON.stringify(item[attribute]) === wanted)
      .filter((item) => after === undefined || sortValue(item) > after)
      .sort((a, b) => (sortValue(a) < sortValue(b) ? -1 : 1));
    const limit = typeof input.Limit === 'number' ? input.Limit : Number.POSITIVE_INFINITY;
    const items = all.slice(0, limit);
    const last = items.at(-1);
    const more = all.length > items.length && last !== undefined;
    return {
      Items: items,
      Count: items.length,
      ScannedCount: items.length,
      ...(more ? { LastEvaluatedKey: { [attribute]: last[attribute], [sortKey]: last[sortKey] } } : {}),
    };
  }

  private sqs(operation: string, input: Json): Json {
    if (operation !== 'SendMessage') throw new Error(`the fake wire does not serve SQS ${operation}`);
    const body = String(input.MessageBody);
    this.messages.push(body);
    return {
      MessageId: `m-${this.messages.length}`,
      MD5OfMessageBody: createHash('md5').update(body).digest('hex'),
    };
  }

  private serveS3(
    request: HttpRequest,
    body: string,
  ): { status: number; headers: Record<string, string>; body: string } {
    const key = decodeURIComponent(request.path.replace(/^\/[^/]+\//, ''));
    const operation = { PUT: 'PutObject', GET: 'GetObject', DELETE: 'DeleteObject' }[request.method];
    if (operation === undefined) throw new Error(`the fake wire does not serve S3 ${request.method}`);
    this.calls.push({ service: 's3', operation, input: { Key: key, Body: body } });
    if (operation === 'PutObject') this.objects.set(key, body);
    if (operation === 'DeleteObject') this.objects.delete(key);
    if (operation !== 'GetObject')
      return { status: operation === 'PutObject' ? 200 : 204, headers: {}, body: '' };
    const stored = this.objects.get(key);
    if (stored === undefined) {
      const xml = '<?xml version="1.0"?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>';
      return { status: 404, headers: { 'content-type': 'application/xml' }, body: xml };
    }
    return { status: 200, headers: { 'content-type': 'application/octet-stream' }, body: stored };
  }
}

async function readBody(body: unknown): Promise<string> {
  if (body === undefined || body === null) return '';
  if (typeof body === 'string') return body;
  // The SDK's JSON bodies are Uint8Array subclasses whose valueOf() warns: copy the bytes by view.
  if (body instanceof Uint8Array)
    return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  if (body instanceof Readable) {
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
    return Buffer.concat(chunks).toString('utf8');
  }
  throw new Error(`the fake wire cannot read a ${typeof body} body`);
}
