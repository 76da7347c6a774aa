// Placeholder until the sweeper lands.
export async function handler(_event: Record<string, unknown>): Promise<void> {}
