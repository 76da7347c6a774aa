/**
 * Strict readers of the two formats the checkpoint archive writes (shared/wire/archive/), written from
 * the formats' rules rather than from the writers, so the tests check the bytes and not the writers'
 * own arithmetic. Each throws on the first byte that breaks a rule.
 */

export interface TarEntry {
  readonly name: string;
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly size: number;
  readonly mtime: number;
  readonly typeflag: string;
  /** Offset of the entry's header in the archive. */
  readonly headerOffset: number;
  readonly data: Uint8Array;
}

const BLOCK = 512;

function ascii(bytes: Uint8Array, offset: number, width: number): string {
  const field = bytes.subarray(offset, offset + width);
  const end = field.indexOf(0);
  return String.fromCharCode(...(end === -1 ? field : field.subarray(0, end)));
}

/** An octal field: digits then a NUL (the checksum field: six digits, NUL, space). */
function octal(bytes: Uint8Array, offset: number, width: number, what: string): number {
  const text = ascii(bytes, offset, width);
  if (!/^[0-7]+$/.test(text)) throw new Error(`${what}: ${JSON.stringify(text)} is not octal`);
  return Number.parseInt(text, 8);
}

const isZero = (bytes: Uint8Array) => bytes.every((byte) => byte === 0);

/** Every entry of a ustar archive, checking magic, checksums, zero padding and the two end blocks. */
export function readTar(archive: Uint8Array): TarEntry[] {
  if (archive.length % BLOCK !== 0) throw new Error(`archive length ${archive.length} is not whole blocks`);
  const entries: TarEntry[] = [];
  let offset = 0;
  while (offset + BLOCK <= archive.length) {
    const header = archive.subarray(offset, offset + BLOCK);
    if (isZero(header)) break;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : (header[i] as number);
    const stored = octal(header, 148, 8, 'chksum');
    if (header[154] !== 0 || header[155] !== 0x20)
      throw new Error('chksum field is not 6 digits, NUL, space');
    if (stored !== sum) throw new Error(`chksum ${stored} but the header sums to ${sum}`);
    if (ascii(header, 257, 6) !== 'ustar' || header[262] !== 0) throw new Error('magic is not "ustar\\0"');
    if (ascii(header, 263, 2) !== '00') throw new Error('version is not "00"');
    const size = octal(header, 124, 12, 'size');
    const dataStart = offset + BLOCK;
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (dataStart + padded > archive.length) throw new Error('entry data runs past the archive');
    if (!isZero(archive.subarray(dataStart + size, dataStart + padded)))
      throw new Error('padding is not zero');
    entries.push({
      name: ascii(header, 0, 100),
      mode: octal(header, 100, 8, 'mode'),
      uid: octal(header, 108, 8, 'uid'),
      gid: octal(header, 116, 8, 'gid'),
      size,
      mtime: octal(header, 136, 12, 'mtime'),
      typeflag: String.fromCharCode(header[156] as number),
      headerOffset: offset,
      data: archive.subarray(dataStart, dataStart + size),
    });
    offset = dataStart + padded;
  }
  const end = archive.subarray(offset);
  if (end.length < 2 * BLOCK || !isZero(end))
    throw new Error('the archive does not end with two zero blocks');
  return entries;
}

export interface SafetensorsEntry {
  readonly dtype: string;
  readonly shape: number[];
  readonly offsets: [number, number];
  readonly values: number[];
}

export interface SafetensorsFile {
  readonly headerLength: number;
  readonly metadata: Record<string, string> | undefined;
  readonly tensors: Record<string, SafetensorsEntry>;
}

const ELEMENT_BYTES: Record<string, number> = { F64: 8, F32: 4 };

/**
 * A safetensors file: the header length, the JSON header (space-padded to 8-byte alignment), and each
 * tensor's values; the data offsets must tile the buffer exactly, in order, with no gap.
 */
export function readSafetensors(bytes: Uint8Array): SafetensorsFile {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.getBigUint64(0, true));
  if ((8 + headerLength) % 8 !== 0) throw new Error(`data starts at ${8 + headerLength}, not 8-aligned`);
  const headerBytes = bytes.subarray(8, 8 + headerLength);
  const text = new TextDecoder('utf-8', { fatal: true }).decode(headerBytes);
  if (!text.startsWith('{')) throw new Error('header does not start with "{"');
  const trimmed = text.replace(/ +$/, '');
  if (text.length - trimmed.length >= 8) throw new Error('more padding than alignment needs');
  const header = JSON.parse(trimmed) as Record<string, unknown>;
  const { __metadata__: metadata, ...rest } = header;
  const data = bytes.subarray(8 + headerLength);
  const tensors: Record<string, SafetensorsEntry> = {};
  const spans: [number, number][] = [];
  for (const [name, value] of Object.entries(rest)) {
    const { dtype, shape, data_offsets } = value as {
      dtype: string;
      shape: number[];
      data_offsets: [number, number];
    };
    const width = ELEMENT_BYTES[dtype];
    if (width === undefined) throw new Error(`${name}: dtype ${dtype} unknown to this reader`);
    const count = shape.reduce((product, size) => product * size, 1);
    const [begin, end] = data_offsets;
    if (end - begin !== count * width)
      throw new Error(`${name}: offsets hold ${end - begin} bytes, shape ${count * width}`);
    const tensorView = new DataView(data.buffer, data.byteOffset + begin, end - begin);
    const values = Array.from({ length: count }, (_, i) =>
      width === 8 ? tensorView.getFloat64(i * 8, true) : tensorView.getFloat32(i * 4, true),
    );
    tensors[name] = { dtype, shape, offsets: data_offsets, values };
    spans.push(data_offsets);
  }
  spans.sort((a, b) => a[0] - b[0]);
  let covered = 0;
  for (const [begin, end] of spans) {
    if (begin !== covered) throw new Error(`data has a gap or overlap at byte ${covered}`);
    covered = end;
  }
  if (covered !== data.length) throw new Error(`data is ${data.length} bytes, tensors cover ${covered}`);
  return { headerLength, metadata: metadata as Record<string, string> | undefined, tensors };
}
