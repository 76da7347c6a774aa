import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type { CloudEndpoints } from '../../local/cloud/cloud.js';

/**
 * The local cloud (DynamoDB Local, fauxqs) in a child process, so a bench's `process.cpuUsage()`
 * counts its own work only: fauxqs otherwise serves S3 and SQS in the bench's own process.
 */

const THIS_FILE = fileURLToPath(import.meta.url);

if (process.argv.includes('--cloud-child')) await serveCloud();

/** Child mode: run the local cloud, print its endpoints, stop when the parent closes stdin. */
async function serveCloud(): Promise<never> {
  const { startLocalCloud } = await import('../../local/cloud/cloud.js');
  const cloud = await startLocalCloud();
  process.stdout.write(`${JSON.stringify(cloud.endpoints)}\n`);
  await new Promise<void>((resolve) => {
    process.stdin.on('end', resolve);
    process.stdin.on('close', resolve);
    process.stdin.resume();
  });
  await cloud.stop();
  process.exit(0);
}

export type CloudChild = ChildProcessByStdio<Writable, Readable, null>;

export async function startCloudChild(): Promise<{ endpoints: CloudEndpoints; child: CloudChild }> {
  const child = spawn(process.execPath, ['--import', 'tsx', THIS_FILE, '--cloud-child'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  });
  const lines = createInterface({ input: child.stdout });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`the cloud child exited early (code ${code})`)));
  });
  lines.close();
  return { endpoints: JSON.parse(first) as CloudEndpoints, child };
}

export async function stopCloudChild(child: CloudChild): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stdin.end();
  const timer = setTimeout(() => child.kill('SIGTERM'), 15_000);
  await exited;
  clearTimeout(timer);
}
