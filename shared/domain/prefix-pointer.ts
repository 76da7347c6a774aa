/**
 * The pointer a sample's future carries to its committed generation prefix (P4a). It is stored on
 * records, so it is declared here, below the prefix store that writes and verifies what it points at.
 */

/** One cut of one call as stored: its group's commit record and the rows' attempt and layout. */
export interface PrefixSegment {
  /** Key of the group commit record that vouches for this cut's rows. */
  readonly group: string;
  readonly attempt: string;
  readonly cut: number;
  /** Number of stored items (chunks) of this cut's row. */
  readonly chunks: number;
}

/**
 * A call's latest committed prefix (the pointer a future carries, P4a). Each cut stores only the
 * tokens generated since the previous one, so the prefix is the ordered list of its cuts.
 */
export interface PrefixPointer {
  readonly callId: string;
  /** Content id of the sampler checkpoint the tokens were generated with. */
  readonly contentId: string;
  /** Total tokens in the prefix. */
  readonly length: number;
  /** Chain hash over every cut, in order. */
  readonly chain: string;
  readonly weightVersion: number;
  readonly segments: readonly PrefixSegment[];
}
