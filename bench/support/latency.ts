import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';

/**
 * A declared simulation of in-region round trips: a fixed delay before every HTTP attempt a client
 * sends (the local cloud answers over loopback, so calls there cost only the emulator's own work).
 * Concurrent calls wait concurrently, as real round trips do.
 */
export function injectRoundTripDelay(client: DynamoDBClient, delayMs: number): void {
  if (!(delayMs > 0)) return;
  client.middlewareStack.add(
    (next) => async (args) => {
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      return next(args);
    },
    // After the retry middleware (finalizeRequest, high), so each attempt pays the delay.
    { step: 'finalizeRequest', name: 'benchRoundTripDelay', priority: 'low' },
  );
}
