import type { S3Client } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../shared/aws/backoff.js';
import {
  bytesSource,
  copyObject,
  forEachBounded,
  MAX_PARTS,
  type PartSource,
  partSizeFor,
  putObjectFrom,
} from '../../shared/aws/s3-streams.js';

/**
 * The multipart splitter (shared/aws/s3-streams.ts) against a recording S3 stand-in: which requests
 * it sends, where parts start and end, that a failure aborts the upload, and that no more than
 * `concurrency` parts' bytes are held at once. The real round trip through the local S3 is
 * test/integration/state-blobs.test.ts.
 */

interface Sent {
  readonly name: string;
  readonly input: Record<string, unknown>;
}

/** An S3 stand-in: records every command; `answer` decides each one's outcome. */
function fakeS3(answer: (sent: Sent) => Promise<unknown> = () => Promise.resolve({})): {
  s3: S3Client;
  sent: Sent[];
} {
  const sent: Sent[] = [];
  const s3 = {
    send: (command: { constructor: { name: string }; input: Record<string, unknown> }) => {
      const entry = { name: command.constructor.name.replace(/Command$/, ''), input: command.input };
      sent.push(entry);
      if (entry.name === 'CreateMultipartUpload') return Promise.resolve({ UploadId: 'u1' });
      if (entry.name === 'UploadPart') {
        return answer(entry).then(() => ({ ETag: `"e${String(entry.input.PartNumber)}"` }));
      }
      return answer(entry);
    },
  } as unknown as S3Client;
  return { s3, sent };
}

const noWait: Clock = { now: () => 0, sleep: () => Promise.resolve(), random: () => 0 };

function pattern(size: number): Uint8Array {
  return Uint8Array.from({ length: size }, (_, i) => (i * 7 + 3) & 0xff);
}

describe('putObjectFrom', () => {
  it('sends a body of at most one part as one PutObject', async () => {
    const { s3, sent } = fakeS3();
    const body = pattern(100);
    expect(await putObjectFrom(s3, 'b', 'k', bytesSource(body), { partBytes: 100 })).toEqual({
      size: 100,
      parts: 0,
    });
    expect(sent.map((s) => s.name)).toEqual(['PutObject']);
    expect(sent[0]?.input.Body).toEqual(body);
  });

  it('splits a larger body at part boundaries, the last part short, parts numbered from 1', async () => {
    const { s3, sent } = fakeS3();
    const body = pattern(250);
    expect(await putObjectFrom(s3, 'b', 'k', bytesSource(body), { partBytes: 100 })).toEqual({
      size: 250,
      parts: 3,
    });
    expect(sent.map((s) => s.name)).toEqual([
      'CreateMultipartUpload',
      'UploadPart',
      'UploadPart',
      'UploadPart',
      'CompleteMultipartUpload',
    ]);
    const parts = sent.filter((s) => s.name === 'UploadPart');
    expect(parts.map((p) => p.input.PartNumber)).toEqual([1, 2, 3]);
    expect(parts.map((p) => (p.input.Body as Uint8Array).length)).toEqual([100, 100, 50]);
    const joined = Buffer.concat(parts.map((p) => p.input.Body as Uint8Array));
    expect(new Uint8Array(joined)).toEqual(body);
    expect(sent.at(-1)?.input.MultipartUpload).toEqual({
      Parts: [
        { ETag: '"e1"', PartNumber: 1 },
        { ETag: '"e2"', PartNumber: 2 },
        { ETag: '"e3"', PartNumber: 3 },
      ],
    });
  });

  it('an exact multiple of the part size has no empty last part', async () => {
    const { s3, sent } = fakeS3();
    await putObjectFrom(s3, 'b', 'k', bytesSource(pattern(300)), { partBytes: 100 });
    expect(sent.filter((s) => s.name === 'UploadPart')).toHaveLength(3);
  });

  it('aborts the upload when a part fails, starts no part after the failure, and throws', async () => {
    const failure = Object.assign(new Error('denied'), { name: 'AccessDenied' });
    const { s3, sent } = fakeS3((entry) =>
      entry.name === 'UploadPart' && entry.input.PartNumber === 2
        ? Promise.reject(failure)
        : Promise.resolve({}),
    );
    await expect(
      putObjectFrom(s3, 'b', 'k', bytesSource(pattern(1000)), { partBytes: 100, concurrency: 1 }),
    ).rejects.toBe(failure);
    expect(sent.map((s) => s.name)).toEqual([
      'CreateMultipartUpload',
      'UploadPart',
      'UploadPart',
      'AbortMultipartUpload',
    ]);
    expect(sent.at(-1)?.input).toMatchObject({ Bucket: 'b', Key: 'k', UploadId: 'u1' });
  });

  it('retries a part on a transient error and completes', async () => {
    let failures = 1;
    const { s3, sent } = fakeS3((entry) => {
      if (entry.name === 'UploadPart' && entry.input.PartNumber === 2 && failures > 0) {
        failures -= 1;
        return Promise.reject(Object.assign(new Error('slow down'), { name: 'SlowDown' }));
      }
      return Promise.resolve({});
    });
    await putObjectFrom(s3, 'b', 'k', bytesSource(pattern(250)), { partBytes: 100, clock: noWait });
    const numbers = sent.filter((s) => s.name === 'UploadPart').map((s) => Number(s.input.PartNumber));
    expect(numbers.sort()).toEqual([1, 2, 2, 3]);
    expect(sent.at(-1)?.name).toBe('CompleteMultipartUpload');
  });

  it('holds at most `concurrency` parts read and not yet sent', async () => {
    const concurrency = 3;
    let held = 0;
    let maxHeld = 0;
    const size = 40 * 10;
    const inner = bytesSource(pattern(size));
    const source: PartSource = {
      size,
      read: async (offset, length) => {
        held += 1;
        maxHeld = Math.max(maxHeld, held);
        return inner.read(offset, length);
      },
    };
    const { s3 } = fakeS3(async (entry) => {
      if (entry.name !== 'UploadPart') return {};
      // Parts finish out of order: a slow part must not let later parts pile up behind it.
      await new Promise((resolve) => setTimeout(resolve, (Number(entry.input.PartNumber) % 4) * 2));
      held -= 1;
      return {};
    });
    const done = await putObjectFrom(s3, 'b', 'k', source, { partBytes: 10, concurrency });
    expect(done.parts).toBe(40);
    expect(held).toBe(0);
    expect(maxHeld).toBe(concurrency);
  });
});

describe('copyObject', () => {
  /** The S3 stand-in answering HeadObject with `size` and UploadPartCopy with an ETag per part. */
  function copyS3(size: number, fail?: number) {
    return fakeS3((entry) => {
      if (entry.name === 'HeadObject') return Promise.resolve({ ContentLength: size });
      if (entry.name === 'UploadPartCopy') {
        if (entry.input.PartNumber === fail) return Promise.reject(new Error('copy failed'));
        return Promise.resolve({ CopyPartResult: { ETag: `"c${String(entry.input.PartNumber)}"` } });
      }
      return Promise.resolve({});
    });
  }

  it('copies with one CopyObject up to the limit', async () => {
    const { s3, sent } = copyS3(100);
    expect(await copyObject(s3, 'b', 'from/a b', 'to/x', { maxCopyBytes: 100 })).toBe(100);
    expect(sent.map((s) => s.name)).toEqual(['HeadObject', 'CopyObject']);
    expect(sent[1]?.input).toMatchObject({ Key: 'to/x', CopySource: 'b/from/a%20b' });
  });

  it('copies a larger object in byte ranges, then completes; a failed range aborts', async () => {
    const { s3, sent } = copyS3(250);
    await copyObject(s3, 'b', 'from', 'to', { maxCopyBytes: 100 });
    const ranges = sent.filter((s) => s.name === 'UploadPartCopy').map((s) => s.input.CopySourceRange);
    expect(ranges.sort()).toEqual(['bytes=0-99', 'bytes=100-199', 'bytes=200-249']);
    expect(sent.at(-1)?.input.MultipartUpload).toEqual({
      Parts: [
        { ETag: '"c1"', PartNumber: 1 },
        { ETag: '"c2"', PartNumber: 2 },
        { ETag: '"c3"', PartNumber: 3 },
      ],
    });
    const failing = copyS3(250, 2);
    await expect(copyObject(failing.s3, 'b', 'from', 'to', { maxCopyBytes: 100 })).rejects.toThrow(
      'copy failed',
    );
    expect(failing.sent.at(-1)?.name).toBe('AbortMultipartUpload');
  });
});

describe('partSizeFor', () => {
  it('keeps the configured size unless the body needs more than 10,000 parts', () => {
    expect(partSizeFor(100, 8)).toBe(8);
    expect(partSizeFor(MAX_PARTS * 8 + 1, 8)).toBe(9);
  });
});

describe('forEachBounded', () => {
  it('answers in order and rethrows the first failure after the running tasks settle', async () => {
    expect(await forEachBounded(5, 2, (i) => Promise.resolve(i * i))).toEqual([0, 1, 4, 9, 16]);
    const started: number[] = [];
    let settled = 0;
    const failing = forEachBounded(10, 2, async (i) => {
      started.push(i);
      await new Promise((resolve) => setTimeout(resolve, i === 1 ? 0 : 5));
      settled += 1;
      if (i === 1) throw new Error('part 1');
      return i;
    });
    await expect(failing).rejects.toThrow('part 1');
    expect(settled).toBe(started.length);
    expect(started.length).toBeLessThan(10);
  });
});
