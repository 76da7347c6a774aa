import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { awsClients } from '../../aws/clients.js';
import { config } from '../../base/config.js';

/** The `prefixes` table as the store's adapters see it: a document client and the physical name. */
export interface PrefixTable {
  readonly doc: DynamoDBDocumentClient;
  readonly tableName: string;
}

export interface PrefixTableOptions {
  /** Injected client (tests add fault-injecting middleware to it); defaults to the shared one. */
  readonly client?: DynamoDBDocumentClient | DynamoDBClient;
  /** Defaults to the configured `PREFIXES_TABLE`. */
  readonly tableName?: string;
}

export function prefixTable(options: PrefixTableOptions = {}): PrefixTable {
  const { client } = options;
  let doc: DynamoDBDocumentClient;
  if (client === undefined) doc = awsClients().doc;
  else if (client instanceof DynamoDBDocumentClient) doc = client;
  else if (client instanceof DynamoDBClient) {
    doc = DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
  } else throw new TypeError('prefix table client must be a DynamoDBDocumentClient or a DynamoDBClient');
  return { doc, tableName: options.tableName ?? config().table('prefixes') };
}
