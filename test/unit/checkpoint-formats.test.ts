import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InfrastructureError } from '../../shared/base/errors.js';
import { writeSafetensors } from '../../shared/wire/archive/safetensors.js';
import { TAR_BLOCK, writeTar } from '../../shared/wire/archive/tar.js';
import { readSafetensors, readTar } from '../support/checkpoint-readers.js';

const text = (value: string) => new TextEncoder().encode(value);
const MTIME = 1_767_225_600; // 2026-01-01T00:00:00Z

describe('writeTar (ustar)', () => {
  it('writes one header per file, its data padded to 512, then two zero blocks', () => {
    const files = [
      { name: 'a.txt', data: text('hello') },
      { name: 'b.bin', data: new Uint8Array(TAR_BLOCK).fill(7) },
      { name: 'empty', data: new Uint8Array(0) },
    ];
    const archive = writeTar(files, { mtimeSeconds: MTIME });
    // 5 bytes take a block, 512 exactly one, an empty file none: 3 headers + 2 data blocks + 2 end blocks.
    expect(archive.length).toBe((3 + 2 + 2) * TAR_BLOCK);
    const entries = readTar(archive);
    expect(entries.map((entry) => [entry.name, entry.headerOffset, entry.size])).toEqual([
      ['a.txt', 0, 5],
      ['b.bin', 2 * TAR_BLOCK, TAR_BLOCK],
      ['empty', 4 * TAR_BLOCK, 0],
    ]);
    for (const entry of entries) {
      expect(entry).toMatchObject({ mode: 0o644, uid: 0, gid: 0, mtime: MTIME, typeflag: '0' });
    }
    expect(new TextDecoder().decode(entries[0]?.data)).toBe('hello');
    expect(entries[1]?.data.every((byte) => byte === 7)).toBe(true);
  });

  it('lays the header fields out at their ustar offsets, octal and NUL-terminated', () => {
    const header = writeTar([{ name: 'adapter_config.json', data: text('{}'), mode: 0o600 }], {
      mtimeSeconds: MTIME,
    }).subarray(0, TAR_BLOCK);
    const field = (offset: number, width: number) =>
      String.fromCharCode(...header.subarray(offset, offset + width));
    expect(field(0, 20)).toBe('adapter_config.json\0');
    expect(field(100, 8)).toBe('0000600\0');
    expect(field(108, 8)).toBe('0000000\0');
    expect(field(124, 12)).toBe('00000000002\0');
    expect(field(136, 12)).toBe(`${MTIME.toString(8).padStart(11, '0')}\0`);
    expect(field(156, 1)).toBe('0');
    expect(field(257, 8)).toBe('ustar\u000000');
    // Unused fields (link name, owner names, devices, prefix) stay zero.
    expect(header.subarray(157, 257).every((byte) => byte === 0)).toBe(true);
    expect(header.subarray(265, 512).every((byte) => byte === 0)).toBe(true);
    // The checksum: the header's byte sum with the field as eight spaces, as six octal digits, NUL, space.
    let sum = 0;
    header.forEach((byte, i) => {
      sum += i >= 148 && i < 156 ? 32 : byte;
    });
    expect(field(148, 8)).toBe(`${sum.toString(8).padStart(6, '0')}\0 `);
  });

  it('is deterministic: entries sorted by name, the same input always the same bytes', () => {
    const files = [
      { name: 'zeta', data: text('z') },
      { name: 'alpha', data: text('a') },
      { name: 'Mid', data: text('m') },
    ];
    const once = writeTar(files, { mtimeSeconds: MTIME });
    expect(readTar(once).map((entry) => entry.name)).toEqual(['Mid', 'alpha', 'zeta']);
    expect(writeTar([...files].reverse(), { mtimeSeconds: MTIME })).toEqual(once);
    expect(writeTar(files, { mtimeSeconds: MTIME + 1 })).not.toEqual(once);
  });

  it('refuses names the SDK would not extract safely or ustar cannot hold, and bad times', () => {
    const write = (name: string) => () => writeTar([{ name, data: text('x') }], { mtimeSeconds: MTIME });
    for (const name of ['', '/etc/passwd', '../up', 'a/../../b', 'with space', 'é', 'x'.repeat(101)]) {
      expect(write(name), name).toThrow(InfrastructureError);
    }
    expect(write('x'.repeat(100))).not.toThrow();
    const twice = [
      { name: 'same', data: text('1') },
      { name: 'same', data: text('2') },
    ];
    expect(() => writeTar(twice, { mtimeSeconds: MTIME })).toThrow(/appears twice/);
    expect(() => writeTar([], { mtimeSeconds: 1.5 })).toThrow(InfrastructureError);
    expect(() => writeTar([], { mtimeSeconds: -1 })).toThrow(InfrastructureError);
  });

  it('is read back byte for byte by the system tar', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tar-test-'));
    try {
      const payload = Uint8Array.from({ length: 1500 }, (_, i) => (i * 31) % 251);
      writeFileSync(
        join(dir, 'x.tar'),
        writeTar(
          [
            { name: 'payload.bin', data: payload },
            { name: 'marker', data: new Uint8Array(0) },
          ],
          { mtimeSeconds: MTIME },
        ),
      );
      const listing = execFileSync('tar', ['--list', '--file', join(dir, 'x.tar')], { encoding: 'utf8' });
      expect(listing.trim().split('\n')).toEqual(['marker', 'payload.bin']);
      execFileSync('tar', ['--extract', '--file', join(dir, 'x.tar'), '--directory', dir]);
      expect(new Uint8Array(readFileSync(join(dir, 'payload.bin')))).toEqual(payload);
      expect(readFileSync(join(dir, 'marker')).length).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('writeSafetensors', () => {
  it('writes the header length, a space-padded JSON header, then each tensor little-endian', () => {
    const bytes = writeSafetensors(
      {
        'm.w': { dtype: 'F64', shape: [2, 3], data: Float64Array.of(1, -2.5, Math.PI, 1e-300, 0, -0) },
        'm.b': { dtype: 'F32', shape: [3], data: Float32Array.of(0.1, 2, -3) },
      },
      { format: 'pt' },
    );
    const view = new DataView(bytes.buffer);
    const headerLength = Number(view.getBigUint64(0, true));
    expect(headerLength % 8).toBe(0);
    const headerText = new TextDecoder().decode(bytes.subarray(8, 8 + headerLength));
    const json = headerText.trimEnd();
    expect(headerText.slice(json.length)).toMatch(/^ {0,7}$/);
    // Tensors in name order: m.b (12 bytes) then m.w (48 bytes), right after the header.
    expect(JSON.parse(json)).toEqual({
      __metadata__: { format: 'pt' },
      'm.b': { dtype: 'F32', shape: [3], data_offsets: [0, 12] },
      'm.w': { dtype: 'F64', shape: [2, 3], data_offsets: [12, 60] },
    });
    expect(bytes.length).toBe(8 + headerLength + 60);
    const data = 8 + headerLength;
    expect(view.getFloat32(data + 4, true)).toBe(2);
    expect(view.getFloat64(data + 12 + 2 * 8, true)).toBe(Math.PI);
    expect(Object.is(view.getFloat64(data + 12 + 5 * 8, true), -0)).toBe(true);
    const file = readSafetensors(bytes);
    expect(file.tensors['m.w']?.values).toEqual([1, -2.5, Math.PI, 1e-300, 0, -0]);
    expect(file.tensors['m.b']?.values).toEqual([...Float32Array.of(0.1, 2, -3)]);
  });

  it('pads the header to 8 bytes with as many spaces as needed, whatever its length', () => {
    const paddings = new Set<number>();
    for (let length = 1; length <= 16; length++) {
      const bytes = writeSafetensors({
        ['n'.repeat(length)]: { dtype: 'F32', shape: [1], data: Float32Array.of(1) },
      });
      const file = readSafetensors(bytes);
      const headerText = new TextDecoder().decode(bytes.subarray(8, 8 + file.headerLength));
      paddings.add(headerText.length - headerText.trimEnd().length);
      expect(file.metadata).toBeUndefined();
    }
    // Sixteen name lengths reach every padding from none to seven spaces.
    expect([...paddings].sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('writes the same bytes for the same tensors in any insertion order', () => {
    const a = { dtype: 'F64' as const, shape: [1], data: Float64Array.of(1) };
    const b = { dtype: 'F64' as const, shape: [2], data: Float64Array.of(2, 3) };
    expect(writeSafetensors({ a, b })).toEqual(writeSafetensors({ b, a }));
  });

  it('refuses a shape that does not match the data and the reserved name', () => {
    expect(() => writeSafetensors({ t: { dtype: 'F64', shape: [2, 2], data: new Float64Array(3) } })).toThrow(
      /holds 4 values, data has 3/,
    );
    expect(() => writeSafetensors({ t: { dtype: 'F64', shape: [-1], data: new Float64Array(1) } })).toThrow(
      InfrastructureError,
    );
    expect(() =>
      writeSafetensors({ __metadata__: { dtype: 'F64', shape: [1], data: new Float64Array(1) } }),
    ).toThrow(/reserved/);
  });
});
