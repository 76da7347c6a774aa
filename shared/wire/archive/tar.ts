/**
 * A POSIX ustar writer for flat archives of regular files (docs/design.md#c2). Each entry is a 512-byte
 * header, then its data zero-padded to a multiple of 512; two zero blocks end the archive.
 *
 * Header fields used (offset, width): name (0, 100), mode (100, 8), uid (108, 8), gid (116, 8),
 * size (124, 12), mtime (136, 12), chksum (148, 8), typeflag (156, 1), magic "ustar\0" (257, 6),
 * version "00" (263, 2); the rest stay zero. Numbers are octal ASCII, zero-filled and NUL-terminated.
 * The checksum is the sum of the header's bytes with its own field counted as eight spaces, written as
 * six octal digits, a NUL and a space.
 *
 * Entries are written in byte order of their names and carry no owner names, so the same files and
 * mtime always give the same bytes.
 */
import { InfrastructureError } from '../../base/errors.js';

export const TAR_BLOCK = 512;

const NAME_BYTES = 100;
/** 11 octal digits: the size field's capacity (8 GiB - 1). */
const MAX_SIZE = 8 ** 11 - 1;
const CHECKSUM_OFFSET = 148;
const CHECKSUM_WIDTH = 8;

export interface TarFile {
  /** A path relative to the archive root, in ASCII, at most 100 bytes. */
  readonly name: string;
  readonly data: Uint8Array;
  /** Permission bits; 0o644 when left out. */
  readonly mode?: number;
}

export interface TarOptions {
  /** Every entry's modification time, whole seconds since the epoch. */
  readonly mtimeSeconds: number;
}

function invalid(name: string, reason: string): InfrastructureError {
  return new InfrastructureError(`tar entry ${JSON.stringify(name)}: ${reason}`);
}

/** Names the SDK's safe extraction accepts (nothing outside the target folder) and the name field holds. */
function checkName(name: string): void {
  if (name.length === 0) throw invalid(name, 'empty name');
  if (!/^[\x21-\x7e]+$/.test(name)) throw invalid(name, 'names are printable ASCII without spaces');
  if (name.length > NAME_BYTES) throw invalid(name, `longer than ${NAME_BYTES} bytes`);
  if (name.startsWith('/') || name.split('/').includes('..')) {
    throw invalid(name, 'must stay inside the archive root');
  }
}

/** `value` in octal, zero-filled to `width - 1` digits and NUL-terminated, at `offset`. */
function writeOctal(header: Uint8Array, offset: number, width: number, value: number): void {
  const digits = value.toString(8).padStart(width - 1, '0');
  if (digits.length > width - 1)
    throw new InfrastructureError(`tar header: ${value} overflows ${width} bytes`);
  for (let i = 0; i < digits.length; i++) header[offset + i] = digits.charCodeAt(i);
  header[offset + width - 1] = 0;
}

function writeAscii(header: Uint8Array, offset: number, text: string): void {
  for (let i = 0; i < text.length; i++) header[offset + i] = text.charCodeAt(i);
}

/** The sum of the header's bytes with the checksum field counted as spaces. */
export function headerChecksum(header: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK; i++) {
    const inField = i >= CHECKSUM_OFFSET && i < CHECKSUM_OFFSET + CHECKSUM_WIDTH;
    sum += inField ? 0x20 : (header[i] as number);
  }
  return sum;
}

function fileHeader(file: TarFile, mtimeSeconds: number, size: number = file.data.length): Uint8Array {
  const header = new Uint8Array(TAR_BLOCK);
  writeAscii(header, 0, file.name);
  writeOctal(header, 100, 8, file.mode ?? 0o644);
  writeOctal(header, 108, 8, 0);
  writeOctal(header, 116, 8, 0);
  writeOctal(header, 124, 12, size);
  writeOctal(header, 136, 12, mtimeSeconds);
  header[156] = 0x30; // '0': a regular file
  writeAscii(header, 257, 'ustar\0');
  writeAscii(header, 263, '00');
  const checksum = headerChecksum(header).toString(8).padStart(6, '0');
  writeAscii(header, CHECKSUM_OFFSET, `${checksum}\0 `);
  return header;
}

function paddedSize(bytes: number): number {
  return Math.ceil(bytes / TAR_BLOCK) * TAR_BLOCK;
}

/** The archive of `files` (names unique), sorted by name, each stamped with `options.mtimeSeconds`. */
export function writeTar(files: readonly TarFile[], options: TarOptions): Uint8Array {
  const { mtimeSeconds } = options;
  if (!Number.isInteger(mtimeSeconds) || mtimeSeconds < 0 || mtimeSeconds > MAX_SIZE) {
    throw new InfrastructureError(`tar mtime ${mtimeSeconds} is not a whole second in the ustar range`);
  }
  const sorted = [...files].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  sorted.forEach((file, i) => {
    checkName(file.name);
    if (i > 0 && sorted[i - 1]?.name === file.name) throw invalid(file.name, 'appears twice');
    if (file.data.length > MAX_SIZE) throw invalid(file.name, 'larger than ustar holds');
    const mode = file.mode ?? 0o644;
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw invalid(file.name, `bad mode ${mode}`);
  });
  const total = sorted.reduce((sum, file) => sum + TAR_BLOCK + paddedSize(file.data.length), 2 * TAR_BLOCK);
  const out = new Uint8Array(total);
  let offset = 0;
  for (const file of sorted) {
    out.set(fileHeader(file, mtimeSeconds), offset);
    out.set(file.data, offset + TAR_BLOCK);
    offset += TAR_BLOCK + paddedSize(file.data.length);
  }
  // The rest (padding and the two end blocks) is already zero.
  return out;
}

/** Whether `bytes` start with a ustar header (its magic at offset 257). */
export function isTar(bytes: Uint8Array): boolean {
  if (bytes.length < TAR_BLOCK) return false;
  const magic = String.fromCharCode(...bytes.subarray(257, 262));
  return magic === 'ustar';
}

function readOctal(header: Uint8Array, offset: number, width: number): number {
  const text = String.fromCharCode(...header.subarray(offset, offset + width))
    .replace(/\0.*$/s, '')
    .trim();
  const value = text === '' ? 0 : Number.parseInt(text, 8);
  if (!Number.isSafeInteger(value) || !/^[0-7]*$/.test(text)) {
    throw new InfrastructureError(`tar header: "${text}" is not an octal number`);
  }
  return value;
}

/** A regular file's place in an archive: its data is `size` bytes at `offset`. */
export interface TarEntry {
  readonly name: string;
  readonly offset: number;
  readonly size: number;
  readonly mode: number;
}

/** Reads `length` bytes at `offset` of an archive (whole in memory, or a file read in ranges). */
export type RangeReader = (offset: number, length: number) => Promise<Uint8Array>;

/**
 * The header at `offset`: undefined at the end of the archive (a zero block), else its entry (`name`
 * empty for other entry types, which are skipped) and the offset of the next header.
 */
function parseHeader(
  header: Uint8Array,
  offset: number,
  total: number,
): { readonly entry?: TarEntry; readonly next: number } | undefined {
  if (header.every((byte) => byte === 0)) return undefined;
  if (readOctal(header, CHECKSUM_OFFSET, CHECKSUM_WIDTH) !== headerChecksum(header)) {
    throw new InfrastructureError(`tar header at byte ${offset}: bad checksum`);
  }
  const rawName = String.fromCharCode(...header.subarray(0, NAME_BYTES)).replace(/\0.*$/s, '');
  const prefix = String.fromCharCode(...header.subarray(345, 500)).replace(/\0.*$/s, '');
  const name = prefix === '' ? rawName : `${prefix}/${rawName}`;
  const size = readOctal(header, 124, 12);
  const start = offset + TAR_BLOCK;
  if (start + size > total) throw invalid(name, 'runs past the end of the archive');
  const type = header[156];
  const next = start + paddedSize(size);
  if (type !== 0x30 && type !== 0) return { next };
  return { entry: { name, offset: start, size, mode: readOctal(header, 100, 8) }, next };
}

/**
 * The regular files of a ustar archive (an engine's exported adapter, docs/engine-protocol.md), in
 * archive order; other entry types (folders, links) are skipped. A bad checksum or an entry running
 * past the end throws `InfrastructureError`.
 */
export function readTar(bytes: Uint8Array): TarFile[] {
  const files: TarFile[] = [];
  let offset = 0;
  while (offset + TAR_BLOCK <= bytes.length) {
    const parsed = parseHeader(bytes.subarray(offset, offset + TAR_BLOCK), offset, bytes.length);
    if (parsed === undefined) break;
    const { entry } = parsed;
    if (entry !== undefined) {
      files.push({
        name: entry.name,
        data: bytes.subarray(entry.offset, entry.offset + entry.size),
        mode: entry.mode,
      });
    }
    offset = parsed.next;
  }
  return files;
}

/** `readTar` for an archive of `total` bytes read header by header, its files' data left where it is. */
export async function readTarEntries(read: RangeReader, total: number): Promise<TarEntry[]> {
  const entries: TarEntry[] = [];
  let offset = 0;
  while (offset + TAR_BLOCK <= total) {
    const parsed = parseHeader(await read(offset, TAR_BLOCK), offset, total);
    if (parsed === undefined) break;
    if (parsed.entry !== undefined) entries.push(parsed.entry);
    offset = parsed.next;
  }
  return entries;
}

/**
 * The archive `writeTar` writes, as segments to be concatenated: its headers, padding and end blocks
 * as bytes, and each file's data as `data(file)` answers it (a range of another archive, copied later
 * without holding it whole). `writeTar(files)` equals these segments with each file's data put in.
 */
export function tarSegments<T>(
  files: readonly {
    readonly name: string;
    readonly size: number;
    readonly data: T;
    readonly mode?: number;
  }[],
  options: TarOptions,
): { readonly size: number; readonly segments: (Uint8Array | T)[] } {
  const { mtimeSeconds } = options;
  if (!Number.isInteger(mtimeSeconds) || mtimeSeconds < 0 || mtimeSeconds > MAX_SIZE) {
    throw new InfrastructureError(`tar mtime ${mtimeSeconds} is not a whole second in the ustar range`);
  }
  const sorted = [...files].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const segments: (Uint8Array | T)[] = [];
  let size = 0;
  sorted.forEach((file, i) => {
    checkName(file.name);
    if (i > 0 && sorted[i - 1]?.name === file.name) throw invalid(file.name, 'appears twice');
    if (file.size > MAX_SIZE) throw invalid(file.name, 'larger than ustar holds');
    const mode = file.mode ?? 0o644;
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw invalid(file.name, `bad mode ${mode}`);
    segments.push(fileHeader({ name: file.name, data: new Uint8Array(0), mode }, mtimeSeconds, file.size));
    if (file.size > 0) segments.push(file.data);
    const padding = paddedSize(file.size) - file.size;
    if (padding > 0) segments.push(new Uint8Array(padding));
    size += TAR_BLOCK + paddedSize(file.size);
  });
  segments.push(new Uint8Array(2 * TAR_BLOCK));
  return { size: size + 2 * TAR_BLOCK, segments };
}
