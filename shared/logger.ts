import { Logger } from '@aws-lambda-powertools/logger';

/**
 * The one configured logger. Never log payloads, tokens or API keys: log ids and counts.
 * Level from POWERTOOLS_LOG_LEVEL (default INFO; the local runtime and tests set WARN).
 */
export const logger = new Logger({ serviceName: 'tinker-serverless' });
