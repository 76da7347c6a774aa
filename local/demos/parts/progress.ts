/**
 * A progress bar: one line redrawn in place on a terminal, one plain line per update otherwise (logs,
 * CI, a pipe), so the output stays readable either way.
 */
export class ProgressBar {
  readonly #tty: boolean;

  constructor(
    private readonly total: number,
    private readonly out: NodeJS.WriteStream = process.stdout,
    private readonly width = 30,
  ) {
    this.#tty = out.isTTY === true;
  }

  /** Draws the empty bar on a terminal; plain output starts with the first update. */
  start(label: string): void {
    if (this.#tty) this.update(0, label);
  }

  update(done: number, label: string): void {
    const filled = Math.round((done / this.total) * this.width);
    const bar = `${'#'.repeat(filled)}${'.'.repeat(this.width - filled)}`;
    const counter = `${String(done).padStart(String(this.total).length)}/${this.total}`;
    if (this.#tty) this.out.write(`\r\x1b[K  [${bar}] ${counter}  ${label}`);
    else this.out.write(`  step ${counter}  ${label}\n`);
  }

  /** Ends the redrawn line (a no-op for plain lines). */
  finish(): void {
    if (this.#tty) this.out.write('\n');
  }
}
