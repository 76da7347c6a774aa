import { type BenchResult, formatTable, writeResult } from './harness.js';

/**
 * `npm run bench -- NAME [--quick]`: runs one benchmark module `bench/NAME.ts`, which exports
 * `run({ quick }): Promise<BenchResult>`, prints its table and writes `bench/results/NAME.json`.
 */
const args = process.argv.slice(2);
const quick = args.includes('--quick');
const name = args.find((arg) => !arg.startsWith('--'));
if (!name || !/^[a-z0-9-]+$/.test(name)) {
  console.error('usage: npm run bench -- NAME [--quick]   (NAME is a file bench/NAME.ts)');
  process.exit(2);
}
const module = (await import(`./${name}.js`)) as {
  run?: (options: { quick: boolean }) => Promise<BenchResult>;
};
if (typeof module.run !== 'function') {
  console.error(`bench/${name}.ts does not export run()`);
  process.exit(2);
}
const result = await module.run({ quick });
console.log(formatTable(result));
console.log(`\nwritten: ${writeResult(result)}`);
process.exit(0);
