// The status page's client: polls status/data every 2 s and renders it. No framework, no external
// assets; text goes in through textContent only, so ids from the tables can never inject markup.
// Served by the API (body data-auth="operator-key"), it asks once for an operator key, keeps it in
// sessionStorage (this tab only, gone when it closes) and sends it as X-API-Key.
const REFRESH_MS = 2000;
const KEY_STORAGE = 'tinker-serverless.operator-key';
const needsKey = document.body.dataset.auth === 'operator-key';

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className !== undefined) node.className = className;
  return node;
}

// sessionStorage throws where storage is disabled: the key then lasts as long as the page.
let keyInMemory;
function readKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) ?? undefined;
  } catch {
    return keyInMemory;
  }
}
function writeKey(key) {
  keyInMemory = key;
  try {
    if (key === undefined) sessionStorage.removeItem(KEY_STORAGE);
    else sessionStorage.setItem(KEY_STORAGE, key);
  } catch {
    // keyInMemory holds it.
  }
}

function renderColumns(columns) {
  const row = document.getElementById('models-columns');
  if (row.childElementCount === columns.length) return;
  row.replaceChildren(
    ...columns.map((name) => {
      const th = element('th', name);
      th.scope = 'col';
      return th;
    }),
  );
}

function renderRows(display) {
  const body = document.querySelector('#models tbody');
  body.replaceChildren(
    ...display.rows.map((cells, index) => {
      const tr = element('tr');
      tr.dataset.modelId = display.model_ids[index];
      cells.forEach((text, column) => {
        const cell = element(column === 0 ? 'th' : 'td', text);
        if (column === 0) cell.scope = 'row';
        if (text.includes('EXPIRED')) cell.className = 'expired';
        tr.append(cell);
      });
      return tr;
    }),
  );
  document.getElementById('empty').hidden = display.rows.length > 0;
}

function renderTotals(totals) {
  document.getElementById('totals').replaceChildren(
    ...totals.map(([label, value]) => {
      const group = element('div');
      group.append(element('dt', label), element('dd', value));
      return group;
    }),
  );
}

// Rebuilt only when the text changes: the section is an alert, announced again on every change.
function renderDeadLetterWarnings(warnings) {
  const list = document.getElementById('dead-letter-warnings');
  const text = warnings.join('\n');
  if (list.dataset.shown === text) return;
  list.dataset.shown = text;
  list.replaceChildren(...warnings.map((warning) => element('p', warning)));
  document.getElementById('dead-letters').hidden = warnings.length === 0;
}

function render(status) {
  document.getElementById('pool-name').textContent = status.pool;
  renderDeadLetterWarnings(status.display.dead_letter_warnings ?? []);
  const banner = document.getElementById('drain-banner');
  banner.hidden = status.display.banner === undefined;
  banner.textContent = status.display.banner ?? '';
  renderTotals(status.display.totals);
  renderColumns(status.display.columns);
  renderRows(status.display);
  document.getElementById('updated').textContent =
    `Updated ${new Date(status.generated_at).toLocaleTimeString()}.`;
  document.getElementById('picture').hidden = false;
}

let timer;
let failing = false;
// Bumped whenever the key changes: an answer to a request made with the previous key is dropped.
let generation = 0;

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(refresh, REFRESH_MS);
}

/** Stops polling and asks for a key; `problem` says why the last one was refused. */
function askForKey(problem) {
  generation += 1;
  clearTimeout(timer);
  writeKey(undefined);
  document.getElementById('picture').hidden = true;
  document.getElementById('key-actions').hidden = true;
  document.getElementById('connection').textContent = '';
  const shown = document.getElementById('key-problem');
  shown.hidden = problem === undefined;
  shown.textContent = problem ?? '';
  document.getElementById('key-panel').hidden = false;
  document.getElementById('key-input').focus();
}

async function refresh() {
  const connection = document.getElementById('connection');
  const key = readKey();
  if (needsKey && key === undefined) return askForKey();
  const asked = generation;
  try {
    const answer = await fetch('status/data', {
      cache: 'no-store',
      headers: key === undefined ? {} : { 'X-API-Key': key },
    });
    const body = await answer.json();
    if (asked !== generation) return;
    if (answer.status === 401 || answer.status === 403) {
      return askForKey(`${body.error ?? `HTTP ${answer.status}`} (HTTP ${answer.status})`);
    }
    if (!answer.ok) throw new Error(body.error ?? `HTTP ${answer.status}`);
    render(body);
    if (failing) connection.textContent = 'Reconnected.';
    failing = false;
  } catch (error) {
    if (asked !== generation) return;
    // Announced once per outage; the last good picture stays on screen.
    if (!failing) connection.textContent = `Cannot read the status: ${error.message}. Retrying...`;
    failing = true;
  }
  schedule();
}

document.getElementById('key-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = document.getElementById('key-input');
  const key = input.value.trim();
  if (key === '') return;
  input.value = '';
  generation += 1;
  writeKey(key);
  document.getElementById('key-panel').hidden = true;
  document.getElementById('key-actions').hidden = false;
  refresh();
});

document.getElementById('forget-key').addEventListener('click', () => askForKey());

if (needsKey && readKey() !== undefined) document.getElementById('key-actions').hidden = false;
refresh();
