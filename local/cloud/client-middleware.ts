import type {
  HandlerExecutionContext,
  InitializeHandler,
  InitializeHandlerArguments,
  InitializeHandlerOutput,
} from '@smithy/types';

/**
 * An `initialize`-step middleware on any SDK client (DynamoDB, S3, SQS), typed without each client's
 * own input and output types: the local runtime's grant enforcement and the test and chaos fault
 * layers add theirs to every client the same way.
 */
export type InitializeNext = InitializeHandler<object, object>;
export type InitializeArgs = InitializeHandlerArguments<object>;
export type InitializeOutput = InitializeHandlerOutput<object>;
export type InitializeMiddleware = (next: InitializeNext, context: HandlerExecutionContext) => InitializeNext;

/** The part of a client's middleware stack used here. */
export interface InitializeStack {
  add(
    middleware: InitializeMiddleware,
    options: { step: 'initialize'; priority: 'high'; name: string; override: boolean },
  ): void;
  remove(name: string): boolean;
}

/** A client's middleware stack, seen through `InitializeStack`. */
export function initializeStackOf(client: { readonly middlewareStack: unknown }): InitializeStack {
  return client.middlewareStack as InitializeStack;
}
