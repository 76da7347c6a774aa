import type { PlanLimits } from './limits.js';

/**
 * The work item's request and token caps. A unit larger than the token cap still fits an empty
 * work item, alone: otherwise it could never be dispatched.
 */
export class WorkItemBudget {
  requests = 0;
  tokens = 0;

  constructor(private readonly limits: PlanLimits) {}

  fits(tokens: number): boolean {
    if (this.requests + 1 > this.limits.maxWorkItemRequests) return false;
    return this.requests === 0 || this.tokens + tokens <= this.limits.maxWorkItemTokens;
  }

  add(tokens: number): void {
    this.requests++;
    this.tokens += tokens;
  }

  /** Which cap refused the last unit that did not fit. */
  exhaustedBy(): 'work_item_requests' | 'work_item_tokens' {
    return this.requests >= this.limits.maxWorkItemRequests ? 'work_item_requests' : 'work_item_tokens';
  }
}
