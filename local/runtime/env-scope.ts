import { type Env, setConfigScope } from '../../shared/base/config.js';
import { grantedEnvVars, resourceEnvVars } from '../../shared/base/grants.js';
import { logger } from '../../shared/base/logger.js';
import type { FunctionId, Topology } from '../../shared/base/topology.js';
import { currentFunctionScope } from './grant-enforcement.js';

/**
 * Environment variables, locally as on AWS: the runtime writes one environment into process.env for
 * every function it runs, but a deployed function gets only the variables of the resources it is
 * granted (`shared/base/grants.ts`, bound by the CDK where it grants the actions). Inside a function scope
 * with a policy (the Invoker runs each handler in one), `config()` reads that function's view: process.env
 * without the resource variables of the resources it is not granted, so reading one throws the
 * `ConfigError` the deployed function would throw. Every other variable (settings, AWS_*, tunables,
 * POWERTOOLS_*) passes through. Code that reads process.env directly is not covered; the project reads
 * settings only through `config()`.
 */

/**
 * The environment `functionId` sees: a live view of `source` (a later write to process.env shows
 * through, as it does for `config()` outside a scope) that hides the resource variables it lacks.
 */
export function functionEnv(topology: Topology, functionId: FunctionId, source: Env = process.env): Env {
  const granted = new Set(grantedEnvVars(topology, topology.functions[functionId].grants));
  const hidden = new Set(resourceEnvVars(topology).filter((name) => !granted.has(name)));
  const visible = (name: string | symbol): name is string => typeof name === 'string' && !hidden.has(name);
  const read = (name: string | symbol): string | undefined => {
    if (visible(name)) return source[name];
    if (typeof name === 'string' && source[name] !== undefined) {
      // Logged as well as hidden: code that swallows the ConfigError still shows the drift.
      logger.warn('local runtime: a function read a resource variable its deployed function does not get', {
        function: functionId,
        variable: name,
      });
    }
    return undefined;
  };
  // The target is an empty object, so the proxy may report keys it does not hold (process.env's).
  return new Proxy<Record<string, string | undefined>>(
    {},
    {
      get: (_target, name) => read(name),
      has: (_target, name) => visible(name) && source[name] !== undefined,
      ownKeys: () => Object.keys(source).filter((name) => visible(name)),
      getOwnPropertyDescriptor: (_target, name) =>
        visible(name) && source[name] !== undefined
          ? { value: source[name], enumerable: true, configurable: true, writable: false }
          : undefined,
      set: () => false,
      deleteProperty: () => false,
    },
  );
}

/** One view per function and topology, so `config()` caches one configuration per function. */
const views = new WeakMap<Topology, Map<FunctionId, Env>>();

function viewFor(topology: Topology, functionId: FunctionId): Env {
  let byFunction = views.get(topology);
  if (byFunction === undefined) {
    byFunction = new Map();
    views.set(topology, byFunction);
  }
  let view = byFunction.get(functionId);
  if (view === undefined) {
    view = functionEnv(topology, functionId);
    byFunction.set(functionId, view);
  }
  return view;
}

/** The running function's environment, or `undefined` outside a function scope with a policy. */
export function currentFunctionEnv(): Env | undefined {
  const scope = currentFunctionScope();
  if (scope?.access === undefined) return undefined;
  return viewFor(scope.access.topology, scope.functionId);
}

/**
 * Makes `config()` read the running function's environment from now on in this process. It stays
 * installed: outside a function scope with a policy, `config()` reads process.env as before.
 */
export function installConfigScope(): void {
  setConfigScope(currentFunctionEnv);
}
