/**
 * Stack outputs that tools outside the stack read from `cdk deploy --outputs-file` (logical ids at the
 * stack's top level, so the keys are stable). Each holds a JSON map of environment variables.
 */
export const STACK_ENV_OUTPUTS = {
  /** What an operator's tools need (the CLI's `--env-file`): every resource's variable and the settings. */
  operator: 'OperatorEnv',
  /** What `npm run worker` on an external (GPU) host needs: the worker function's variables. */
  worker: 'WorkerEnv',
} as const;
