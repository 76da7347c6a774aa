import { describe, expect, it } from 'vitest';
import { InfrastructureError } from '../../shared/base/errors.js';
import { PayloadBytes } from '../../shared/base/payload-bytes.js';
import { decodeWorkItemFile, encodeWorkItemFile } from '../../shared/domain/planning/work-item-file.js';

const protoBytes = new Uint8Array([0x0a, 0x01, 0x6d, 0x10, 0x07, 0xff, 0x00]);
const jsonBytes = new TextEncoder().encode('{"request_type":"optim_step"}');

function item() {
  return {
    work_item_id: 'wi-1',
    pool: 'default',
    created_at: 1,
    models: [
      {
        model_id: 'm',
        steps: [
          { request_id: 'r1', seq: 1, payload: new PayloadBytes(protoBytes, 'tinker-pb', 'zstd') },
          { request_id: 'r2', seq: 2, payload: new PayloadBytes(jsonBytes, 'json') },
          { request_id: 'r3', seq: 3, fail: { message: 'x', category: 'server' } },
        ],
      },
    ],
    samples: [{ request_id: 's1', payload: { inline: true } }],
  };
}

describe('work item file', () => {
  it('carries payload bytes through unchanged, after a JSON header', () => {
    const file = encodeWorkItemFile(item());
    expect(new TextDecoder().decode(file.subarray(0, 4))).toBe('TSW1');
    // The bytes are copied, not re-encoded: they sit at the end of the file in dispatch order.
    expect([...file.subarray(file.length - protoBytes.length - jsonBytes.length)]).toEqual([
      ...protoBytes,
      ...jsonBytes,
    ]);
    const decoded = decodeWorkItemFile(file) as ReturnType<typeof item>;
    const [first, second, third] = decoded.models[0]?.steps ?? [];
    const bytesOf = (payload: unknown): PayloadBytes => {
      expect(payload).toBeInstanceOf(PayloadBytes);
      return payload as PayloadBytes;
    };
    expect([...bytesOf(first?.payload).bytes]).toEqual([...protoBytes]);
    expect(bytesOf(first?.payload).format).toBe('tinker-pb');
    expect(bytesOf(first?.payload).compression).toBe('zstd');
    expect(bytesOf(second?.payload).format).toBe('json');
    expect(bytesOf(second?.payload).compression).toBeUndefined();
    expect(third).toEqual({ request_id: 'r3', seq: 3, fail: { message: 'x', category: 'server' } });
    expect(decoded.samples[0]?.payload).toEqual({ inline: true });
    expect(Object.keys(first ?? {})).not.toContain('payload_ref');
  });

  it('reads work items written as plain JSON before this layout', () => {
    const legacy = new TextEncoder().encode(JSON.stringify({ work_item_id: 'old', models: [], samples: [] }));
    expect(decodeWorkItemFile(legacy)).toEqual({ work_item_id: 'old', models: [], samples: [] });
  });

  it('refuses bytes that are not a work item file, and refs that point outside it', () => {
    expect(() => decodeWorkItemFile(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(InfrastructureError);
    const file = encodeWorkItemFile(item());
    expect(() => decodeWorkItemFile(file.subarray(0, file.length - 1))).toThrow(/outside the file/);
    const header = new DataView(file.buffer).getUint32(4, true);
    expect(() => decodeWorkItemFile(file.subarray(0, 8 + header - 1))).toThrow(InfrastructureError);
  });
});
