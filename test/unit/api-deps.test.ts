import { describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.js';
import { readConfig } from '../../shared/base/config.js';
import { ConfigError } from '../../shared/base/errors.js';
import { resolveApiDeps } from '../../shared/services/api/deps.js';

/** Only what the api function is granted: no PREFIXES_TABLE (the api never reads prefixes). */
const API_ENV = {
  FUTURES_TABLE: 'x-futures',
  MODELS_TABLE: 'x-models',
  REGISTRY_TABLE: 'x-registry',
  DATA_BUCKET: 'x-data',
};

describe('resolveApiDeps: the API edge resolves its names once, from its own variables', () => {
  const clients = createAwsClients({ s3ForcePathStyle: true });

  it('names the three tables and the bucket from the configuration, and passes the clients through', () => {
    const deps = resolveApiDeps(clients, readConfig(API_ENV));
    expect(deps.tables).toEqual({ futures: 'x-futures', models: 'x-models', registry: 'x-registry' });
    expect(deps.bucket).toBe('x-data');
    expect(deps.clients).toBe(clients);
  });

  it.each(Object.keys(API_ENV))('a missing %s fails the request at the edge, naming the variable', (name) => {
    const env: Record<string, string> = { ...API_ENV };
    delete env[name];
    const resolve = () => resolveApiDeps(clients, readConfig(env));
    expect(resolve).toThrow(ConfigError);
    expect(resolve).toThrow(name);
  });
});
