/**
 * Where LocalStack answers, and whether it does. LocalStack serves every service on one endpoint;
 * its `/_localstack/health` answers JSON with the services it runs. Since March 2026 the LocalStack
 * image needs an auth token (LOCALSTACK_AUTH_TOKEN); the last image without one is 4.14.0.
 */

export const DEFAULT_LOCALSTACK_ENDPOINT = 'http://localhost:4566';

/** How long a probe waits: a LocalStack that is up answers its health check at once. */
export const PROBE_TIMEOUT_MS = 1500;

export type Env = Readonly<Record<string, string | undefined>>;

/** The endpoint the environment names (LOCALSTACK_ENDPOINT, else AWS_ENDPOINT_URL), if any. */
export function configuredEndpoint(env: Env): string | undefined {
  const value = env.LOCALSTACK_ENDPOINT ?? env.AWS_ENDPOINT_URL;
  return value === undefined || value === '' ? undefined : value.replace(/\/+$/, '');
}

export type Probe =
  | { readonly ok: true; readonly version?: string; readonly edition?: string }
  | { readonly ok: false; readonly reason: string };

export async function probeLocalStack(endpoint: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<Probe> {
  const url = `${endpoint}/_localstack/health`;
  try {
    const answer = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    if (!answer.ok) return { ok: false, reason: `${url} answered HTTP ${answer.status}` };
    const body = (await answer.json()) as { version?: unknown; edition?: unknown; services?: unknown };
    if (typeof body.services !== 'object' || body.services === null) {
      return { ok: false, reason: `${url} answered, but not like LocalStack (no "services")` };
    }
    return {
      ok: true,
      ...(typeof body.version === 'string' ? { version: body.version } : {}),
      ...(typeof body.edition === 'string' ? { edition: body.edition } : {}),
    };
  } catch (error) {
    const reason =
      error instanceof Error && error.name === 'TimeoutError'
        ? `no answer within ${timeoutMs} ms`
        : 'connection failed';
    return { ok: false, reason: `${url}: ${reason}` };
  }
}

/**
 * The environment for tools talking to LocalStack: offline-safe endpoints (both AWS_ENDPOINT_URL and
 * AWS_ENDPOINT_URL_S3, since some S3 code paths ignore the general one), path-style S3, a region, and
 * LocalStack's dummy credentials unless real-looking ones are set. Anything already set wins.
 */
export function localStackEnv(endpoint: string, env: Env): Record<string, string> {
  const region = env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1';
  return {
    AWS_ENDPOINT_URL: env.AWS_ENDPOINT_URL ?? endpoint,
    AWS_ENDPOINT_URL_S3: env.AWS_ENDPOINT_URL_S3 ?? endpoint,
    AWS_REGION: region,
    AWS_DEFAULT_REGION: env.AWS_DEFAULT_REGION ?? region,
    AWS_ACCESS_KEY_ID: env.AWS_ACCESS_KEY_ID ?? 'test',
    AWS_SECRET_ACCESS_KEY: env.AWS_SECRET_ACCESS_KEY ?? 'test',
    S3_FORCE_PATH_STYLE: 'true',
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
  };
}
