import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runUnderWorkerGrants } from '../../local/runtime/worker-scope.js';
import { awsClients } from '../../shared/aws/clients.js';
import { config } from '../../shared/base/config.js';
import { logger } from '../../shared/base/logger.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';

/**
 * `npm run worker` against the local stack (worker-scope.ts): what its calls may do is what the
 * worker's grants allow, the policy a GPU host gets on AWS; what it sees is the worker's environment.
 */
describe("npm run worker on the local stack: the worker's grants and environment", () => {
  let cloud: TestCloud;
  // Denials are logged as well as thrown.
  const warnings = vi.spyOn(logger, 'warn').mockImplementation(() => undefined);

  beforeAll(async () => {
    cloud = await setupTestCloud();
    cloud.applyEnv();
  });
  afterAll(() => warnings.mockRestore());

  const outcome = (call: () => Promise<unknown>) =>
    runUnderWorkerGrants(cloud.env, () =>
      call().then(
        () => 'allowed',
        (error: unknown) => (error instanceof Error ? error.name : String(error)),
      ),
    );

  it('may consume the work queue and not send to it', async () => {
    const receive = () =>
      awsClients().sqs.send(
        new ReceiveMessageCommand({ QueueUrl: config().workQueueUrl, WaitTimeSeconds: 0 }),
      );
    const send = () =>
      awsClients().sqs.send(new SendMessageCommand({ QueueUrl: config().workQueueUrl, MessageBody: '{}' }));
    expect(await outcome(receive)).toBe('allowed');
    expect(await outcome(send)).toBe('AccessDeniedException');
    expect(warnings).toHaveBeenCalledWith(
      'local runtime: call denied by the function grants',
      expect.objectContaining({ function: 'worker', action: 'sqs:SendMessage' }),
    );
  });

  it("sees the worker's variables only", async () => {
    expect(await outcome(async () => config().table('prefixes'))).toBe('allowed');
    expect(await outcome(async () => config().queueUrl('workDlq'))).toBe('ConfigError');
  });
});
