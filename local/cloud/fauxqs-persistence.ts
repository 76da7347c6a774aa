import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { BuildAppOptions } from 'fauxqs';
import { fauxqsClass } from './fauxqs-internals.js';

/**
 * Disk-backed stores for fauxqs, which keeps everything in memory and has no persistence option
 * (its README lists "Persistence across restarts" under Limitations). fauxqs takes its stores as an
 * option of `buildApp`; these subclass its own, write every change through to files under one
 * directory before the request that made it is answered, and load them back on start:
 *
 * - S3: `s3/<bucket>/<sha256 of the key>.obj`, one file per object (a JSON header with the key, type,
 *   metadata, ETag and LastModified, then the body), replaced atomically by a rename.
 * - SQS: `sqs/<queue name>/<message id>.json`, one file per message, written when it is sent (or moved
 *   to a dead-letter queue) and removed when it is deleted or purged. Queues are not stored: the
 *   provisioning step creates them on every start, and creating one restores its messages.
 *
 * Restored messages are all visible: a message that was in flight when the process stopped comes
 * back as it would once its visibility timeout ran out, so none is lost (SQS delivers at least once,
 * and every consumer here is idempotent). Receive counts survive, so redrive to a DLQ still happens.
 * Writes are not fsynced: this survives the process dying, not the machine losing power.
 */

type Stores = NonNullable<BuildAppOptions['stores']>;
type S3StoreInstance = Stores['s3Store'];
type SqsStoreInstance = Stores['sqsStore'];
type SqsQueueInstance = ReturnType<SqsStoreInstance['createQueue']>;
type SqsMessage = SqsQueueInstance['messages'][number];
type S3Object = ReturnType<S3StoreInstance['getObject']>;

interface StoreClasses {
  readonly S3Store: new () => S3StoreInstance;
  readonly SqsStore: new () => SqsStoreInstance;
  readonly SnsStore: new () => Stores['snsStore'];
}

async function storeClasses(): Promise<StoreClasses> {
  return {
    S3Store: await fauxqsClass('s3/s3Store.js', 'S3Store'),
    SqsStore: await fauxqsClass('sqs/sqsStore.js', 'SqsStore'),
    SnsStore: await fauxqsClass('sns/snsStore.js', 'SnsStore'),
  };
}

/** Writes the file whole or not at all (a crash mid-write leaves the previous version). */
function writeAtomically(file: string, data: Buffer | string): void {
  mkdirSync(dirname(file), { recursive: true });
  const temporary = `${file}.tmp`;
  writeFileSync(temporary, data);
  renameSync(temporary, file);
}

function filesIn(directory: string, suffix: string): string[] {
  if (!existsSync(directory)) return [];
  return readdirSync(directory).filter((name) => name.endsWith(suffix));
}

interface ObjectHeader {
  readonly key: string;
  readonly contentType: string;
  readonly etag: string;
  readonly lastModified: number;
  readonly metadata: Record<string, string>;
}

/** u32 header length (little-endian), the header as JSON, then the body. */
function encodeObject(object: S3Object): Buffer {
  const header: ObjectHeader = {
    key: object.key,
    contentType: object.contentType,
    etag: object.etag,
    lastModified: object.lastModified.getTime(),
    metadata: object.metadata,
  };
  const json = Buffer.from(JSON.stringify(header));
  const length = Buffer.alloc(4);
  length.writeUInt32LE(json.length);
  return Buffer.concat([length, json, object.body]);
}

function decodeObject(bytes: Buffer): { header: ObjectHeader; body: Buffer } {
  const length = bytes.readUInt32LE(0);
  const header = JSON.parse(bytes.subarray(4, 4 + length).toString('utf8')) as ObjectHeader;
  return { header, body: bytes.subarray(4 + length) };
}

function persistentS3Store(S3Store: StoreClasses['S3Store'], root: string): S3StoreInstance {
  const bucketDir = (bucket: string) => join(root, encodeURIComponent(bucket));
  const objectFile = (bucket: string, key: string) =>
    join(bucketDir(bucket), `${createHash('sha256').update(key).digest('hex')}.obj`);

  class PersistentS3Store extends S3Store {
    override createBucket(name: string): void {
      super.createBucket(name);
      mkdirSync(bucketDir(name), { recursive: true });
    }
    override deleteBucket(name: string): void {
      super.deleteBucket(name);
      rmSync(bucketDir(name), { recursive: true, force: true });
    }
    override putObject(...args: Parameters<S3StoreInstance['putObject']>): S3Object {
      const object = super.putObject(...args);
      writeAtomically(objectFile(args[0], object.key), encodeObject(object));
      return object;
    }
    override deleteObject(bucket: string, key: string): void {
      super.deleteObject(bucket, key);
      rmSync(objectFile(bucket, key), { force: true });
    }
    override completeMultipartUpload(
      ...args: Parameters<S3StoreInstance['completeMultipartUpload']>
    ): S3Object {
      // The upload names its bucket; fauxqs forgets the upload once it completes.
      const uploads = (this as unknown as { multipartUploads: Map<string, { bucket: string }> })
        .multipartUploads;
      const bucket = uploads.get(args[0])?.bucket;
      const object = super.completeMultipartUpload(...args);
      if (bucket !== undefined) writeAtomically(objectFile(bucket, object.key), encodeObject(object));
      return object;
    }
    override emptyBucket(name: string): void {
      super.emptyBucket(name);
      for (const file of filesIn(bucketDir(name), '.obj')) rmSync(join(bucketDir(name), file));
    }
    override clearObjects(): void {
      for (const bucket of this.listBuckets()) this.emptyBucket(bucket.name);
    }
    override purgeAll(): void {
      super.purgeAll();
      rmSync(root, { recursive: true, force: true });
    }

    /** Loads every stored bucket and object, keeping their ETags and LastModified times. */
    restore(): void {
      if (!existsSync(root)) return;
      for (const entry of readdirSync(root, { withFileTypes: true })) {
        if (!entry.isDirectory()) continue;
        const bucket = decodeURIComponent(entry.name);
        super.createBucket(bucket);
        for (const file of filesIn(join(root, entry.name), '.obj')) {
          const { header, body } = decodeObject(readFileSync(join(root, entry.name, file)));
          const object = super.putObject(bucket, header.key, body, header.contentType, header.metadata);
          object.etag = header.etag;
          object.lastModified = new Date(header.lastModified);
        }
      }
    }
  }
  const store = new PersistentS3Store();
  store.restore();
  return store;
}

interface StoredMessage {
  /** Send order across the store, so restored queues keep their order. */
  readonly order: number;
  readonly message: SqsMessage;
}

function persistentSqsStore(SqsStore: StoreClasses['SqsStore'], root: string): SqsStoreInstance {
  const queueDir = (queue: string) => join(root, encodeURIComponent(queue));
  const messageFile = (queue: string, messageId: string) =>
    join(queueDir(queue), `${encodeURIComponent(messageId)}.json`);
  // Which queue's folder holds each message's file: a redrive moves a message without deleting it.
  const holder = new Map<string, string>();
  let nextOrder = 0;

  const save = (queue: string, message: SqsMessage, order: number): void => {
    const stored: StoredMessage = { order, message };
    writeAtomically(messageFile(queue, message.messageId), JSON.stringify(stored));
    const previous = holder.get(message.messageId);
    if (previous !== undefined && previous !== queue)
      rmSync(messageFile(previous, message.messageId), { force: true });
    holder.set(message.messageId, queue);
  };
  const forget = (queue: string, messageId: string): void => {
    rmSync(messageFile(queue, messageId), { force: true });
    if (holder.get(messageId) === queue) holder.delete(messageId);
  };

  /** Wraps one queue's mutating methods so each change reaches its folder before it is answered. */
  const persistQueue = (queue: SqsQueueInstance): void => {
    const orders = new Map<string, number>();
    const enqueue = queue.enqueue.bind(queue);
    const dequeue = queue.dequeue.bind(queue);
    const deleteMessage = queue.deleteMessage.bind(queue);
    const purge = queue.purge.bind(queue);

    const stored = filesIn(queueDir(queue.name), '.json')
      .map((file) => JSON.parse(readFileSync(join(queueDir(queue.name), file), 'utf8')) as StoredMessage)
      .sort((a, b) => a.order - b.order);
    for (const { order, message } of stored) {
      orders.set(message.messageId, order);
      holder.set(message.messageId, queue.name);
      nextOrder = Math.max(nextOrder, order + 1);
      enqueue(message);
    }

    queue.enqueue = (message) => {
      const order = nextOrder++;
      orders.set(message.messageId, order);
      save(queue.name, message, order);
      enqueue(message);
    };
    queue.dequeue = (...args) => {
      const received = dequeue(...args);
      // Receive counts drive the redrive policy: keep them across restarts.
      for (const { ReceiptHandle } of received) {
        const message = queue.inflightMessages.get(ReceiptHandle)?.message;
        if (message !== undefined) save(queue.name, message, orders.get(message.messageId) ?? nextOrder++);
      }
      return received;
    };
    queue.deleteMessage = (receiptHandle) => {
      const message = queue.inflightMessages.get(receiptHandle)?.message;
      const deleted = deleteMessage(receiptHandle);
      if (deleted && message !== undefined) {
        orders.delete(message.messageId);
        forget(queue.name, message.messageId);
      }
      return deleted;
    };
    queue.purge = () => {
      purge();
      for (const file of filesIn(queueDir(queue.name), '.json')) {
        forget(queue.name, decodeURIComponent(file.slice(0, -'.json'.length)));
      }
      orders.clear();
    };
  };

  class PersistentSqsStore extends SqsStore {
    override createQueue(...args: Parameters<SqsStoreInstance['createQueue']>): SqsQueueInstance {
      const queue = super.createQueue(...args);
      persistQueue(queue);
      return queue;
    }
    override deleteQueue(url: string): boolean {
      const queue = this.getQueue(url);
      const deleted = super.deleteQueue(url);
      if (deleted && queue !== undefined) rmSync(queueDir(queue.name), { recursive: true, force: true });
      return deleted;
    }
  }
  return new PersistentSqsStore();
}

/** fauxqs stores that keep S3 objects and SQS messages under `directory` (`s3/`, `sqs/`). */
export async function persistentFauxqsStores(directory: string): Promise<Stores> {
  const classes = await storeClasses();
  return {
    s3Store: persistentS3Store(classes.S3Store, join(directory, 's3')),
    sqsStore: persistentSqsStore(classes.SqsStore, join(directory, 'sqs')),
    snsStore: new classes.SnsStore(),
  };
}
