import { InfrastructureError } from '../../base/errors.js';

/** Stored prefix bytes fail their digest or their structure. The reader turns it into "regenerate". */
export class PrefixCorruptError extends InfrastructureError {}
