import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * The Python side of the SDK tier: a Python 3.11+, the unmodified Tinker SDK of each version under test,
 * and a private folder of its dependencies at pinned versions (`pip install --target`), installed by
 * the project itself from pip's configured index and reused while the pin list is unchanged.
 */

export const SDK_VERSIONS = ['0.24.1', '0.25.0'] as const;
export type SdkVersionName = (typeof SDK_VERSIONS)[number];

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * What the SDK imports (its pyproject minus pyqwest, which the server turns off, and transformers,
 * which only get_tokenizer needs) and their own dependencies, at versions the local index serves, so
 * every machine resolves the same environment; `safetensors` (no dependencies of its own) reads the
 * checkpoint archive's adapter as numpy arrays, beside the SDK's numpy.
 * `forward_backward_custom` needs torch: it has its own pin list below (TORCH_PINS).
 */
const PINS = [
  'annotated_types==0.8.0',
  'anyio==4.15.1',
  'certifi==2026.7.22',
  'click==8.5.0',
  'distro==1.9.0',
  'h11==0.16.0',
  'h2==4.4.1',
  'hpack==4.2.0',
  'httpcore==1.0.9',
  'httpx==0.28.1',
  'hyperframe==6.1.0',
  'idna==3.20',
  'markdown_it_py==4.2.0',
  'mdurl==0.1.2',
  'numpy==2.4.6',
  'orjson==3.12.0',
  'protobuf==7.36.2',
  'pydantic==2.13.5',
  'pydantic_core==2.46.5',
  'pygments==2.21.0',
  'rich==15.0.0',
  'safetensors==0.8.0',
  'sniffio==1.3.1',
  'typing_extensions==4.16.0',
  'typing_inspection==0.4.4',
  'zstandard==0.25.0',
];

/**
 * torch for `forward_backward_custom` (the SDK runs the custom loss's backward pass on the client): the
 * CPU wheel of the local index (about 190 MB; the CUDA build would pull gigabytes) and torch's own
 * dependencies. A folder of its own, keyed by this list's hash, so the SDK's folder above is reused as
 * it is and a machine where torch cannot be installed still runs every other scenario.
 */
const TORCH_PINS = [
  'torch==2.13.0+cpu',
  'filelock==4.0.8',
  'fsspec==2026.9.0',
  'jinja2==3.1.6',
  'markupsafe==3.0.3',
  'mpmath==1.3.0',
  'networkx==3.6.1',
  'setuptools==80.9.0',
  'sympy==1.14.0',
  'typing_extensions==4.16.0',
];

const ENV_ROOT = join(REPO_ROOT, '.local', 'sdk-python');

export interface SdkUnderTest {
  readonly version: SdkVersionName;
  /** PYTHONPATH that imports this version of `tinker` and the pinned dependencies. */
  readonly pythonPath: string;
}

export interface SdkPython {
  /** The interpreter (3.11+). */
  readonly python: string;
  readonly sdks: readonly SdkUnderTest[];
  /**
   * The folder holding torch, for the scenarios that need it only: the SDK imports torch when it can,
   * which costs every other scenario a second or more of start-up.
   */
  readonly torchPath: string | null;
  /** Why there is no torchPath (pip could not install TORCH_PINS), or null. */
  readonly torchMissing: string | null;
}

export type Prerequisites =
  | {
      readonly found: true;
      readonly python: string;
      /** Per version, the SDK's `src` folder, or null when a pip-installed `tinker` is that version. */
      readonly sources: ReadonlyMap<SdkVersionName, string | null>;
      /** Versions that were not found (the tier runs the others). */
      readonly missingVersions: readonly SdkVersionName[];
    }
  | { readonly found: false; readonly missing: string };

function pythonVersion(candidate: string): [number, number] | undefined {
  try {
    const printed = execFileSync(candidate, ['-c', 'import sys; print(*sys.version_info[:2])'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const [major, minor] = printed.trim().split(' ').map(Number);
    return major === undefined || minor === undefined ? undefined : [major, minor];
  } catch {
    return undefined;
  }
}

/** The first Python 3.11+ with pip: `SDK_PYTHON` if set, else the usual names on PATH. */
function findPython(): string | undefined {
  const candidates = process.env.SDK_PYTHON
    ? [process.env.SDK_PYTHON]
    : ['python3.13', 'python3.12', 'python3.11', 'python3'];
  return candidates.find((candidate) => {
    const version = pythonVersion(candidate);
    if (version === undefined || version[0] < 3 || (version[0] === 3 && version[1] < 11)) return false;
    try {
      execFileSync(candidate, ['-m', 'pip', '--version'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  });
}

/** The version of an importable, pip-installed `tinker`, if any. */
function installedTinkerVersion(python: string): string | undefined {
  try {
    return execFileSync(python, ['-c', 'import importlib.metadata as m; print(m.version("tinker"))'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return undefined;
  }
}

/**
 * Where the SDK sources are: `TINKER_SDK_DIR` (a folder of `<version>/src`), else `shared/tinker-sdk`
 * beside the clone (CI copies `shared/` there).
 */
function sdkSourceRoot(): string {
  return process.env.TINKER_SDK_DIR ?? resolve(REPO_ROOT, '..', 'shared', 'tinker-sdk');
}

/** Finds Python and the SDKs without installing anything; `missing` says what is not there. */
export function findPrerequisites(): Prerequisites {
  const python = findPython();
  if (python === undefined)
    return { found: false, missing: 'no Python 3.11+ with pip on PATH (or SDK_PYTHON)' };
  const root = sdkSourceRoot();
  const installed = installedTinkerVersion(python);
  const sources = new Map<SdkVersionName, string | null>();
  for (const version of SDK_VERSIONS) {
    const src = join(root, version, 'src');
    if (existsSync(join(src, 'tinker', '__init__.py'))) sources.set(version, src);
    else if (installed === version) sources.set(version, null);
  }
  if (sources.size === 0) {
    return {
      found: false,
      missing: `no Tinker SDK ${SDK_VERSIONS.join(' or ')} in ${root} (<version>/src) and no pip-installed tinker`,
    };
  }
  const missingVersions = SDK_VERSIONS.filter((version) => !sources.has(version));
  return { found: true, python, sources, missingVersions };
}

/** A dependencies folder, installed once per pin list (into a temporary folder, then renamed). */
async function dependencies(python: string, pins: readonly string[], name = 'deps'): Promise<string> {
  const hash = createHash('sha256').update(pins.join('\n')).digest('hex').slice(0, 12);
  const folder = join(ENV_ROOT, `${name}-${hash}`);
  if (existsSync(folder)) return folder;
  const partial = `${folder}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  // pip retries an unreachable default index for minutes per package; the configured (local) index
  // answers at once, so no retries unless PIP_RETRIES asks for them.
  const retries = process.env.PIP_RETRIES === undefined ? ['--retries', '0'] : [];
  try {
    await promisify(execFile)(
      python,
      ['-m', 'pip', 'install', '--quiet', '--no-input', ...retries, '--target', partial, ...pins],
      { maxBuffer: 16 * 1024 * 1024 },
    );
  } catch (error) {
    rmSync(partial, { recursive: true, force: true });
    const stderr = String((error as { stderr?: unknown }).stderr ?? '');
    const tail = stderr.split('\n').filter(Boolean).slice(-15).join('\n');
    throw new Error(`pip could not install the pinned ${name} (${pins[0]}, ...):\n${tail}`);
  }
  try {
    renameSync(partial, folder);
  } catch (error) {
    // Another run installed the same pins first: use its folder.
    rmSync(partial, { recursive: true, force: true });
    if (!existsSync(folder)) throw error;
  }
  return folder;
}

/**
 * A folder holding only `tinker-<version>.dist-info`, so `importlib.metadata.version("tinker")` (which
 * the SDK calls) answers for a source tree. One folder per version: two dist-infos on one path would
 * make the answer depend on their order.
 */
function distInfoFolder(version: SdkVersionName): string {
  const folder = join(ENV_ROOT, `dist-info-${version}`);
  const distInfo = join(folder, `tinker-${version}.dist-info`);
  mkdirSync(distInfo, { recursive: true });
  writeFileSync(join(distInfo, 'METADATA'), `Metadata-Version: 2.1\nName: tinker\nVersion: ${version}\n`);
  return folder;
}

/** Installs (or reuses) the dependencies and says how to import each SDK version found. */
export async function prepareSdkPython(found: Extract<Prerequisites, { found: true }>): Promise<SdkPython> {
  const deps = await dependencies(found.python, PINS);
  const torch = await dependencies(found.python, TORCH_PINS, 'torch').then(
    (folder) => ({ folder, missing: null }),
    (error: unknown) => ({ folder: null, missing: (error as Error).message }),
  );
  const sdks = [...found.sources].map(([version, src]) => ({
    version,
    pythonPath: (src === null ? [deps] : [src, distInfoFolder(version), deps]).join(delimiter),
  }));
  return { python: found.python, sdks, torchPath: torch.folder, torchMissing: torch.missing };
}
