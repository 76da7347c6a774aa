import { spawn } from 'node:child_process';
import { delimiter, join } from 'node:path';
import { beforeAll, describe, inject } from 'vitest';
import type { SdkTier } from './global-setup.js';
import { REPO_ROOT, type SdkUnderTest } from './python-env.js';

/**
 * Runs the Python scenario scripts (test/sdk/scenarios/*.py) against the tier's stack. A scenario is a
 * list of checks (scenarios/scenario.py); it prints, on its last stdout line, one JSON object with each
 * check's observations or its Python error and traceback, and the test files assert on that.
 */

const SCENARIOS = join(REPO_ROOT, 'test', 'sdk', 'scenarios');
/** Bytecode of the shared SDK trees goes here, so running them never writes beside their sources. */
const PYCACHE = join(REPO_ROOT, '.local', 'sdk-python', 'pycache');
const DEFAULT_TIMEOUT_MS = 150_000;
/** Lines of a failure's traceback (or of stderr) a failing test shows. */
const TAIL_LINES = 16;

export type Observed = Record<string, unknown>;

type CheckOutcome =
  | { readonly observed: Observed }
  | { readonly error: string; readonly scenario_frames: string; readonly traceback: string };

export interface ScenarioReport {
  /** One check's observations; throws with the Python traceback's tail when the check failed. */
  observed<T = Observed>(check: string): T;
}

/**
 * Logprobs that must agree (the same weights through two paths) may differ by float32 rounding: the
 * SDK carries them as float32.
 */
export const LOGPROB_TOLERANCE = 1e-5;

function tail(text: string): string {
  return text.trimEnd().split('\n').slice(-TAIL_LINES).join('\n');
}

/** A report whose every check fails with `reason` (the script crashed, timed out, printed no JSON). */
function failedRun(reason: string): ScenarioReport {
  return {
    observed: () => {
      throw new Error(reason);
    },
  };
}

function reportOf(label: string, checks: Record<string, CheckOutcome>, stderr: string): ScenarioReport {
  return {
    observed<T>(check: string): T {
      const outcome = checks[check];
      if (outcome === undefined) {
        throw new Error(`${label}: the scenario reported no check "${check}"\n${tail(stderr)}`);
      }
      if ('error' in outcome) {
        throw new Error(
          `${label}: check "${check}" failed in Python: ${outcome.error}\n` +
            `in the scenario:\n${outcome.scenario_frames}in the SDK (traceback tail):\n${tail(outcome.traceback)}`,
        );
      }
      return outcome.observed as T;
    },
  };
}

export interface ScenarioOptions {
  /** Kills the script after this long (default DEFAULT_TIMEOUT_MS). */
  readonly timeoutMs?: number;
  /** Puts torch on the script's path (after the SDK's pins, which win where both have a package). */
  readonly torch?: boolean;
  /** More environment for the script (files a test file prepared for it). */
  readonly env?: Readonly<Record<string, string>>;
}

/** Runs one scenario script under one SDK version as the `owner` tenant (`other`'s key beside it). */
export function runScenario(
  tier: SdkTier,
  sdk: SdkUnderTest,
  scenario: string,
  options: ScenarioOptions = {},
): Promise<ScenarioReport> {
  const label = `${scenario}.py under SDK ${sdk.version}`;
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const child = spawn(tier.python, [join(SCENARIOS, `${scenario}.py`)], {
    cwd: SCENARIOS,
    env: {
      ...process.env,
      PYTHONPATH:
        options.torch && tier.torchPath ? [sdk.pythonPath, tier.torchPath].join(delimiter) : sdk.pythonPath,
      PYTHONPYCACHEPREFIX: PYCACHE,
      PYTHONUNBUFFERED: '1',
      // The script's own deadline, a little after ours: it ends even if this test process dies first.
      SCENARIO_DEADLINE_SECONDS: String(Math.ceil(timeoutMs / 1000) + 5),
      TINKER_BASE_URL: tier.baseUrl,
      TINKER_API_KEY: tier.apiKeys.owner,
      TINKER_OTHER_API_KEY: tier.apiKeys.other,
      // Why torch could not be installed, for a scenario that needs it to say so when it skips.
      SDK_TORCH_MISSING: tier.torchMissing ?? '',
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: timeoutMs,
    killSignal: 'SIGKILL',
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve) => {
    child.on('error', (error) => resolve(failedRun(`${label}: could not start: ${error.message}`)));
    child.on('close', (code, signal) => {
      if (signal !== null) {
        const why = signal === 'SIGKILL' ? `timed out after ${timeoutMs / 1000} s` : `killed by ${signal}`;
        resolve(failedRun(`${label}: ${why}\n${tail(stderr)}`));
        return;
      }
      const lastLine = stdout.trimEnd().split('\n').at(-1) ?? '';
      try {
        const { checks } = JSON.parse(lastLine) as { checks: Record<string, CheckOutcome> };
        resolve(reportOf(label, checks, stderr));
      } catch {
        resolve(failedRun(`${label}: exited ${code} without a JSON report\n${tail(stderr || stdout)}`));
      }
    });
  });
}

/**
 * One describe block per SDK version for `scenario`, whose checks `body` asserts on. Every version's
 * script starts when the file starts, so the versions run side by side.
 */
export function describeScenario(
  scenario: string,
  body: (report: () => ScenarioReport, sdk: SdkUnderTest) => void,
  options: ScenarioOptions = {},
): void {
  const tier = inject('sdkTier');
  const runs = new Map<string, Promise<ScenarioReport>>();
  const hookTimeout = (options.timeoutMs ?? DEFAULT_TIMEOUT_MS) + 10_000;
  beforeAll(() => {
    for (const sdk of tier.sdks) runs.set(sdk.version, runScenario(tier, sdk, scenario, options));
  });
  for (const sdk of tier.sdks) {
    describe(`${scenario} (SDK ${sdk.version})`, () => {
      let report: ScenarioReport | undefined;
      beforeAll(async () => {
        report = await runs.get(sdk.version);
      }, hookTimeout);
      body(() => report ?? failedRun(`${scenario}: no report for SDK ${sdk.version}`), sdk);
    });
  }
}
