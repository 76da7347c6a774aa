import type { _Record, AttributeValue as SdkAttributeValue } from '@aws-sdk/client-dynamodb-streams';
import type { AttributeValue, DynamoDBRecord, StreamRecord } from 'aws-lambda';

type Image = Record<string, SdkAttributeValue>;

/**
 * The record Lambda would deliver for one GetRecords record: the same fields, the creation time in
 * epoch seconds, binary attributes base64-encoded (Lambda events are JSON, the SDK gives bytes).
 */
export function toLambdaStreamRecord(
  record: _Record,
  eventSourceARN: string,
  awsRegion: string,
): DynamoDBRecord {
  const source = record.dynamodb ?? {};
  const dynamodb: StreamRecord = {};
  if (source.ApproximateCreationDateTime !== undefined) {
    dynamodb.ApproximateCreationDateTime = Math.floor(source.ApproximateCreationDateTime.getTime() / 1000);
  }
  if (source.Keys !== undefined) dynamodb.Keys = toLambdaImage(source.Keys);
  if (source.NewImage !== undefined) dynamodb.NewImage = toLambdaImage(source.NewImage);
  if (source.OldImage !== undefined) dynamodb.OldImage = toLambdaImage(source.OldImage);
  if (source.SequenceNumber !== undefined) dynamodb.SequenceNumber = source.SequenceNumber;
  if (source.SizeBytes !== undefined) dynamodb.SizeBytes = source.SizeBytes;
  if (source.StreamViewType !== undefined) dynamodb.StreamViewType = source.StreamViewType;
  const converted: DynamoDBRecord = {
    eventID: record.eventID,
    eventName: record.eventName,
    eventVersion: record.eventVersion ?? '1.1',
    eventSource: 'aws:dynamodb',
    // DynamoDB Local reports the region as `ddblocal`; Lambda names the function's region.
    awsRegion,
    dynamodb,
    eventSourceARN,
  };
  return converted;
}

function toLambdaImage(image: Image): Record<string, AttributeValue> {
  return Object.fromEntries(Object.entries(image).map(([name, value]) => [name, toLambdaValue(value)]));
}

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('base64');
}

function toLambdaValue(value: SdkAttributeValue): AttributeValue {
  if (value.S !== undefined) return { S: value.S };
  if (value.N !== undefined) return { N: value.N };
  if (value.B !== undefined) return { B: base64(value.B) };
  if (value.BOOL !== undefined) return { BOOL: value.BOOL };
  if (value.NULL !== undefined) return { NULL: value.NULL };
  if (value.SS !== undefined) return { SS: value.SS };
  if (value.NS !== undefined) return { NS: value.NS };
  if (value.BS !== undefined) return { BS: value.BS.map(base64) };
  if (value.L !== undefined) return { L: value.L.map(toLambdaValue) };
  if (value.M !== undefined) return { M: toLambdaImage(value.M) };
  throw new Error(`unsupported attribute value with keys ${Object.keys(value).join(', ')}`);
}
